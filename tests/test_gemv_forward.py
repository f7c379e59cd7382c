"""GEMM->GEMV forwarding (runner/native/gemv_forward_blas.c): compiled here, preloaded
into a fresh Python that runs MLX matmuls, it gives the products numpy gives, and it
forwards exactly the row-major products of one to four rows."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runner import blas
from runner.experiments import chip

PROBE = r"""
import ctypes, json, sys
import mlx.core as mx, numpy as np
shim = ctypes.CDLL(sys.argv[1])
shim.gemv_forward_calls.restype = ctypes.c_long
rng = np.random.default_rng(0)
out = []
for m in (1, 2, 3, 4, 5, 8):
    for k, n in ((128, 512), (33, 7), (5, 130)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        c = rng.standard_normal((m, n)).astype(np.float32)
        exact = a.astype(np.float64) @ w.astype(np.float64)
        before = shim.gemv_forward_calls()
        got = {
            "nn": mx.array(a) @ mx.array(w),
            "nt": mx.array(a) @ mx.array(np.ascontiguousarray(w.T)).T,          # B transposed
            "tn": mx.array(np.ascontiguousarray(a.T)).T @ mx.array(w),          # A transposed
            "addmm": mx.addmm(mx.array(c), mx.array(a), mx.array(w), alpha=0.5, beta=2.0),
        }
        mx.eval(list(got.values()))
        want = {"nn": exact, "nt": exact, "tn": exact, "addmm": 0.5 * exact + 2.0 * c}
        err = max(float(np.abs(np.array(got[key]) - want[key]).max() / np.abs(want[key]).max()) for key in got)
        out.append({"m": m, "k": k, "n": n, "err": err, "forwarded": shim.gemv_forward_calls() - before})
print(json.dumps({"cases": out, "maps": open("/proc/self/maps").read().count("gemv_forward_blas")}))
"""


def test_forwarded_products_equal_numpys_and_only_small_ones_are_forwarded():
    lib = blas.gemv_forward_library()
    assert lib is not None and Path(lib).exists(), "the C compiler (cc) is part of this machine's setup"
    # Preloaded ahead of whatever BLAS MLX links (the reference one in the test run).
    env = dict(os.environ, LD_PRELOAD=lib)
    done = subprocess.run([sys.executable, "-c", PROBE, lib], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["maps"] > 0
    for case in result["cases"]:
        assert case["err"] < 1e-5, case
        assert case["forwarded"] == (4 if case["m"] <= 4 else 0), case  # nn, nt, tn, addmm


def test_library_is_reused_and_named_in_the_fingerprint():
    lib = blas.gemv_forward_library()
    assert blas.gemv_forward_library() == lib           # built once per source version
    assert any(key in Path(lib).name for key, _ in chip._BLAS_KINDS[:1])
