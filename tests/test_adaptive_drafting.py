"""The adaptive policy inside the engine, on the shipped `tiny`: the k it chooses per width
reaches the passes (drafts carried), and greedy output stays what no drafting gives.

Its cost model is seeded with synthetic side-by-side comparisons (the policy is pure
logic; timings are inputs), so the verdicts per width are known whatever this machine's
speed; the run's own measurements cannot overturn them within it (no width reaches a
refresh, and every candidate is already measured, so nothing is climbed to)."""

from __future__ import annotations

from collections import Counter

import pytest

from runner.engine import Engine
from runner.engine.drafting.draft_cost import REFRESH_EVERY
from runner.engine.drafting.draft_policy import DraftPolicy
from runner.engine.drafting.realized import MIN_PASSES

# Pass cost by draft length, per width: drafting free alone (the longest wins), dearer as
# rows are added, and never worth it at four rows (a pass carrying k costs 2 + k plain ones).
COSTS = {
    1: {0: 1.0, 1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0},
    2: {0: 1.0, 1: 1.0, 2: 1.0, 4: 10.0, 8: 20.0},
    3: {0: 1.0, 1: 1.0, 2: 10.0, 4: 20.0, 8: 40.0},
    4: {k: 2.0 + k if k else 1.0 for k in (0, 1, 2, 4, 8)},
}
VERDICT = {1: 8, 2: 2, 3: 1, 4: 0}
MAX_NEW = (10, 25, 40, 70)  # the batch narrows from four rows to one


def seed(policy: DraftPolicy) -> None:
    """The cost model's comparisons, and the bar passes without drafts set at each width:
    one token a second a row, which any drafting clears (the veto has its own tests in
    test_realized_rates.py), so the verdicts stand on the costs alone."""
    for width, costs in COSTS.items():
        for _ in range(12):
            for k, c in costs.items():
                policy.width(width).observe(k, int(c * 1e6))
        for _ in range(MIN_PASSES):
            policy.realized.add(width, 0, width, 10**9)


def run(engine: Engine, prompts: list[list[int]]):
    events = []
    engine.sink = events.append
    for p, n in zip(prompts, MAX_NEW):
        engine.add_request(p, n)
    while engine.has_work():
        engine.step()
    engine.sink = None
    passes = [e for e in events if hasattr(e, "pass_index")]
    outputs = {e.request_id: list(e.tokens) for e in events if hasattr(e, "finish_reason")}
    return [outputs[i] for i in sorted(outputs)], passes


@pytest.mark.parametrize("sync", ["lazy", "eager"])
def test_adaptive_k_moves_with_width_and_greedy_output_is_lossless(sync):
    off = Engine.from_pretrained("tiny", max_batch_size=4, compile=False)
    eng = Engine.from_pretrained(
        "tiny",
        max_batch_size=4,
        compile=False,
        mtp=True,
        draft_policy="adaptive",
        draft_tokens=8,
        mtp_sync=sync,
    )
    seed(eng.policy)
    texts = ["def add(a, b):", "The river", "import numpy as np", "Once upon a time"]
    prompts = [off.tokenizer.encode(t).ids for t in texts]
    expected, _ = run(off, prompts)
    outputs, passes = run(eng, prompts)
    assert outputs == expected
    carried: dict[int, Counter] = {}
    for p in passes:
        if p.kind == "decode":
            k = len(p.accepted_lengths) - 1 if p.accepted_lengths else 0
            carried.setdefault(p.width, Counter())[k] += 1
    assert set(carried) == {1, 2, 3, 4}
    # most passes of each width carry its verdict (a switch lands a pass late)
    assert {w: c.most_common(1)[0][0] for w, c in carried.items()} == VERDICT
    assert all(m.decisions < REFRESH_EVERY for m in eng.policy.widths.values())
