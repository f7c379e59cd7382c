"""Which BLAS the MLX CPU backend uses, and re-running a command with OpenBLAS preloaded.

MLX's Linux CPU wheel links the reference BLAS, several times slower than Debian's
OpenBLAS for training's large products and slower for decode too, with the same
logits to float32 rounding (`runner bench --no-openblas` against `runner bench` gives
the decode and prefill figures on a machine). `runner train-tiny`, `runner run` and
`runner bench` re-run themselves under it when it is installed (each has
--no-openblas); the chip fingerprint records which BLAS a run used. LD_PRELOAD only
takes effect when a process starts, hence re-exec.

Two more settings come with the re-run, both recorded with results:
- Small-row sgemm (runner/native/small_sgemm_blas.c, compiled here with the system C
  compiler on first use): Debian's OpenBLAS 0.3.21 packs both operands on every sgemm,
  which for the few-row products of a decode or verify pass costs more than the
  arithmetic. Preloaded ahead of OpenBLAS, it serves products of up to 256 rows with
  small AVX2 kernels that read each weight once for four rows, in both weight layouts
  (and a transposed or scaled one of up to four rows with one sgemv a row); training's
  large products still go to OpenBLAS. It serves every MLX user in the process
  alike (mlx-lm in `runner bench` too). BOTHROWS_NO_SMALL_SGEMM (set to anything) leaves
  it out.
- OPENBLAS_NUM_THREADS=1 unless set: the engine builds the next pass on the main
  thread while MLX's worker runs the current one, and on a 2-core machine a second
  OpenBLAS thread takes the core the main thread needs (`OPENBLAS_NUM_THREADS=2
  runner bench` against `runner bench` shows what it costs on a machine).
This file installs nothing: the Makefile's `openblas` step (`apt-get install
libopenblas0-pthread`) does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
)
_MARK = "BOTHROWS_BLAS_REEXEC"
OPT_OUT = "BOTHROWS_NO_OPENBLAS"  # set (to anything) to keep the reference BLAS everywhere
NO_SMALL_SGEMM = "BOTHROWS_NO_SMALL_SGEMM"
SMALL_SGEMM_SOURCE = Path(__file__).parent / "native" / "small_sgemm_blas.c"


def openblas_path() -> Optional[str]:
    return next((p for p in OPENBLAS_CANDIDATES if Path(p).exists()), None)


def small_sgemm_library() -> Optional[str]:
    """The compiled small-row sgemm library, built on first use into this Python
    environment (named by its source's hash); None, with a note, when no compiler works."""
    source = SMALL_SGEMM_SOURCE.read_bytes()
    out_dir = Path(sys.prefix) / "share" / "bothrows"
    lib = out_dir / f"small_sgemm_blas-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if lib.exists():
        return str(lib)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        print("runner: no C compiler (cc): measuring without the small-row sgemm", file=sys.stderr)
        return None
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [compiler, "-O3", "-shared", "-fPIC", "-o", str(tmp), str(SMALL_SGEMM_SOURCE), "-ldl"],
            capture_output=True,
            text=True,
        )
    except OSError as e:  # e.g. a read-only environment
        print(
            f"runner: cannot build into {out_dir} ({e}): measuring without the small-row sgemm",
            file=sys.stderr,
        )
        return None
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        print(
            f"runner: compiling {SMALL_SGEMM_SOURCE} failed, measuring without the small-row sgemm:\n"
            f"{done.stderr.strip()}",
            file=sys.stderr,
        )
        return None
    tmp.replace(lib)  # atomic: a concurrent run never loads a half-written file
    for old in out_dir.glob("small_sgemm_blas-*.so"):
        if old != lib:
            old.unlink(missing_ok=True)  # builds of earlier source versions
    return str(lib)


def preloaded() -> Optional[str]:
    """The OpenBLAS library this process was started with, if any."""
    return next((p for p in os.environ.get("LD_PRELOAD", "").split(":") if "openblas" in p), None)


def _is_cli() -> bool:
    """Only a process started as the `runner` command re-runs itself: a library caller
    (a test calling runner.cli.main in-process) must never be replaced by exec."""
    first = Path(sys.argv[0]) if sys.argv else Path()
    return first.name == "runner" or first.parts[-2:] == ("runner", "cli.py")


def argv_from(verb: str) -> list[str]:
    """The command line from the verb on, to re-run it."""
    return sys.argv[sys.argv.index(verb) :] if verb in sys.argv else [verb]


def describe() -> str:
    lib = preloaded()
    core = os.environ.get("OPENBLAS_CORETYPE")
    if lib is None:
        return "MLX's bundled reference BLAS (no OpenBLAS preloaded)"
    real = os.path.realpath(lib)
    threads = os.environ.get("OPENBLAS_NUM_THREADS")
    small = next((p for p in os.environ.get("LD_PRELOAD", "").split(":") if "small_sgemm" in p), None)
    return (
        f"OpenBLAS preloaded ({lib} -> {real}); OPENBLAS_CORETYPE={core or 'unset'}, "
        f"OPENBLAS_NUM_THREADS={threads or 'unset'}; small-row sgemm "
        f"{'preloaded (' + small + ')' if small else 'off'}"
    )


def reexec_with_openblas(argv: list[str]) -> None:
    """Replace this process with `python -m runner.cli <argv>` under LD_PRELOAD=OpenBLAS
    (with the small-row sgemm ahead of it) when the library exists and is not loaded
    yet; otherwise return and go on as is. OPENBLAS_CORETYPE is inherited unchanged;
    OPENBLAS_NUM_THREADS defaults to 1 (see the module notes). argv starts with the verb."""
    lib = openblas_path()
    if (
        sys.platform != "linux"
        or lib is None
        or preloaded()
        or os.environ.get(_MARK)
        or os.environ.get(OPT_OUT)
        or not _is_cli()
    ):
        return
    small = None if os.environ.get(NO_SMALL_SGEMM) else small_sgemm_library()
    env = dict(os.environ, **{_MARK: "1"})
    env["LD_PRELOAD"] = ":".join(p for p in (small, lib, os.environ.get("LD_PRELOAD")) if p)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    print(
        f"{argv[0]}: re-running with LD_PRELOAD={env['LD_PRELOAD']} (Debian's OpenBLAS instead of MLX's "
        f"bundled reference BLAS"
        f"{', small-row products by runner/native/small_sgemm_blas.c' if small else ''}; "
        f"OPENBLAS_NUM_THREADS={env['OPENBLAS_NUM_THREADS']}; --no-openblas keeps the reference)",
        file=sys.stderr,
        flush=True,
    )
    os.execve(sys.executable, [sys.executable, "-m", "runner.cli", *argv], env)
