"""`runner export NAME --format json`: one experiment's figures as other tools read them.

- Per chip, arm and concurrency cell: every figure a page shows for it (the mean over
  rounds of the newest complete runs) and its 95% interval, from the same View a page
  reads, so the numbers are the page's own.
- Keys follow `vllm bench serve --save-result` where it has a name (SAVE_RESULT_NAMES:
  request_throughput, output_throughput, mean/median/p99 ttft_ms, tpot, itl, e2el,
  completed); other figures keep bothrows' metric names. `intervals` holds [lo, hi] for
  each key that has one (a run-level figure from one round has none).
- The document's shape is `SCHEMA`; the README documents it.
This module renders no HTML; it reads through Reader and views.View.
"""

from __future__ import annotations

import json
import math

from runner.publish.sql.reader import Reader

from runner.publish.sql import sweep_queries
from runner.publish.metrics import METRICS
from runner.publish.stats.views import View

SCHEMA = "bothrows-summary/1"
# vllm bench serve's result key -> the bothrows metric it is
SAVE_RESULT_NAMES = {
    "completed": "completed",
    "request_throughput": "request_rps",
    "output_throughput": "aggregate_tps",
    "request_goodput": "goodput_rps",
    "mean_ttft_ms": "ttft_mean_ms",
    "median_ttft_ms": "ttft_p50_ms",
    "p90_ttft_ms": "ttft_p90_ms",
    "p99_ttft_ms": "ttft_p99_ms",
    "mean_tpot_ms": "tpot_mean_ms",
    "median_tpot_ms": "tpot_p50_ms",
    "p90_tpot_ms": "tpot_p90_ms",
    "p99_tpot_ms": "tpot_p99_ms",
    "mean_itl_ms": "itl_mean_ms",
    "median_itl_ms": "itl_p50_ms",
    "p90_itl_ms": "itl_p90_ms",
    "p99_itl_ms": "itl_p99_ms",
    "mean_e2el_ms": "e2el_mean_ms",
    "median_e2el_ms": "e2el_p50_ms",
    "p90_e2el_ms": "e2el_p90_ms",
    "p99_e2el_ms": "e2el_p99_ms",
}
KEY_OF = {metric: key for key, metric in SAVE_RESULT_NAMES.items()}


class SummaryError(Exception):
    """The experiment has no complete runs in the database."""


def _number(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)


def summary(reader: Reader, experiment: str) -> dict:
    quick = reader.quick_choice(experiment)
    if quick is None:
        raise SummaryError(f"database {reader.path} has no complete runs of experiment {experiment!r}")
    chips = reader.chips(experiment, quick)
    names = {c.chip_id: c.name for c in chips}
    rates = reader.sweeps.sweep_rates(experiment, quick)
    cells = []
    for rate in rates or [None]:
        view = View(
            reader if rate is None else sweep_queries.RateReader(reader, rate), experiment, quick, None
        )
        short = {} if rate is not None else reader.sweeps.short_cells(experiment, quick)
        cells += _cells(view, names, short, rate)
    return {
        "schema": SCHEMA,
        "experiment": experiment,
        "quick": quick,
        "interval": (
            "95%, a t interval over rounds; a percentile's upper bound at least the pooled requests' "
            "order statistic, none when too few requests (runner/publish/stats/intervals.py)"
        ),
        "chips": [{"chip_id": c.chip_id, "name": c.name, "device": c.device, "blas": c.blas} for c in chips],
        "cells": cells,
    }


def _cells(view: View, names: dict, short: dict, rate: float | None) -> list[dict]:
    cells = []
    for chip, arm, conc in sorted(view.measured):
        cell = {"chip_id": chip, "chip": names.get(chip, chip), "arm": arm, "concurrency": conc}
        if rate is not None:
            cell["rate"] = rate  # the offered rate of a rate sweep's cell (request/s)
        intervals, rounds = {}, 0
        for metric in METRICS:
            stat = view.cells.get((chip, arm, conc, metric))
            if stat is None:
                continue
            key = KEY_OF.get(metric, metric)
            cell[key] = _number(stat.mean)
            rounds = max(rounds, stat.n_rounds)
            if stat.lo is not None and stat.hi is not None:
                intervals[key] = [_number(stat.lo), _number(stat.hi)]
        counts = short.get((chip, arm, conc))
        cell["rounds"] = rounds
        if rate is None:
            cell["short_requests_total"] = counts.short if counts else 0
            cell["errored_requests_total"] = counts.errored if counts else 0
        cell["intervals"] = intervals
        cells.append(cell)
    return cells


def summary_json(reader: Reader, experiment: str) -> str:
    return json.dumps(summary(reader, experiment), indent=1, sort_keys=False, allow_nan=False) + "\n"
