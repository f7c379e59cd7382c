"""Simulated measurements from a known hierarchical model, for the interval coverage harness.

- An experiment has R rounds of two arms (a, b); each round of each arm is a run of n
  requests. A request's time is lognormal: the round's drift (shared by both arms of the
  round), the arm's own moment in the round, the prompt (request k is the same prompt in
  both arms of a round), and noise; one request in a hundred is an outlier 4x slower.
- Arm b is `gain` faster (its times divided by 1 + gain).
- A run's figures are computed as `sql.RUN_METRICS` computes them: a mean over requests
  (tok/s), percentiles over requests (linear interpolation, as DuckDB's quantile_cont), a
  run total (tokens over summed time). Every figure scales with the arm's speed, so the
  true gain of b over a is `gain` for each of them.
- A mean or total's true value is its expectation over runs, estimated once per request
  count from many simulated runs. A percentile's is the quantile of the request times
  themselves (over rounds' drift and everything else), which a run's percentile of few
  requests estimates with a bias (a run's p99 of 16 requests is nearly its slowest); its
  expectation over runs is also given, for the table.
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

import numpy as np

ROUND_SD = 0.04  # the machine's drift from round to round (log scale)
MOMENT_SD = 0.015  # each arm's cell runs at its own moment of the round
PROMPT_SD = 0.25
NOISE_SD = 0.10
OUTLIER_SHARE = 0.01
OUTLIER_FACTOR = 4.0
TOKENS = 64  # new tokens a request


class RunFigures(NamedTuple):
    """Each (experiments, rounds) array of one arm's per-run figures."""

    mean_tps: np.ndarray
    p50_ms: np.ndarray
    p99_ms: np.ndarray
    total_tps: np.ndarray


def request_times(rng: np.random.Generator, shape: tuple, gain: float) -> tuple[np.ndarray, np.ndarray]:
    """(times of arm a, times of arm b), each of `shape` = (experiments, rounds, requests), in ms."""
    e, r, n = shape
    drift = rng.normal(0.0, ROUND_SD, (e, r, 1))
    prompt = rng.normal(0.0, PROMPT_SD, (e, r, n))

    def arm() -> np.ndarray:
        log_t = drift + rng.normal(0.0, MOMENT_SD, (e, r, 1)) + prompt + rng.normal(0.0, NOISE_SD, (e, r, n))
        outlier = rng.random((e, r, n)) < OUTLIER_SHARE
        return 100.0 * np.exp(log_t) * np.where(outlier, OUTLIER_FACTOR, 1.0)

    return arm(), arm() / (1.0 + gain)


def figures(times: np.ndarray) -> RunFigures:
    return RunFigures(
        mean_tps=(TOKENS * 1000.0 / times).mean(axis=-1),
        p50_ms=np.quantile(times, 0.5, axis=-1),
        p99_ms=np.quantile(times, 0.99, axis=-1),
        total_tps=TOKENS * 1000.0 * times.shape[-1] / times.sum(axis=-1),
    )


@cache
def true_quantile(seed: int, q: float, draws: int = 2_000_000) -> float:
    """The q-quantile of one request's time, drift and outliers included."""
    rng = np.random.default_rng(seed)
    return float(np.quantile(request_times(rng, (draws // 1000, 1, 1000), 0.0)[0], q))


@cache
def true_levels(seed: int, requests: int, runs: int = 20000) -> RunFigures:
    """The expectation of each per-run figure of arm a at this request count."""
    rng = np.random.default_rng(seed)
    chunks = [figures(request_times(rng, (runs // 10, 1, requests), 0.0)[0]) for _ in range(10)]
    return RunFigures(*(float(np.mean([getattr(c, f) for c in chunks])) for f in RunFigures._fields))


# Instances of one machine class (issue 38): each VM runs the whole class's work at its own
# speed, the same factor for both arms (its prefill-sized products measured 2.07x apart on
# two "same chip" Xeon VMs here: ln 2.07 / sqrt 2 = 0.51 as the instances' log-scale SD),
# and may favour one arm a little (an instance x arm interaction, GAIN_SD on log scale).
INSTANCE_SD = 0.51


def instance_request_times(
    rng: np.random.Generator,
    experiments: int,
    instances: int,
    rounds: int,
    requests: int,
    gain: float,
    gain_sd: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(times of arm a, times of arm b), each (experiments, instances * rounds, requests):
    every instance's rounds are blocks, its speed factor shared by both arms of each."""
    a, b = request_times(rng, (experiments, instances * rounds, requests), gain)
    speed = np.repeat(rng.normal(0.0, INSTANCE_SD, (experiments, instances, 1)), rounds, axis=1)
    favour = np.repeat(rng.normal(0.0, gain_sd, (experiments, instances, 1)), rounds, axis=1)
    return a * np.exp(speed), b * np.exp(speed - favour)
