"""Which BLAS the MLX CPU backend uses, and re-running a command with OpenBLAS preloaded.

MLX's Linux CPU wheel links the reference BLAS: on this 2-core machine a training step
of the tiny model took ~50 s with it and ~5 s with Debian's OpenBLAS preloaded (logits
agree to 2.5e-6), and the engine decodes ~1.5x faster. `runner train-tiny`, `runner run`
and `runner bench` re-run themselves under it when it is installed (each has
--no-openblas); the chip fingerprint records which BLAS a run used. LD_PRELOAD only
takes effect when a process starts, hence re-exec. OpenBLAS's thread count is left to
OPENBLAS_NUM_THREADS (recorded with results): pinned to one thread, this engine decoded
no faster (1.01x over 12 interleaved rounds); mlx-lm, which builds the next graph while
the last one runs, was about 15% faster in separate `runner bench` runs (not interleaved). This file installs nothing: the
Makefile's `openblas` step (`apt-get install libopenblas0-pthread`) does.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
)
_MARK = "BOTHROWS_BLAS_REEXEC"
OPT_OUT = "BOTHROWS_NO_OPENBLAS"  # set (to anything) to keep the reference BLAS everywhere


def openblas_path() -> Optional[str]:
    return next((p for p in OPENBLAS_CANDIDATES if Path(p).exists()), None)


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
    return sys.argv[sys.argv.index(verb):] if verb in sys.argv else [verb]


def describe() -> str:
    lib = preloaded()
    core = os.environ.get("OPENBLAS_CORETYPE")
    if lib is None:
        return "MLX's bundled reference BLAS (no OpenBLAS preloaded)"
    real = os.path.realpath(lib)
    threads = os.environ.get("OPENBLAS_NUM_THREADS")
    return (f"OpenBLAS preloaded ({lib} -> {real}); OPENBLAS_CORETYPE={core or 'unset'}, "
            f"OPENBLAS_NUM_THREADS={threads or 'unset'}")


def reexec_with_openblas(argv: list[str]) -> None:
    """Replace this process with `python -m runner.cli <argv>` under LD_PRELOAD=OpenBLAS
    when the library exists and is not loaded yet; otherwise return and go on as is.
    OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS, if set here, are inherited unchanged.
    argv starts with the verb."""
    lib = openblas_path()
    if (sys.platform != "linux" or lib is None or preloaded() or os.environ.get(_MARK)
            or os.environ.get(OPT_OUT) or not _is_cli()):
        return
    env = dict(os.environ, **{_MARK: "1"})
    env["LD_PRELOAD"] = ":".join(p for p in (lib, os.environ.get("LD_PRELOAD")) if p)
    print(f"{argv[0]}: re-running with LD_PRELOAD={lib} (Debian's OpenBLAS instead of MLX's "
          f"bundled reference BLAS; --no-openblas keeps the reference)", file=sys.stderr, flush=True)
    os.execve(sys.executable, [sys.executable, "-m", "runner.cli", *argv], env)
