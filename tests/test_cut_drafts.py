"""Learning from drafts cut before verification (engine/drafting/cut_drafts.py): the
tokens a greedy row commits later settle what its cut drafts would have kept, counted as
verification would count them; and inside the engine, a drafter whose confidence reads
low is no longer cut for good before its drafts are ever seen to land."""

from __future__ import annotations

import numpy as np
import pytest

from runner.engine import Engine
from runner.engine.drafting.acceptance import conditional
from runner.engine.drafting.cut_drafts import remember, settle
from runner.engine.drafting.draft_policy import DraftPolicy
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
    assert out.confidences == [0.2, 0.3, 0.4] and out.landed == 2 and out.after == 0
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
    assert out.confidences == [0.3, 0.4] and out.landed == 1 and out.after == 1
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

    def pinned(width: int, in_step: bool = False) -> int:
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


def test_a_lone_row_is_never_cut_to_nothing_while_the_drafter_keeps_running():
    """Alone on deep drafting at all costs about one plain pass more (the drafter's own
    pass), each further draft little. A cut comes after the drafter ran, and the cut
    pass's step drafts again: carrying no drafts saves their verification only. Priced as
    a pass without drafting, unlikely drafts were cut to nothing and the pass committed
    one token at nearly a drafting pass's cost; priced as drafting, the row keeps the
    prefix that pays, at least one draft."""
    policy = DraftPolicy("adaptive", None, 8, conditional((0.59, 0.39, 0.28, 0.18, 0.13, 0.09, 0.07, 0.06)))
    for _ in range(30):  # calibrated: drafts the drafter doubts miss, those it is sure of land
        policy.calibration.add([0.02] * 8, 0)
        policy.calibration.add([0.99] * 8, 8)
    costs = {0: 1.0e6, 1: 2.0e6, 2: 2.1e6, 4: 2.2e6, 8: 2.5e6}
    for _ in range(20):
        for k, ns in costs.items():
            policy.width(1).observe(k, int(ns))
    k = policy.decide(1)
    assert k > 0 and policy._cut_costs[0] == min(c for m, c in policy._cut_costs.items() if m)
    seq = _row([])
    seq.drafts, seq.draft_probs, seq.draft_conf = list(range(7, 7 + k)), [None] * k, [0.02] * k
    why = policy.trim([seq])
    assert 1 <= len(seq.drafts) < k, why  # unlikely drafts beyond the first are cut, not the first
    sure = _row([])
    sure.drafts, sure.draft_probs, sure.draft_conf = list(range(7, 7 + k)), [None] * k, [0.99] * k
    policy.decide(1)
    policy.trim([sure])
    assert len(sure.drafts) == k


def test_drafts_cut_short_count_toward_acceptance_past_the_cut():
    """Rows confident enough to carry two drafts land both; the drafts past the cut of
    rows cut to two miss. Acceptance at position 3 must come from those tails, else it
    leans on position 2's (selected, confident) rate and expects drafts that do not land."""
    policy = DraftPolicy("adaptive", None, 8)
    for _ in range(100):
        policy.acceptance.add((0, 0, 1))  # a row carried 2 and kept both
    assert policy.acceptance.at(3) > 0.9  # nothing reached position 3 yet
    for _ in range(50):
        seq = _row([])
        remember(seq, [7, 8, 9, 10], [0.9, 0.9, 0.3, 0.3], 2)  # cut to the first two
        seq.tokens += [7, 8, 3]  # both kept drafts landed, the third draft missed
        policy.trim([seq])
        assert not seq.cut_proposals
    assert policy.acceptance.at(3) < 0.1 and policy.acceptance.at(2) > 0.9


DEEP_PRIOR = conditional((0.59, 0.39, 0.28, 0.18, 0.13, 0.09, 0.07, 0.06))  # deep's block drafter


def test_a_drafter_that_reads_diffident_is_not_cut_before_its_confidences_are_calibrated():
    """A small drafter's confidence reads low on text it never saw (q 0.15, drafts landing
    half the time or more). A confidence bin seldom seen leans on the rate of all bins
    pooled, which starts at the drafter's measured acceptance: a lone row's first drafts
    are not cut to one on their midpoint's say. Once q 0.15 drafts are seen to miss, they
    are cut; a drafter without a measured acceptance leans on the midpoint as before."""
    from runner.engine.drafting.row_lengths import choose_lengths

    costs = {0: 1.0, 1: 2.0, 2: 2.1, 4: 2.2, 8: 2.5}  # alone: the drafter's pass is most of it
    policy = DraftPolicy("adaptive", None, 8, DEEP_PRIOR)
    cal = policy.calibration
    assert cal.p(0.15) == cal.p(0.95) == sum(DEEP_PRIOR) / len(DEEP_PRIOR)
    assert choose_lengths(cal, [[0.15] * 8], 8, costs).lengths == [8]
    for _ in range(40):
        cal.add([0.15] * 8, 0)  # the first draft reached and missed, the rest never reached
    assert cal.p(0.15) < 0.2 and choose_lengths(cal, [[0.15] * 8], 8, costs).lengths == [0]
    assert cal.p(0.95) < sum(DEEP_PRIOR) / len(DEEP_PRIOR)  # an unseen bin leans on the pool
    bare = DraftPolicy("adaptive", None, 8).calibration
    assert bare.p(0.15) == 0.15 and choose_lengths(bare, [[0.15] * 8], 8, costs).lengths == [0]


def test_a_pass_cut_short_counts_toward_the_length_its_rows_carried_not_the_cap():
    """The policy decided 8 a row and the rows' confidences cut them to 2: those passes say
    what two drafts realize. Counted as eight's, one hard prompt's cuts vetoed eight (and
    then four, and two) for the next several prompts alone, where eight paid."""
    from runner.engine.drafting.draft_policy import Branch

    policy = DraftPolicy("adaptive", None, 8, DEEP_PRIOR)
    for _ in range(10):  # passes without drafts: one token in 5 ms, 200 tok/s
        policy.record(Branch("decode", 1, 0), 5_000_000, (), drafts_next=0, ahead=False, queued=None)
    policy.record(Branch("decode", 1, 0), 5_000_000, (), drafts_next=8, ahead=False, queued=None)
    for _ in range(10):  # decided 8, cut to 2, the first draft missing: 1 token in 8 ms
        policy.record(Branch("decode", 1, 2), 8_000_000, (1, 0, 0), drafts_next=8, ahead=False, queued=None)
    assert policy.realized.rate(1, 8) is None and policy.realized.veto(1, 8) == ""
    assert policy.realized.veto(1, 2).startswith("k 2 realized 125 tok/s at width 1")
    for _ in range(10):  # uncut eights: 5 tokens in 12 ms
        policy.record(
            Branch("decode", 1, 8),
            12_000_000,
            (0, 0, 0, 0, 1, 0, 0, 0, 0),
            drafts_next=8,
            ahead=False,
            queued=None,
        )
    assert policy.realized.rate(1, 8) == pytest.approx(5 / 12e-3) and policy.realized.veto(1, 8) == ""
