"""Which machine measured a run: the chip fingerprint, and the code version.

The fingerprint is a declared list of fields filled from the platform (asv-style):
name (CPU or SoC model), device (MLX's default device type), cores, memory_bytes, os,
mlx_version, blas (the BLAS library the MLX process actually loaded), python. Its hash
is the chip_id, so a new MLX, BLAS or Python is a new chip on the pages. Nothing here
varies from run to run on one machine (no hostname, no load, no clock).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

FIELDS = ("name", "device", "cores", "memory_bytes", "os", "mlx_version", "blas", "python")
_BLAS_KINDS = (
    ("small_sgemm", "sgemm of <= 256 rows: AVX2 kernels, or sgemv"),
    ("openblas", "OpenBLAS"),
    ("mkl", "Intel MKL"),
    ("blis", "BLIS"),
    ("accelerate", "Apple Accelerate"),
    ("libblas", "reference"),
)


def _sysctl(key: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_name() -> str:
    if platform.system() == "Darwin":
        return _sysctl("machdep.cpu.brand_string") or platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def core_count() -> int:
    # The cores this process may use: a container or taskset sees fewer than the host has.
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def memory_bytes() -> int:
    if platform.system() == "Darwin":
        value = _sysctl("hw.memsize")
        return int(value) if value.isdigit() else 0
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def blas_library() -> str:
    """The BLAS shared library mapped into this process once MLX has run a matmul."""
    import mlx.core as mx

    a = mx.ones((32, 32))
    mx.eval(a @ a)
    if platform.system() == "Darwin":
        return "Accelerate (Apple Accelerate)"  # MLX on macOS always links Accelerate
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "unknown"
    libs = sorted(
        {
            Path(line.split()[-1]).name
            for line in maps.splitlines()
            if re.search(r"(blas|mkl_rt|blis)[^/]*\.so", line.split()[-1], re.I)
        }
    )
    if not libs:
        return "none loaded"
    described = []
    for lib in libs:
        kind = next((k for key, k in _BLAS_KINDS if key in lib.lower()), "unknown kind")
        if kind == "OpenBLAS":  # its thread count changes decode speed (runner/blas.py)
            kind += f", OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}"
        described.append(f"{lib} ({kind})")
    return ", ".join(described)


def fingerprint() -> dict:
    import mlx.core as mx

    return {
        "name": cpu_name(),
        "device": mx.default_device().type.name,  # "cpu" | "gpu"
        "cores": core_count(),
        "memory_bytes": memory_bytes(),
        "os": platform.platform(),
        "mlx_version": mx.__version__,
        "blas": blas_library(),
        "python": platform.python_version(),
    }


def declare_machine_class(name: str | None) -> str | None:
    """`--machine-class NAME` (or $BOTHROWS_MACHINE_CLASS when no flag): the problem with
    the name, or None after putting it in the environment, where the re-run under OpenBLAS
    and `declared_machine_class` find it."""
    from runner.store.machine_class import ENV, problem_with_label

    where, name = ("--machine-class", name) if name is not None else (f"${ENV}", os.environ.get(ENV))
    if name is None:
        return None
    problem = problem_with_label(name)
    if problem:
        return f"{where}: {problem}"
    os.environ[ENV] = name
    return None


def declared_machine_class() -> str | None:
    """The machine class declared for this run (None: computed from the chip)."""
    from runner.store.machine_class import ENV

    return os.environ.get(ENV) or None


# Measurement folders are data, not code: a run's own output must not make the next
# run's code version "dirty".
DATA_PATHS = (":(exclude)reports/data/measurements",)


def code_version(repo: Path | None = None) -> str:
    """`git rev-parse HEAD`, plus "+dirty" when the tree (measurement folders aside) has
    changes; "unknown" outside git."""
    repo = repo or Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head:
        return "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--", ".", *DATA_PATHS) else "")
