"""The metrics a post can show: name -> label, unit and how many decimals to print.

This is the vocabulary shared by the SQL in `queries.py` (which computes them) and the
blocks that print them. It holds no SQL and no formatting code beyond the spec.
Acceptance by position is one metric a position, `acceptance_at_1` to
`acceptance_at_16` (`draft_tokens` reaches 16); a post names them `acceptance_at(i)`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    label: str
    unit: str
    decimals: int


MAX_POSITION = 16  # the most drafts a row carries (the engine's draft_tokens)

METRICS: dict[str, MetricSpec] = {
    m.name: m
    for m in (
        MetricSpec("prefill_tps", "prefill", "tok/s", 1),
        MetricSpec("decode_tps", "decode / seq", "tok/s", 1),
        MetricSpec("aggregate_tps", "aggregate", "tok/s", 1),
        MetricSpec("ttft_p50_ms", "TTFT p50", "ms", 1),
        MetricSpec("ttft_p90_ms", "TTFT p90", "ms", 1),
        MetricSpec("tpot_p50_ms", "TPOT p50", "ms", 2),
        MetricSpec("tpot_p90_ms", "TPOT p90", "ms", 2),
        MetricSpec("ttft_p99_ms", "TTFT p99", "ms", 1),
        MetricSpec("tpot_p99_ms", "TPOT p99", "ms", 2),
        MetricSpec("itl_p50_ms", "ITL p50", "ms", 2),
        MetricSpec("itl_p90_ms", "ITL p90", "ms", 2),
        MetricSpec("itl_p99_ms", "ITL p99", "ms", 1),
        MetricSpec("stall_max_ms", "longest stall", "ms", 1),
        MetricSpec("goodput_rps", "goodput", "req/s", 2),
        MetricSpec("passes", "passes", "", 0),
        MetricSpec("drafted_passes", "drafted passes", "", 0),
        MetricSpec("acceptance", "acceptance", "", 3),
        MetricSpec("accepted_length", "accepted length", "tok", 2),
        *(MetricSpec(f"acceptance_at_{i}", f"acceptance at {i}", "", 3) for i in range(1, MAX_POSITION + 1)),
        MetricSpec("state_mb", "state / seq", "MB", 2),
        MetricSpec("max_state_mb", "max state / seq", "MB", 2),
        # The figures `vllm bench serve` reports (export.py names them its way).
        MetricSpec("ttft_mean_ms", "TTFT mean", "ms", 1),
        MetricSpec("tpot_mean_ms", "TPOT mean", "ms", 2),
        MetricSpec("itl_mean_ms", "ITL mean", "ms", 2),
        MetricSpec("e2el_mean_ms", "latency mean", "ms", 1),
        MetricSpec("e2el_p50_ms", "latency p50", "ms", 1),
        MetricSpec("e2el_p90_ms", "latency p90", "ms", 1),
        MetricSpec("e2el_p99_ms", "latency p99", "ms", 1),
        MetricSpec("request_rps", "requests", "req/s", 2),
        MetricSpec("completed", "completed", "", 0),
        MetricSpec("short_requests", "short requests", "", 0),
    )
}


# From per-token rows (inter-token gaps): absent for a run whose runtime gave no token times.
PER_TOKEN = ("itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "stall_max_ms", "itl_mean_ms")
# Computed from per-pass rows: absent (NULL) for a run whose runtime records no passes.
ACCEPTANCE_METRICS = tuple(f"acceptance_at_{i}" for i in range(1, MAX_POSITION + 1))
# Shares of drafts kept: never above 1, so an interval over rounds stops there.
SHARES = ("acceptance", *ACCEPTANCE_METRICS)
PER_PASS = ("passes", "drafted_passes", "acceptance", "accepted_length", *ACCEPTANCE_METRICS)
PER_PASS += ("state_mb", "max_state_mb")


def acceptance_position(name: str) -> int:
    """acceptance_at_i -> i."""
    return int(name.removeprefix("acceptance_at_"))


def acceptance_at(position: object) -> str | None:
    """The metric of acceptance at a draft position (1..MAX_POSITION); None when there is none."""
    if isinstance(position, bool) or not isinstance(position, int) or not 1 <= position <= MAX_POSITION:
        return None
    return f"acceptance_at_{position}"


# A latency percentile's per-request column (the query layer's request values).
LATENCY_COLUMNS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2el_ms"}


def percentile_of(name: object) -> tuple[str, float] | None:
    """'ttft_p99_ms' (a fixed percentile) or 'ttft_q0.95_ms' (a post's own, quantiles.py) ->
    (request column, quantile); None for any other metric."""
    parts = str(name).split("_")
    if len(parts) != 3 or parts[0] not in LATENCY_COLUMNS or parts[2] != "ms" or len(parts[1]) < 2:
        return None
    tag, number = parts[1][0], parts[1][1:]
    try:
        q = int(number) / 100 if tag == "p" and number.isdigit() else float(number) if tag == "q" else None
    except ValueError:
        return None
    return (LATENCY_COLUMNS[parts[0]], q) if q is not None and 0 < q < 1 else None


def unknown_metric_message(name: object) -> str:
    return f"unknown metric {name!r}; known metrics: {', '.join(METRICS)}"
