"""Tiny's block drafter under the adaptive policy with drafting made cheap at every width,
and requests run as a server takes them: shared by the engine tests of draft lengths."""

from __future__ import annotations

import numpy as np

from runner.engine import Engine

FLAT = {0: 1.0, 1: 1.1, 2: 1.2, 4: 1.4, 8: 1.8}  # a pass's cost by drafts a row carries


def seed(policy) -> None:
    """Drafting cheap at every width (the longest k is the policy's verdict at each)."""
    for width in (1, 2, 3, 4):
        for _ in range(12):
            for k, c in FLAT.items():
                policy.width(width).observe(k, int(c * 1e6))


def run_apart(engine: Engine, prompts: list[list[int]], lengths: list[int]):
    """The prompts submitted together, each asking for its own number of tokens (rows out
    of step, so adaptive may draft beside other rows): outputs in order, and pass events."""
    from runner.engine.events import PassEvent

    events: list = []
    engine.sink = events.append
    ids = [engine.add_request(p, n) for p, n in zip(prompts, lengths)]
    out = {}
    while engine.has_work():
        out.update({ev.request_id: list(ev.tokens) for ev in engine.step()})
    engine.sink = None
    return [out[i] for i in ids], [e for e in events if isinstance(e, PassEvent)]


def four_prompts() -> list[list[int]]:
    return [[int(t) for t in np.random.default_rng(i).integers(10, 2000, 16 + 5 * i)] for i in range(4)]


def seeded_block_engine(**knobs) -> Engine:
    """tiny, four rows, the block drafter under adaptive (k up to 8), drafting cheap at
    every width (`seed`)."""
    eng = Engine.from_pretrained(
        "tiny",
        max_batch_size=4,
        compile=False,
        mtp=True,
        drafter="block",
        draft_policy="adaptive",
        draft_tokens=8,
        **knobs,
    )
    seed(eng.policy)
    return eng
