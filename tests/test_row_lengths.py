"""Each row's draft length from the drafter's confidence (engine/drafting/row_lengths.py):
the calibration, the choice at one row and at several, and inside the engine, where the
cut drafts must leave greedy output what no drafting gives and say why in the pass rows.

Costs are synthetic inputs (the choice is pure logic over them), so the verdicts are
known whatever this machine's speed."""

from __future__ import annotations

import numpy as np
from block_engines import FLAT, four_prompts, run_apart, seeded_block_engine

from runner.engine import Engine
from runner.engine.drafting.row_lengths import Built, ConfidenceCalibration, choose_lengths


def test_calibration_learns_what_a_confidence_bin_lands():
    cal = ConfidenceCalibration()
    assert abs(cal.p(0.95) - 0.95) < 1e-9  # no evidence: the bin's midpoint
    for _ in range(200):
        cal.add([0.95, 0.95], 0)  # confident drafts that never land
    assert cal.p(0.95) < 0.1
    for _ in range(200):
        cal.add([0.15], 1)  # diffident drafts that always land
    assert cal.p(0.15) > 0.9


def test_calibration_counts_only_reached_drafts():
    cal = ConfidenceCalibration()
    cal.add([0.55, 0.55, 0.05, 0.05], 1)  # draft 1 landed, 2 missed, 3 and 4 never reached
    assert abs(cal.reached[5] - 2) < 0.01 and abs(cal.hit[5] - 1) < 0.01  # decayed a little
    assert cal.reached[0] == 0


def test_one_row_drafts_long_when_sure_and_nothing_when_not():
    cal = ConfidenceCalibration()
    sure = choose_lengths(cal, [[0.99] * 8], 8, FLAT)
    assert sure.lengths == [8] and sure.reason.startswith("k 8 of 8")
    unsure = choose_lengths(cal, [[0.05] * 8], 8, FLAT)
    assert unsure.lengths == [0]
    # confident for two drafts, then not: the cut lands at the measured length 2
    assert choose_lengths(cal, [[0.99, 0.99] + [0.05] * 6], 8, FLAT).lengths == [2]
    # never past the policy's k, and only lengths with a measured cost
    assert choose_lengths(cal, [[0.99] * 8], 4, FLAT).lengths == [4]
    assert choose_lengths(cal, [[0.99] * 8], 8, {0: 1.0, 2: 1.2}).lengths == [2]


def test_rows_share_a_pass_and_the_unlikely_ones_draft_nothing():
    cal = ConfidenceCalibration()
    costs = {0: 1.0, 4: 2.0}  # all four rows verifying 4 drafts costs twice a plain pass
    conf = [[0.99] * 4, [0.05] * 4, [0.97] * 4, [0.1] * 4]
    choice = choose_lengths(cal, conf, 4, costs)
    assert choice.lengths == [4, 0, 4, 0]
    assert choice.reason.startswith("2 of 4 rows draft 4")
    # a row without confidences (another drafter) always keeps its drafts
    assert choose_lengths(cal, [None, [0.05] * 4], 4, costs).lengths == [4, 0]
    # without the costs of none and of k at this width there is nothing to choose by
    assert choose_lengths(cal, conf, 4, {0: 1.0, 2: 1.1}) is None


def test_lengths_other_than_the_built_pass_pay_for_building_theirs():
    """The next pass was built for the lengths the rows kept last (verify_ahead.py): any
    other lengths drop it, and building theirs costs the host's time again. Priced at a
    third of a pass or less, a lone row sure of two drafts still cuts to them; at more, it
    keeps the eight the pass was built for; built for two, it keeps two for free."""
    cal = ConfidenceCalibration()
    conf = [[0.99, 0.99] + [0.05] * 6]
    assert choose_lengths(cal, conf, 8, FLAT, Built(8, 0.3)).lengths == [2]
    assert choose_lengths(cal, conf, 8, FLAT, Built(8, 0.6)).lengths == [8]
    assert choose_lengths(cal, conf, 8, FLAT, Built(2, 0.6)).lengths == [2]
    # rows sharing a pass: leaving two unlikely rows out drops a pass built for all four
    costs, rows = {0: 1.0, 4: 2.0}, [[0.99] * 4, [0.05] * 4, [0.97] * 4, [0.1] * 4]
    assert choose_lengths(cal, rows, 4, costs, Built(4, 0.2)).lengths == [4, 0, 4, 0]
    assert choose_lengths(cal, rows, 4, costs, Built(4, 1.0)).lengths == [4, 4, 4, 4]


