"""The small-row sgemm (runner/native/small_sgemm_blas.c): compiled here and preloaded
into a fresh Python that runs MLX matmuls, it gives the products numpy gives, in every
operand layout and with alpha/beta, and it serves exactly the row-major products it
should: the kernels' up to 256 rows, one sgemv a row for the rest up to four rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runner import blas
from runner.experiments import chip

SIMD = all(f in Path("/proc/cpuinfo").read_text().split() for f in ("avx2", "fma"))

PROBE = r"""
import ctypes, json, sys
import mlx.core as mx, numpy as np
lib = ctypes.CDLL(sys.argv[1])
lib.small_sgemm_calls.restype = ctypes.c_long
rng = np.random.default_rng(0)
out = []
for m in (1, 2, 3, 4, 5, 9, 17, 256, 257):
    for k, n in ((128, 512), (33, 7), (5, 130), (64, 4096)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        c = rng.standard_normal((m, n)).astype(np.float32)
        exact = a.astype(np.float64) @ w.astype(np.float64)
        wide = mx.array(np.concatenate([a, a], axis=1))                         # lda = 2k
        before = lib.small_sgemm_calls()
        got = {
            "nn": mx.array(a) @ mx.array(w),                                    # kernel (or sgemv)
            "nt": mx.array(a) @ mx.array(np.ascontiguousarray(w.T)).T,          # B stored n x k
            "tn": mx.array(np.ascontiguousarray(a.T)).T @ mx.array(w),          # A transposed: sgemv
            "strided": wide[:, :k] @ mx.array(w),
            "addmm": mx.addmm(mx.array(c), mx.array(a), mx.array(w), alpha=0.5, beta=2.0),  # sgemv
        }
        mx.eval(list(got.values()))
        want = {"nn": exact, "nt": exact, "tn": exact, "strided": exact, "addmm": 0.5 * exact + 2.0 * c}
        err = max(
            float(np.abs(np.array(got[key]) - want[key]).max() / np.abs(want[key]).max()) for key in got
        )
        out.append({"m": m, "k": k, "n": n, "err": err, "served": lib.small_sgemm_calls() - before,
                    "products": len(got)})
print(json.dumps({"cases": out, "maps": open("/proc/self/maps").read().count("small_sgemm_blas")}))
"""


def test_products_equal_numpys_and_only_small_ones_are_served_here():
    lib = blas.small_sgemm_library()
    assert lib is not None and Path(lib).exists(), "the C compiler (cc) is part of this machine's setup"
    # Preloaded ahead of whatever BLAS MLX links (the reference one in the test run).
    env = dict(os.environ, LD_PRELOAD=lib)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, lib], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["maps"] > 0
    for case in result["cases"]:
        assert case["err"] < 1e-5, case
        # nn, nt and strided go to the kernels up to 256 rows; tn and addmm (A transposed,
        # alpha/beta) to one sgemv a row up to four rows; the rest to the next sgemm.
        small = case["m"] <= 4
        kernel = 3 if case["m"] <= 256 and SIMD else (3 if small else 0)  # no AVX2: sgemv rows
        assert case["served"] == kernel + (2 if small else 0), case


def test_library_is_reused_and_named_in_the_fingerprint():
    lib = blas.small_sgemm_library()
    assert blas.small_sgemm_library() == lib  # built once per source version
    assert chip._BLAS_KINDS[0][0] in Path(lib).name


def test_no_compiler_or_unwritable_folder_means_measuring_without_it(tmp_path, monkeypatch, capsys):
    """Either case leaves a note and no library, never a failed measurement."""
    monkeypatch.setattr(blas.sys, "prefix", str(tmp_path / "env"))
    monkeypatch.setattr(blas.shutil, "which", lambda name: None)
    assert blas.small_sgemm_library() is None
    assert "no C compiler" in capsys.readouterr().err
    monkeypatch.undo()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    monkeypatch.setattr(blas.sys, "prefix", str(locked))
    try:
        if os.access(locked, os.W_OK):  # root ignores the mode: make the folder a file instead
            locked.chmod(0o700)
            (locked / "share").write_text("not a folder")
        assert blas.small_sgemm_library() is None
        assert "measuring without the small-row sgemm" in capsys.readouterr().err
    finally:
        locked.chmod(0o700)
