"""Rows kept in step run without the block drafter's features (launch.py `_features`): a
pass none will draft after reads none, so a block-drafter engine there runs the passes an
engine without a drafter would. A row whose context such passes ended starts a new one
when it may draft again, and its output stays the target's own."""

from __future__ import annotations

from block_engines import four_prompts, seeded_block_engine

from runner.engine import Engine
from runner.engine.events import PassEvent


def drafter_bytes(engine: Engine) -> list[int]:
    return [engine.drafter.row_bytes(s) for s in engine.scheduler.running]


def test_rows_kept_in_step_leave_the_drafter_nothing():
    """Four rows asking for as many tokens, as a server takes them: every pass keeps them
    in step, none carries a feature into the drafter's state, and no pass drafts."""
    eng = seeded_block_engine()
    ids = [eng.add_request(p, 24) for p in four_prompts()]
    events: list = []
    eng.sink = events.append
    held = []
    while eng.has_work():
        eng.step()
        held.extend(drafter_bytes(eng))
    passes = [e for e in events if isinstance(e, PassEvent)]
    assert len(passes) >= 24 and held and not any(held)
    assert not any(p.drafted for p in passes) and len(ids) == 4


def test_a_row_whose_context_was_ended_drafts_again_and_stays_lossless():
    """Two rows start in step (no features), then a third request joins asking for more
    tokens: the rows are out of step, the drafter starts the first two rows' contexts
    afresh, they draft beside the newcomer, and every output is the target's own."""
    prompts = four_prompts()[:3]
    lengths = [30, 30, 44]
    off = Engine.from_pretrained("tiny", max_batch_size=4, compile=False)
    plain = [off.generate([p], max_new_tokens=n)[0] for p, n in zip(prompts, lengths)]

    eng = seeded_block_engine()
    events: list = []
    eng.sink = events.append
    ids = [eng.add_request(p, n) for p, n in zip(prompts[:2], lengths[:2])]
    out: dict[int, list[int]] = {}
    early = []
    for _ in range(6):
        out.update({ev.request_id: list(ev.tokens) for ev in eng.step()})
        early.extend(drafter_bytes(eng))
    ids.append(eng.add_request(prompts[2], lengths[2]))
    while eng.has_work():
        out.update({ev.request_id: list(ev.tokens) for ev in eng.step()})
    passes = [e for e in events if isinstance(e, PassEvent)]
    assert early and not any(early)  # in step: the first rows kept no features
    assert any(p.drafted for p in passes[7:] if p.width > 1)  # out of step, they draft
    assert [out[i] for i in ids] == plain