def test_cut_drafts_stay_lossless_and_the_pass_rows_say_why():
    prompts = four_prompts()
    lengths = [40, 37, 34, 31]
    off = Engine.from_pretrained("tiny", max_batch_size=4, compile=False)
    plain = [off.generate([p], max_new_tokens=n)[0] for p, n in zip(prompts, lengths)]
    eng = seeded_block_engine(mtp_sync="lazy")
    outs, passes = run_apart(eng, prompts, lengths)
    assert outs == plain
    drafting = [p for p in passes if p.kind == "decode" and p.drafted]
    assert drafting and all(p.draft_reason.startswith("k ") for p in drafting)
    cut = [p.draft_reason for p in passes if "; cut: " in p.draft_reason]
    assert cut, "no pass was cut row by row"
    assert all(" rows draft " in r or r.split("; cut: ")[1].startswith("k ") for r in cut)
    # the calibration heard every verified row that had confidences
    assert sum(eng.policy.calibration.reached) > 0


def test_the_warm_up_times_every_draft_length_at_every_width():
    """The adaptive policy starts from this machine's costs: after the warm-up every width
    has a cost for every length it may carry, and none before (the values are timings,
    which a test does not judge); the timed passes themselves are not kept to set real
    ones beside (they ran one at a time, real ones overlap with building the next)."""
    from runner.engine.drafting.calibrate import ROUNDS

    eng = Engine.from_pretrained(
        "tiny", max_batch_size=2, mtp=True, drafter="block", draft_policy="adaptive", draft_tokens=4
    )
    assert not eng.policy.widths
    eng.warmup(64)
    assert set(eng.policy.widths) == {1, 2}
    for model in eng.policy.widths.values():
        assert sum(model.seen.values()) == ROUNDS * len(eng.policy.lengths)
        pairs = {p for p in model.ratios()}
        assert {k for p in pairs for k in p} == set(eng.policy.lengths)
        assert not model.history  # real passes are compared with real ones only
    # a fixed policy is not timed
    fixed = Engine.from_pretrained("tiny", max_batch_size=2, mtp=True, drafter="block", draft_tokens=4)
    fixed.warmup(64)
    assert not fixed.policy.widths


def test_a_pass_after_one_verifying_several_drafts_is_never_launched_ahead():
    """A pass whose rows verified k > 1 drafts advances each row by what it accepted, which
    only the host knows: the next pass must not be queued from the graph as if each row had
    advanced one. It was, whenever a policy stopped drafting right after such a pass (the
    adaptive one often does), and the queued pass wrote its keys at the wrong positions.
    Here the policy drafts four, then none twice, over and over."""
    import itertools

    prompts = [[int(t) for t in np.random.default_rng(i).integers(10, 2000, 20 + 3 * i)] for i in range(4)]
    off = Engine.from_pretrained("tiny", max_batch_size=4, compile=False)
    expected = off.generate(prompts, max_new_tokens=40)
    eng = Engine.from_pretrained(
        "tiny", max_batch_size=4, compile=False, mtp=True, drafter="block", draft_tokens=4
    )
    turns = itertools.cycle((4, 0, 0))
    eng.policy.decide = lambda width, in_step=False: next(turns)
    outs, passes, _ = eng.collect(prompts, 40)
    assert outs == expected
    assert sum(p.drafted > 0 for p in passes) > 5 and eng.launcher.passes_queued > 0


def test_rows_in_step_run_without_drafts_beside_each_other_and_say_why():
    """Four requests asking for as many tokens, drafting cheap at every width (seeded): no
    pass of two rows or more carries drafts while they stay in step, whether a server
    takes them (prompts may follow) or generate() holds them as one batch (which waits for
    its last row); asking for different lengths, they draft beside each other."""
    prompts = four_prompts()
    outs, passes = run_apart(seeded_block_engine(), prompts, [24] * 4)
    batched = [p for p in passes if p.kind == "decode" and p.width > 1]
    assert batched and not any(p.drafted for p in batched)
    assert all("in step" in p.draft_reason for p in batched[1:])
    same, passes, _ = seeded_block_engine().collect(prompts, 24)
    batched = [p for p in passes if p.kind == "decode" and p.width > 1]
    assert same == outs and batched and not any(p.drafted for p in batched)
    _, apart = run_apart(seeded_block_engine(), prompts, [24, 30, 36, 42])
    assert any(p.drafted for p in apart if p.kind == "decode" and p.width > 1)
