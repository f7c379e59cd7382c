"""How long a run will take, from its declaration alone: printed before measuring, and the
progress bar's ETA before the first cell has finished.

- A closed-loop cell lasts the longer of its request minimum (requests_per_client
  requests per client) and its time/token minimums, plus the tail (the requests in
  flight when the minimums are reached finish and are kept).
- A Poisson cell arrives until its minimums hold, and is served at the lesser of the
  arrival rate and what c rows can serve (an overloaded cell's queue drains after the
  last arrival). A scripted cell lasts a whole number of plays, each from its start to
  the finish of its slowest entry.
- A request's time is a rough per-layer cost model of prefill and decode passes, read
  from the checkpoint's config.json; each arm also pays one engine load and warm-up
  before its first cell (and again every `restart_every` rounds).
- A planning estimate, meant to be right within a factor of about two, never a
  measurement. This module runs nothing.
"""

from __future__ import annotations

import json
import math
from typing import Iterable, Protocol

from runner.experiments.declaration import Experiment

# Rough costs of the small shipped checkpoints on a CPU, per decoder layer (a pass's cost
# there is mostly per-layer overhead, so layers predict it better than parameter counts).
DECODE_PASS_SECONDS_PER_LAYER = 0.8e-3  # one decode pass of one row
PREFILL_SECONDS_PER_TOKEN_LAYER = 0.1e-3
WIDER_PASS_COST = 0.25  # each extra row in a pass adds this share of a one-row pass
WARMUP_SECONDS_PER_LAYER = 1.0  # tracing every decode shape, per arm
LOAD_SECONDS = 1.0  # reading the checkpoint, per arm
DEFAULT_LAYERS = 4  # when config.json cannot be read


class _Cell(Protocol):
    arm: str
    concurrency: int
    round: int


def _layers(exp: Experiment) -> int:
    try:
        config = json.loads((exp.checkpoint / "config.json").read_text())
        return int(config["num_hidden_layers"]) + int(config.get("num_nextn_predict_layers") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_LAYERS


def _request(layers: int, prompt: float, new_tokens: int, width: int) -> float:
    wider = 1 + WIDER_PASS_COST * (width - 1)
    return layers * (
        prompt * PREFILL_SECONDS_PER_TOKEN_LAYER + new_tokens * DECODE_PASS_SECONDS_PER_LAYER * wider
    )


def request_seconds(exp: Experiment, concurrency: int, layers: int | None = None) -> float:
    """One request's rough duration when `concurrency` clients share the passes."""
    w = exp.workload
    layers = _layers(exp) if layers is None else layers
    return _request(layers, sum(w.prompt_tokens) / 2, w.max_new_tokens, concurrency)


def _poisson_seconds(exp: Experiment, concurrency: int, layers: int) -> float:
    w = exp.workload
    request = request_seconds(exp, concurrency, layers)
    served = min(w.rate, concurrency / request)  # requests per second
    by_tokens = w.min_cell_tokens / (served * w.max_new_tokens)
    last_arrival = max(w.requests_per_client * concurrency / w.rate, w.min_cell_seconds, by_tokens)
    return last_arrival * w.rate / served + request


def _script_seconds(exp: Experiment, concurrency: int, layers: int) -> float:
    w = exp.workload
    sent = [e for e in w.script if e.lane < concurrency]
    width = min(concurrency, len(sent))
    play = max(e.at + _request(layers, e.prompt_tokens, e.max_new_tokens, width) for e in sent)
    tokens = sum(e.max_new_tokens for e in sent)
    return play * max(1, math.ceil(w.min_cell_seconds / play), math.ceil(w.min_cell_tokens / tokens))


def cell_seconds(exp: Experiment, concurrency: int, layers: int | None = None) -> float:
    """A cell's rough timed duration under the stopping rule (cell.needs_more)."""
    w = exp.workload
    layers = _layers(exp) if layers is None else layers
    if w.arrivals == "poisson":
        return _poisson_seconds(exp, concurrency, layers)
    if w.arrivals == "script":
        return _script_seconds(exp, concurrency, layers)
    request = request_seconds(exp, concurrency, layers)
    by_requests = w.requests_per_client * request
    tokens_per_second = concurrency * w.max_new_tokens / request
    by_minimums = max(w.min_cell_seconds, w.min_cell_tokens / tokens_per_second)
    if by_minimums <= by_requests:
        return by_requests
    # The slowest of c requests in flight, each with a uniform share of a request left.
    return by_minimums + request * concurrency / (concurrency + 1)


def estimate_seconds(exp: Experiment, cells: Iterable[_Cell]) -> float:
    """Rough wall time of running `cells` (e.g. cell_plan.plan_cells(exp)): every cell's
    timed duration plus one engine load and warm-up per arm that has a cell (per arm and
    block of `restart_every` rounds under that key)."""
    cells = list(cells)
    layers = _layers(exp)
    timed = sum(cell_seconds(exp, c.concurrency, layers) for c in cells)
    starts = {(c.arm, c.round // exp.restart_every if exp.restart_every else 0) for c in cells}
    return timed + len(starts) * (LOAD_SECONDS + layers * WARMUP_SECONDS_PER_LAYER)
