"""Rows whose drafts were looked up in their own tokens stay out of what the adaptive
policy learns the drafter's acceptance by position from (block_drafting.py, verify.py):
a full-length lookup keeps most of its drafts where the drafter's keep one or two, and
the policy's prior and its k are the drafter's."""

from __future__ import annotations

from runner.engine import Engine
from runner.engine.config import EngineConfig
from runner.engine.drafting.draft_policy import Branch, DraftPolicy


def heard_by_pass(engine: Engine, prompts: list[list[int]], new_tokens: int):
    """collect()'s outputs, and each pass with what its policy.record heard: (every row's
    accepted lengths, the drafter's rows' alone)."""
    heard, record = [], engine.policy.record

    def hear(branch, duration, accepted, **kw):
        heard.append((accepted, kw["drafter_lengths"]))
        return record(branch, duration, accepted, **kw)

    engine.policy.record = hear
    try:
        outs, passes, _ = engine.collect(prompts, new_tokens)
    finally:
        del engine.policy.record
    assert len(heard) == len(passes)
    return outs, list(zip(passes, heard))


def test_the_policy_learns_acceptance_from_the_drafters_rows_alone():
    cfg = EngineConfig(draft_policy="adaptive", draft_tokens=4, compile=False)
    p = DraftPolicy(cfg.draft_policy, cfg.draft_max_width, cfg.draft_tokens)
    drafting = Branch("decode", 2, 4)
    # two rows, one looked up (kept all 4), one the drafter's (kept none)
    p.record(
        drafting,
        1000,
        (1, 0, 0, 0, 1),
        drafts_next=4,
        ahead=False,
        queued=None,
        drafter_lengths=(1, 0, 0, 0, 0),
    )
    assert p.acceptance.reached[1] == 1 and p.acceptance.hit[1] == 0 and p.acceptance.reached[2] == 0
    p.record(drafting, 1000, (0, 0, 0, 0, 1), drafts_next=4, ahead=False, queued=None, drafter_lengths=())
    assert p.acceptance.reached[1] == 1  # only a looked-up row drafted: nothing learnt
    p.record(
        drafting, 1000, (0, 0, 0, 0, 1), drafts_next=4, ahead=False, queued=None
    )  # no lookups: every row
    assert p.acceptance.reached[4] == 1 and p.acceptance.hit[4] == 1


def test_looked_up_rows_stay_out_of_the_drafters_acceptance():
    """The policy hears every row's accepted lengths (realized rates count their tokens)
    and, apart, the drafter's rows' alone; a pass whose only drafting rows looked their
    drafts up teaches acceptance by position nothing. (The shipped tiny model soon repeats
    itself, so its rows look up.)"""
    prompts = [[3, 4, 5, 6, 7] * 6, list(range(40, 70)), list(range(300, 1300, 37))]
    plain = Engine.from_pretrained("tiny", max_batch_size=1, compile=False).generate(
        prompts, max_new_tokens=24
    )
    batched = Engine.from_pretrained(
        "tiny", max_batch_size=3, compile=False, mtp=True, drafter="block", draft_tokens=4, draft_lookup=3
    )
    outs, batch_passes = heard_by_pass(batched, prompts, 24)
    lone = Engine.from_pretrained(
        "tiny",
        compile=False,
        mtp=True,
        drafter="block",
        draft_policy="adaptive",
        mtp_sync="lazy",
        draft_tokens=8,
        draft_lookup=3,
    )
    lone_outs, lone_passes = heard_by_pass(lone, prompts[:1], 24)
    assert outs == plain and lone_outs == plain[:1]
    kinds = {"drafter": 0, "mixed": 0, "looked up": 0}
    for p, (accepted, mine) in batch_passes + lone_passes:
        assert accepted == p.accepted_lengths
        if not p.drafted:
            continue
        if "looked up" not in p.draft_reason:
            assert mine == accepted
            kinds["drafter"] += 1
        elif mine:
            assert 0 < sum(mine) < sum(accepted)  # the looked-up rows are left out
            kinds["mixed"] += 1
        else:
            kinds["looked up"] += 1
    assert all(kinds.values()), kinds
