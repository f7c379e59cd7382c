"""prefill_hold: a request that finds a free slot while rows decode waits up to that many
passes, so that prompts arriving apart prefill together once the decoding rows finish;
outputs never change (greedy), and nobody waits when no row is decoding."""

from __future__ import annotations

import pytest

from runner.engine import EngineConfig, PassEvent

PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
NEXT = [[20, 21, 22, 23, 24], [30, 31], [40, 41, 42]]


@pytest.mark.parametrize("bad", [-1, True, 1.5, "8"])
def test_an_invalid_hold_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="prefill_hold"):
        EngineConfig(prefill_hold=bad)


def steps_until_done(eng, outs: dict, on_finish=None) -> None:
    while eng.has_work():
        for ev in eng.step():
            outs[ev.request_id] = ev.tokens
            if on_finish is not None:
                on_finish()


def late_arrival(eng, decode_passes: int):
    """Two rows decoding for `decode_passes` passes, then a third request: (outputs by
    request, pass events, the index of the first pass after the third arrived)."""
    passes, outs = [], {}
    eng.sink = lambda e: passes.append(e) if isinstance(e, PassEvent) else None
    ids = [eng.add_request(p, 24) for p in PROMPTS[:2]]
    while len(passes) < 1 + decode_passes:
        for ev in eng.step():
            outs[ev.request_id] = ev.tokens
    arrived = len(passes)
    ids.append(eng.add_request(PROMPTS[2], 4))
    steps_until_done(eng, outs)
    eng.sink = None
    return [outs[i] for i in ids], passes, arrived


@pytest.mark.parametrize("hold", [1, 3, 6])
def test_a_request_waits_the_hold_while_rows_decode_then_joins(engine_cache, hold):
    expected, passes, arrived = late_arrival(engine_cache(max_batch_size=4), 2)
    kinds = [p.kind for p in passes]
    joined = kinds.index("mixed", arrived)  # no hold: the first pass planned after it arrived
    assert set(kinds[arrived:joined]) <= {"decode"} and joined <= arrived + 1
    outs, passes, arrived = late_arrival(engine_cache(max_batch_size=4, prefill_hold=hold), 2)
    assert outs == expected
    # `hold` more passes decode the two rows alone; the one after takes the prompt.
    held = passes[arrived : joined + hold]
    assert all(p.kind == "decode" and p.width == 2 for p in held)
    assert passes[joined + hold].kind == "mixed" and passes[joined + hold].width == 3


def closed_loop(eng):
    """Three rows asking for different lengths (they finish apart), each replaced by the
    next request as it finishes, as a closed-loop client does: (outputs, pass events)."""
    passes, outs, queue = [], {}, list(NEXT)
    eng.sink = lambda e: passes.append(e) if isinstance(e, PassEvent) else None
    ids = [eng.add_request(p, n) for p, n in zip(PROMPTS, (6, 9, 12))]

    def replace():
        if queue:
            ids.append(eng.add_request(queue.pop(0), 5))

    steps_until_done(eng, outs, replace)
    eng.sink = None
    return [outs[i] for i in ids], passes


def test_prompts_arriving_apart_prefill_together_after_the_rows_finish(engine_cache):
    expected, apart = closed_loop(engine_cache(max_batch_size=3))
    assert sum(p.kind == "mixed" for p in apart) >= 2  # each replacement stalled the others
    outs, passes = closed_loop(engine_cache(max_batch_size=3, prefill_hold=16))
    assert outs == expected
    assert not any(p.kind == "mixed" for p in passes)
    together = [p for p in passes[1:] if p.prefill_tokens]
    assert len(together) == 1 and together[0].width == 3
    assert together[0].prefill_tokens == sum(len(p) for p in NEXT)


def test_nobody_waits_when_no_row_is_decoding(engine_cache):
    eng = engine_cache(max_batch_size=4, prefill_hold=8)
    passes = []
    eng.sink = lambda e: passes.append(e) if isinstance(e, PassEvent) else None
    eng.add_request(PROMPTS[0], 3)  # an idle engine: prefilled at once
    eng.step()
    assert passes[0].kind == "prefill"
    outs: dict = {}
    steps_until_done(eng, outs)
    eng.add_request(PROMPTS[1], 3)  # every row finished: nothing to stall
    eng.step()
    eng.sink = None
    assert passes[-1].kind == "prefill" and passes[-1].width == 1


def test_held_requests_neither_widen_the_next_pass_nor_stop_the_pipeline(engine_cache):
    eng = engine_cache(max_batch_size=4, prefill_hold=4)
    for p in PROMPTS[:2]:
        eng.add_request(p, 12)
    eng.step()
    eng.step()  # two rows decoding
    eng.add_request(PROMPTS[2], 4)
    assert eng.launcher.expected_width(2) == 3  # not held yet: it would join
    eng.step()
    eng.step()  # the first pass planned since (the one before may have been queued ahead)
    assert eng.scheduler.hold_from is not None
    assert eng.launcher.expected_width(2) == 2
    queued = eng.passes_queued
    eng.step()
    eng.step()
    assert eng.passes_queued - queued == 2  # a hold keeps the pipeline: the next pass is known
    steps_until_done(eng, {})
    assert eng.scheduler.hold_from is None


def test_a_prompt_joins_a_prefilling_row_at_once(engine_cache):
    eng = engine_cache(max_batch_size=4, prefill_chunk=4, prefill_hold=8)
    passes = []
    eng.sink = lambda e: passes.append(e) if isinstance(e, PassEvent) else None
    eng.add_request(list(range(1, 30)), 3)  # eight chunks of at most 4 tokens
    eng.step()
    eng.add_request(PROMPTS[0], 3)  # nothing decodes yet: no row to stall
    eng.step()
    steps_until_done(eng, {})
    eng.sink = None
    assert passes[0].width == 1 and passes[1].kind == "prefill" and passes[1].width == 2


def test_the_adaptive_policy_knows_when_prompts_are_held(engine_cache):
    # With prompts held, rows set apart by drafting stall no prefill one by one, so a batch
    # re-measures past draft lengths priced out (draft_cost.py).
    held = engine_cache(mtp=True, draft_policy="adaptive", draft_tokens=4, prefill_hold=2)
    assert held.policy.held_prompts
    assert not engine_cache(mtp=True, draft_policy="adaptive", draft_tokens=4).policy.held_prompts
