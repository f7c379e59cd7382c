"""Which BLAS the MLX CPU backend uses, and re-running a command with OpenBLAS preloaded.

MLX's Linux CPU wheel links the reference BLAS: on this 2-core machine a training step
of the tiny model took ~50 s with it and ~5 s with Debian's OpenBLAS preloaded (logits
agree to 2.5e-6). LD_PRELOAD only takes effect when a process starts, hence re-exec.
This file does not install anything: `apt-get install libopenblas0-pthread` does.
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


def openblas_path() -> Optional[str]:
    return next((p for p in OPENBLAS_CANDIDATES if Path(p).exists()), None)


def preloaded() -> Optional[str]:
    """The OpenBLAS library this process was started with, if any."""
    return next((p for p in os.environ.get("LD_PRELOAD", "").split(":") if "openblas" in p), None)


def describe() -> str:
    lib = preloaded()
    core = os.environ.get("OPENBLAS_CORETYPE")
    if lib is None:
        return "MLX's bundled reference BLAS (no OpenBLAS preloaded)"
    real = os.path.realpath(lib)
    return f"OpenBLAS preloaded ({lib} -> {real}); OPENBLAS_CORETYPE={core or 'unset'}"


def reexec_with_openblas(argv: list[str]) -> None:
    """Replace this process with `python -m runner.cli <argv>` under LD_PRELOAD=OpenBLAS
    when the library exists and is not loaded yet; otherwise return and go on as is.
    OPENBLAS_CORETYPE, if set here, is inherited unchanged."""
    lib = openblas_path()
    if sys.platform != "linux" or lib is None or preloaded() or os.environ.get(_MARK):
        return
    env = dict(os.environ, **{_MARK: "1"})
    env["LD_PRELOAD"] = ":".join(p for p in (lib, os.environ.get("LD_PRELOAD")) if p)
    print(f"train-tiny: re-running with LD_PRELOAD={lib} (Debian's OpenBLAS; ~10x faster "
          f"than MLX's reference BLAS here)", file=sys.stderr, flush=True)
    os.execve(sys.executable, [sys.executable, "-m", "runner.cli", *argv], env)
