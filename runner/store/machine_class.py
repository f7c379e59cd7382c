"""A machine class: what a reader calls the machine, above the instance (one VM) that
measured.

A chip fingerprint (`experiments/chip.py`) names an *instance*: it holds the kernel build
and the exact memory, so every fresh cloud VM of one machine type is a new chip_id. The
class is what the pages' columns are: the CPU model with the marketing noise and clock
removed, the logical cores, the memory rounded to a bucket, the accelerator (MLX's device
when it is not the CPU) and the BLAS family the runner measured with. Its label reads
"Intel Xeon, 2 cores", never a hash. A declared name (`runner run --machine-class NAME`
or `BOTHROWS_MACHINE_CLASS`) replaces the computed class, as asv's machine name does.

Pure functions of a chip's stored fields: the store computes a chip's class when it adds
the chip, and for chips stored before classes existed (migration 9) from their columns.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import NamedTuple

ENV = "BOTHROWS_MACHINE_CLASS"
GIB = 1 << 30
# A label a page can show and a shell can pass: letters, digits, spaces and a few
# separators, starting with a letter or digit, at most 64 characters.
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ,.()+_/-]{0,63}")
# Words in a CPU's model name that tell two machine types nothing: trademarks, the clock
# (a VM may or may not append it), "CPU"/"Processor", core counts and stepping.
_NOISE = (
    r"\((?:R|TM|tm|r)\)",
    r"@\s*[\d.]+\s*[GM]Hz",
    r"\b[\d.]+\s*[GM]Hz\b",
    r"\b(?:CPU|Processor)\b",
    r"\b\d+-Core\b",
    r",?\s*stepping\s*\d+",
    r",?\s*family\s*\d+.*$",
)


class MachineClass(NamedTuple):
    class_id: str  # sha256 of what defines the class, 16 hex (what pages key on)
    label: str  # what a reader calls it
    declared: bool  # named by hand rather than computed


def cpu_model(name: str) -> str:
    """'Intel(R) Xeon(R) Processor @ 2.80GHz' -> 'Intel Xeon'."""
    out = str(name)
    for pattern in _NOISE:
        out = re.sub(pattern, " ", out, flags=re.IGNORECASE)
    return " ".join(out.replace(",", " ").split()) or "unknown CPU"


def memory_bucket_gib(memory_bytes: int) -> int:
    """Memory rounded to the nearest 8 GiB (to the nearest GiB under 8): two VMs of one type
    differ by a few MB of firmware reservations."""
    gib = max(int(memory_bytes), 0) / GIB
    return max(1, round(gib)) if gib < 8 else 8 * max(1, round(gib / 8))


def blas_family(blas: str) -> str:
    """The BLAS family a fingerprint's `blas` field names: the libraries serving products,
    without versions, thread settings or our small-sgemm library (our code, which the
    run's code version records). The reference BLAS MLX's wheel links counts only alone."""
    kinds = set(re.findall(r"\(([^,)]+)", str(blas)))
    kinds = {k for k in kinds if not k.startswith("sgemm of")}
    if len(kinds) > 1:
        kinds.discard("reference")
    return " + ".join(sorted(kinds)) or str(blas) or "unknown"


def problem_with_label(name: object) -> str | None:
    """Why a declared class name cannot be a label (None: it can)."""
    if not isinstance(name, str) or not LABEL.fullmatch(name.strip()):
        return (
            f"machine class {name!r} cannot be a label: use letters, digits, spaces and , . ( ) + _ / -, "
            "starting with a letter or digit, at most 64 characters"
        )
    return None


def declared(name: str) -> MachineClass:
    problem = problem_with_label(name)
    if problem:
        raise ValueError(problem)
    label = " ".join(name.split())
    return MachineClass(_digest({"declared": label}), label, True)


def computed(name: str, device: str, cores: int, memory_bytes: int, blas: str) -> MachineClass:
    model = cpu_model(name)
    accelerator = None if str(device).lower() == "cpu" else str(device).upper()
    defining = {
        "cpu": model,
        "cores": int(cores),
        "memory_gib": memory_bucket_gib(memory_bytes),
        "accelerator": accelerator,
        "blas": blas_family(blas),
    }
    label = f"{model}, {int(cores)} cores" + (f", {accelerator}" if accelerator else "")
    return MachineClass(_digest(defining), label, False)


def of_fingerprint(fingerprint: dict, declared_name: str | None = None) -> MachineClass:
    if declared_name:
        return declared(declared_name)
    return computed(
        fingerprint.get("name", ""),
        fingerprint.get("device", "cpu"),
        fingerprint.get("cores", 0),
        fingerprint.get("memory_bytes", 0),
        fingerprint.get("blas", ""),
    )


def _digest(defining: dict) -> str:
    canonical = json.dumps(defining, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
