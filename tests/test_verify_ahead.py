"""A drafted verify pass built on the drafter's lazy tokens while its pass runs
(engine/verify_ahead.py): the same tokens as a pass planned afresh, alone and in batches,
and a build the cut does not keep is dropped without a trace."""

from __future__ import annotations

import numpy as np
import pytest

import runner.engine.verify_ahead as verify_ahead
from runner.engine import Engine
from runner.engine.drafting.acceptance import conditional
from runner.engine.drafting.draft_policy import DraftPolicy
from runner.engine.sequence import Sequence

PROMPTS = [[int(t) for t in np.random.default_rng(i).integers(10, 2000, 14 + 6 * i)] for i in range(4)]


@pytest.fixture(scope="module")
def plain_outputs():
    eng = Engine.from_pretrained("tiny", max_batch_size=4)
    return eng.generate(PROMPTS, max_new_tokens=20), [
        eng.generate([p], max_new_tokens=20)[0] for p in PROMPTS
    ]


def block_engine(**knobs) -> Engine:
    return Engine.from_pretrained("tiny", max_batch_size=4, mtp=True, drafter="block", **knobs)


@pytest.mark.parametrize("k", [2, 4])
def test_passes_built_on_pending_drafts_commit_what_planned_passes_do(plain_outputs, k):
    batched, alone = plain_outputs
    built = block_engine(draft_tokens=k)
    planned = block_engine(draft_tokens=k, pipeline=False)
    for eng in (built, planned):
        assert eng.generate(PROMPTS, max_new_tokens=20) == batched
        assert [eng.generate([p], max_new_tokens=20)[0] for p in PROMPTS] == alone
        assert eng.pool.blocks_in_use() == 0 and not eng.has_work()
    assert built.launcher.passes_built_ahead > 20  # alone, every drafted pass after the first
    assert planned.launcher.passes_built_ahead == 0


def test_a_build_the_cut_does_not_keep_is_dropped_and_nothing_of_it_runs(plain_outputs, monkeypatch):
    """Built for fewer drafts than a fixed policy's rows keep, every build is dropped: its
    graph never runs (the KV pool's arrays go back), and the tokens are unchanged."""
    batched, alone = plain_outputs
    eng = block_engine(draft_tokens=4)
    eng.policy.likely_left = lambda width, k: k - 1
    before, dropped = {}, []
    real_build, real_queue = verify_ahead.build, verify_ahead.queue_if_kept

    def build(launcher, pending, k):
        arrays = [kv.kv for kv in launcher.forward.pool.layers]
        built = real_build(launcher, pending, k)
        if built is not None:
            before[id(built)] = arrays
        return built

    def queue(launcher, built):
        arrays = before.pop(id(built))
        assert real_queue(launcher, built) is None
        dropped.append(all(kv.kv is a for kv, a in zip(launcher.forward.pool.layers, arrays)))

    monkeypatch.setattr(verify_ahead, "build", build)
    monkeypatch.setattr(verify_ahead, "queue_if_kept", queue)
    assert eng.generate(PROMPTS, max_new_tokens=20) == batched
    assert [eng.generate([p], max_new_tokens=20)[0] for p in PROMPTS] == alone
    assert len(dropped) > 20 and all(dropped)  # the pool holds its arrays from before the build
    assert eng.launcher.passes_built_ahead == 0
    assert eng.pool.blocks_in_use() == 0


def test_the_length_built_for_is_the_one_the_last_cut_at_that_width_left():
    policy = DraftPolicy("adaptive", None, 8, conditional((0.59, 0.39, 0.28, 0.18, 0.13, 0.09, 0.07, 0.06)))
    for _ in range(30):  # calibrated: drafts the drafter doubts miss, those it is sure of land
        policy.calibration.add([0.02] * 8, 0)
        policy.calibration.add([0.99] * 8, 8)
    for _ in range(20):
        for k, ns in {0: 1.0e6, 1: 2.0e6, 2: 2.1e6, 4: 2.2e6, 8: 2.5e6}.items():
            policy.width(1).observe(k, int(ns))
    assert policy.likely_left(1, 8) == 8  # before any cut: all of them
    k = policy.decide(1)
    doubtful = _row_drafting(k, 0.02)
    policy.trim([doubtful])
    assert 1 <= len(doubtful.drafts) < k
    assert policy.likely_left(1, k) == len(doubtful.drafts)
    assert policy.likely_left(1, 1) == 1 and policy.likely_left(2, k) == k  # never more; per width
    policy.decide(1)
    sure = _row_drafting(k, 0.99)
    policy.trim([sure])
    assert policy.likely_left(1, k) == k
    policy.trim([_row_drafting(2, 0.99), _row_drafting(3, 0.99)])  # rows left unequal: no one length
    assert policy.likely_left(2, 8) == 8


def _row_drafting(k: int, confidence: float) -> Sequence:
    seq = Sequence(0, [1, 2], 16, 0.0, 1.0, np.random.default_rng(0), 0)
    seq.drafts, seq.draft_probs, seq.draft_conf = list(range(7, 7 + k)), [None] * k, [confidence] * k
    return seq


def test_the_cut_is_told_the_length_the_next_pass_was_built_for(plain_outputs):
    """Under the adaptive policy the cut weighs dropping the built pass (row_lengths.py):
    it hears the drafts every row carries in it and what building it took the host."""
    _, alone = plain_outputs
    eng = block_engine(draft_tokens=4, draft_policy="adaptive")
    for _ in range(20):  # costs at which drafting four pays (the choice is pure logic over them)
        for k, ns in {0: 1.0e6, 1: 1.1e6, 2: 1.15e6, 4: 1.2e6}.items():
            eng.policy.width(1).observe(k, int(ns))
    told, trim = [], eng.policy.trim

    def heard(rows, leaves=0, built=None):
        drafted = max(len(s.drafts) for s in rows)  # as the drafter proposed them, before the cut
        told.append((built, eng.policy.likely_left(len(rows), drafted)))
        return trim(rows, leaves, built)

    eng.policy.trim = heard
    assert [eng.generate([p], max_new_tokens=20)[0] for p in PROMPTS] == alone
    built = [(b, left) for b, left in told if b is not None]
    assert built and all(b[0] == left and b[1] > 0 for b, left in built)
    assert eng.launcher.passes_built_ahead > 0
