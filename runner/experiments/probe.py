"""A fixed machine probe, run once per `runner run` before its first cell, stored with every
run: what a chip's fingerprint cannot tell apart (two hosts behind one generic CPU name).

- prefill_gflops: a prefill-sized float32 matmul (128 x 256 by 256 x 1024, the tiny
  checkpoint's MLP shape over a 128-token chunk), GFLOP/s.
- decode_gflops: decode-sized small-row products (4 rows by 256 x 1024, what a batch of
  four decode rows costs; under the measuring environment our small-row library serves
  them, runner/blas.py), GFLOP/s.
- read_gbps: a memory read (the sum of a 32 MiB float32 array), GB/s.
Each is the best of a few timed repetitions after a warm-up, in the process that measures
(so under the same BLAS, threads and preloads); the whole probe takes well under a second.
Figures are for comparing machines, never published as results.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

PREFILL = (128, 256, 1024)  # rows, inner, columns
DECODE = (4, 256, 1024)
READ_BYTES = 32 << 20
REPEATS = 3


@dataclass(frozen=True)
class Probe:
    prefill_gflops: float
    decode_gflops: float
    read_gbps: float

    def columns(self) -> dict[str, float]:
        return {f"probe_{k}": v for k, v in asdict(self).items()}


def _best(fn, repeats: int) -> float:
    fn()  # warm-up: allocation and any lazy compilation stay out of the figure
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return max(best, 1e-9)


def measure() -> Probe:
    import mlx.core as mx

    key = mx.random.key(0)
    k1, k2 = mx.random.split(key, 2)

    def products(shape, loops: int):
        m, k, n = shape
        a, b = mx.random.normal((m, k), key=k1), mx.random.normal((k, n), key=k2)
        mx.eval(a, b)

        def run():
            out = [a @ b for _ in range(loops)]
            mx.eval(out)

        return 2.0 * m * k * n * loops / _best(run, REPEATS) / 1e9

    prefill = products(PREFILL, 1)
    decode = products(DECODE, 16)
    data = mx.ones((READ_BYTES // 4,), dtype=mx.float32)
    mx.eval(data)
    read = READ_BYTES / _best(lambda: mx.eval(mx.sum(data)), REPEATS) / 1e9
    return Probe(round(prefill, 2), round(decode, 2), round(read, 2))
