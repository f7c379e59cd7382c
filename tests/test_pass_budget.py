"""The per-pass token budget (max_pass_tokens): decode rows first and never cut, prefill
chunks in what is left, and no output changes (the property tests cover that broadly;
these pin the scheduling rule on hand-made cases)."""

from __future__ import annotations

import pytest

from runner.engine import EngineConfig, PassEvent

SHORT = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
LONG = [(7 * j) % 290 + 1 for j in range(60)]


@pytest.mark.parametrize("bad", [-1, True, 1.5, "8"])
def test_an_invalid_budget_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="max_pass_tokens"):
        EngineConfig(max_pass_tokens=bad)


def test_no_budget_is_zero_or_none():
    assert EngineConfig().max_pass_tokens == 0
    assert EngineConfig(max_pass_tokens=None).max_pass_tokens == 0
    assert EngineConfig(max_pass_tokens=12).max_pass_tokens == 12


def run_long_into_short(eng, short, max_new):
    """Start `short` decoding, then send LONG; returns outputs by request and pass events."""
    passes, outs = [], {}
    eng.sink = lambda e: passes.append(e) if isinstance(e, PassEvent) else None
    ids = [eng.add_request(p, max_new) for p in short]
    while len(passes) < 2:  # the short prompts are prefilled and decoding
        for ev in eng.step():
            outs[ev.request_id] = ev.tokens
    ids.append(eng.add_request(LONG, 4))
    while eng.has_work():
        for ev in eng.step():
            outs[ev.request_id] = ev.tokens
    eng.sink = None
    return [outs[i] for i in ids], passes


def test_a_long_prompt_arriving_never_stalls_the_decoding_rows(engine_cache):
    expected, unbudgeted = run_long_into_short(engine_cache(max_batch_size=4, prefill_chunk=64), SHORT, 30)
    assert any(p.prefill_tokens == len(LONG) for p in unbudgeted)  # without a budget: one 60-token pass
    eng = engine_cache(max_batch_size=4, prefill_chunk=64, max_pass_tokens=8)
    outs, passes = run_long_into_short(eng, SHORT, 30)
    assert outs == expected
    long_prefill = [p for p in passes[2:] if p.prefill_tokens]
    # Every pass that prefilled the long prompt also decoded all three short rows, and
    # the prompt took what they left of the budget.
    assert sum(p.prefill_tokens for p in long_prefill) == len(LONG)
    assert all(p.decode_tokens == 3 and p.prefill_tokens <= 5 and p.kind == "mixed" for p in long_prefill)
    assert len(long_prefill) == -(-len(LONG) // 5)


def test_decode_rows_past_the_budget_all_run_and_prefill_waits(engine_cache):
    short = [[5], [8], [10]]  # one pass of budget 3 prefills all three
    expected, _ = run_long_into_short(engine_cache(max_batch_size=4, prefill_chunk=64), short, 6)
    eng = engine_cache(max_batch_size=4, prefill_chunk=64, max_pass_tokens=3, mtp=True, draft_policy="always")
    outs, passes = run_long_into_short(eng, short, 6)
    assert outs == expected
    assert passes[0].prefill_tokens == 3 and passes[0].width == 3
    assert max(p.decode_tokens for p in passes) == 6  # three drafted rows, budget 3: all run
    assert all(p.prefill_tokens == 0 for p in passes if p.decode_tokens >= 3)
    assert sum(p.prefill_tokens for p in passes) == 3 + len(LONG)


def test_prefill_rows_share_the_budget_in_admission_order(engine_cache):
    eng = engine_cache(max_batch_size=2, prefill_chunk=4, max_pass_tokens=6)
    passes = []
    eng.sink = lambda e: passes.append(e) if isinstance(e, PassEvent) else None
    eng.generate([list(range(1, 11)), list(range(20, 30))], max_new_tokens=1)
    eng.sink = None
    # the first row takes a whole chunk (prefill_chunk 4), the second what is left (2)
    assert [(p.width, p.prefill_tokens) for p in passes[:2]] == [(2, 6), (2, 6)]
    assert sum(p.prefill_tokens for p in passes) == 20


def test_a_pass_without_decode_rows_always_prefills(engine_cache):
    eng = engine_cache(max_batch_size=3, prefill_chunk=8, max_pass_tokens=1)
    passes = []
    eng.sink = lambda e: passes.append(e) if isinstance(e, PassEvent) else None
    out = eng.generate([[3, 4, 5], [6, 7]], max_new_tokens=2)
    eng.sink = None
    assert out == engine_cache(max_batch_size=3, prefill_chunk=8).generate(
        [[3, 4, 5], [6, 7]], max_new_tokens=2
    )
    assert [p.prefill_tokens for p in passes[:3]] == [1, 1, 1] and passes[0].width == 1


def test_a_waiting_prefill_gets_the_budget_a_finished_row_frees(engine_cache):
    """A decode pass that left a prefill out is never followed by one queued ahead
    (pipelining): the next pass is planned, so the prefill gets the freed budget."""
    eng = engine_cache(max_batch_size=3, prefill_chunk=64, max_pass_tokens=2)
    passes = []
    eng.sink = lambda e: passes.append(e) if isinstance(e, PassEvent) else None
    for prompt, max_new in (([5], 2), ([8], 20), (LONG, 1)):
        eng.add_request(prompt, max_new)
    while eng.has_work():
        eng.step()
    eng.sink = None
    assert [(p.decode_tokens, p.prefill_tokens) for p in passes[:4]] == [(0, 2), (2, 0), (1, 1), (1, 1)]


def test_a_row_left_out_of_a_pass_still_reports_its_state_bytes(engine_cache):
    eng = engine_cache(max_batch_size=3, prefill_chunk=64, max_pass_tokens=3, mtp=True, draft_policy="always")
    seen = []

    def check(e):
        if isinstance(e, PassEvent):  # rows running after the pass, and what they hold
            seen.append((e.width, len(eng.scheduler.running), e.state_bytes, eng.state_bytes()))

    eng.sink = check
    eng.generate([[5], [8], LONG], max_new_tokens=6)
    eng.sink = None
    # Passes that left LONG out (after its first prefill token) and finished no row:
    # the event counts LONG's blocks too.
    left_out = [(reported, live) for width, running, reported, live in seen if width < running]
    assert left_out and all(reported == live for reported, live in left_out)
