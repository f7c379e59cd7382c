"""Learning from drafts cut before verification (engine/drafting/cut_drafts.py): the
tokens a greedy row commits later settle what its cut drafts would have kept, counted as
verification would count them; and inside the engine, a drafter whose confidence reads
low is no longer cut for good before its drafts are ever seen to land."""

from __future__ import annotations

import numpy as np

from runner.engine import Engine
from runner.engine.drafting.cut_drafts import remember, settle
from runner.engine.sequence import Sequence


def _row(tokens: list[int], temperature: float = 0.0) -> Sequence:
    seq = Sequence(0, [1, 2], 16, temperature, 1.0, np.random.default_rng(0), 0)
    seq.tokens = [1, 2] + tokens
    return seq


def test_a_row_cut_to_nothing_learns_its_whole_proposal_once_the_output_decides_it():
    seq = _row([5])
    remember(seq, [7, 8, 9], [0.2, 0.3, 0.4], 0)  # drafts for tokens[3], [4], [5]
    assert settle(seq) == [] and seq.cut_proposals  # nothing committed past it yet
    seq.tokens += [7, 8]
    assert settle(seq) == []  # both matched so far: the third decides
    seq.tokens += [4]
    (out,) = settle(seq)
    assert out.confidences == [0.2, 0.3, 0.4] and out.landed == 2 and out.whole
    assert not seq.cut_proposals  # told once


def test_a_mismatch_settles_at_once_and_a_finished_row_with_what_it_has():
    seq = _row([])
    remember(seq, [7, 8, 9], [0.2, 0.3, 0.4], 0)
    seq.tokens += [6]
    (out,) = settle(seq)
    assert out.landed == 0 and out.confidences == [0.2]  # only the first was decided
    seq = _row([])
    remember(seq, [7, 8, 9], [0.2, 0.3, 0.4], 0)
    seq.tokens += [7]
    seq.finish("eos")
    (out,) = settle(seq)
    assert out.landed == 1 and out.confidences == [0.2]


def test_a_cut_tail_counts_only_when_every_kept_draft_landed():
    seq = _row([])
    remember(seq, [7, 8, 9], [0.2, 0.3, 0.4], 1)  # the row carried 7, verification counts it
    seq.tokens += [7, 8, 3]
    (out,) = settle(seq)
    assert out.confidences == [0.3, 0.4] and out.landed == 1 and not out.whole
    seq = _row([])
    remember(seq, [7, 8, 9], [0.2, 0.3, 0.4], 1)
    seq.tokens += [6, 8, 9]  # the kept draft missed: the tail was never reached
    assert settle(seq) == []


def test_sampling_rows_and_uncut_rows_are_not_remembered():
    seq = _row([], temperature=0.7)
    remember(seq, [7, 8], [0.2, 0.3], 0)
    seq2 = _row([])
    remember(seq2, [7, 8], [0.2, 0.3], 2)
    assert not seq.cut_proposals and not seq2.cut_proposals


def test_adaptive_calibration_learns_from_rows_it_cut():
    """Shipped deep, one row: the adaptive policy cuts rows by their calibrated
    confidence, and the calibration counts drafts it cut (which never reached
    verification) once the output settles them. The width's decision is pinned (k 8 and
    synthetic costs under which a draft must be likely to pay), so what is cut depends on
    the drafter's confidences alone, not on this machine's timings."""
    eng = Engine.from_pretrained(
        "deep", max_batch_size=1, mtp=True, drafter="block", draft_policy="adaptive", draft_tokens=8
    )
    policy = eng.policy

    def pinned(width: int) -> int:
        policy._cut_costs, policy.reason = {0: 1.0, 1: 1.6, 2: 1.8, 4: 2.2, 8: 3.0}, "k 8: pinned"
        return 8

    policy.decide = pinned
    counted = []
    add = eng.policy.calibration.add
    eng.policy.calibration.add = lambda conf, kept: (counted.append(len(conf)), add(conf, kept))
    verified = []
    record = eng.policy.record
    eng.policy.record = lambda *a, **k: (
        verified.extend(len(c) for c, _ in k.get("outcomes", ())),
        record(*a, **k),
    )
    prompts = [[int(t) for t in np.random.default_rng(i).integers(10, 2000, 24)] for i in range(3)]
    plain = Engine.from_pretrained("deep", max_batch_size=1).generate(prompts, max_new_tokens=48)
    assert eng.generate(prompts, max_new_tokens=48) == plain
    assert sum(counted) > sum(verified)  # confidences counted beyond the verified drafts'
