"""Hypothesis properties of batching, chunking, the pass token budget, accounting and
per-token commit times on tiny fp32 models."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from hypothesis import example, given, settings
from hypothesis import strategies as st

from runner.engine import Engine, PassEvent

prompts_st = st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=40), min_size=1, max_size=6)
budgets = st.sampled_from([0, 1, 2, 5, 16])  # max_pass_tokens; 0: no budget


@settings(max_examples=60)
@given(
    prompts=prompts_st,
    batch=st.integers(1, 4),
    chunk=st.sampled_from([1, 3, 8, 64]),
    budget=budgets,
    max_new=st.integers(1, 9),
    hold=st.sampled_from([0, 3]),  # prefill_hold
)
def test_output_independent_of_batch_chunk_and_budget(
    engine_cache, prompts, batch, chunk, budget, max_new, hold
):
    alone = engine_cache(max_batch_size=1, prefill_chunk=256)
    expected = [alone.generate([p], max_new_tokens=max_new)[0] for p in prompts]
    eng = engine_cache(max_batch_size=batch, prefill_chunk=chunk, max_pass_tokens=budget, prefill_hold=hold)
    assert eng.generate(prompts, max_new_tokens=max_new) == expected


@given(
    prompts=prompts_st,
    batch=st.integers(1, 4),
    chunk=st.sampled_from([2, 5, 16]),
    budget=budgets,
    max_new=st.integers(1, 9),
)
# A pass launched ahead whose only row the pass before it finished by EOS: it committed
# nothing and was reported as a pass of no live row (found by hypothesis).
@example(prompts=[[3, 293, 160]], batch=1, chunk=2, budget=0, max_new=3)
def test_accounting_adds_up(engine_cache, prompts, batch, chunk, budget, max_new):
    eng = engine_cache(max_batch_size=batch, prefill_chunk=chunk, max_pass_tokens=budget)
    outs, passes, reqs = eng.collect(prompts, max_new)
    assert all(1 <= p.width <= batch for p in passes)
    for p in passes:  # the budget: decode rows first and never cut, prefill in what is left
        if budget:
            assert p.prefill_tokens <= max(budget - p.decode_tokens, 0)
            assert p.decode_tokens or p.prefill_tokens >= 1
    for out in outs:  # exactly max_new_tokens, or fewer ending at EOS
        assert len(out) == max_new or (len(out) < max_new and out[-1] in eng.eos)
    assert sum(p.emitted for p in passes) == sum(len(o) for o in outs) == sum(r.output_tokens for r in reqs)
    assert sum(p.prefill_tokens for p in passes) == sum(len(p) for p in prompts)
    block = eng.pool.block_bytes
    for p in passes:
        assert p.state_bytes % block == 0 and 0 < p.max_row_state_bytes <= p.state_bytes
    assert eng.state_bytes() == 0 and eng.pool.blocks_in_use() == 0


def test_state_bytes_are_the_pool_bytes_rows_hold(engine_cache):
    eng = engine_cache(max_batch_size=2, prefill_chunk=8)
    seen = []

    def check(event):
        if isinstance(event, PassEvent):
            live = eng.scheduler.running
            # after a pass, every live row's bytes are its blocks' share of the real arrays
            per_slot = sum(a.nbytes for kv in eng.pool.layers for a in kv.arrays())
            per_slot //= eng.pool.n_blocks * eng.pool.block_size
            assert eng.state_bytes() == sum(len(s.blocks) for s in live) * per_slot * eng.pool.block_size
            for s in live:  # invariant: KV holds every committed token but the last
                assert s.prefilling or s.computed == len(s.tokens) - 1
            seen.append(event.state_bytes)

    eng.sink = check
    eng.generate([list(range(1, 30)), [7, 8, 9]], max_new_tokens=12)
    assert seen and max(seen) > 0 and eng.state_bytes() == 0


def test_state_bytes_count_the_mtp_backlog_and_draft_distributions(engine_cache):
    """MTP state is per-row state too: the hidden states a lazy MTP has not consumed yet,
    and a sampling row's draft distribution q (kept until its draft is verified)."""
    for knobs, temperature in (
        (dict(draft_policy="never", mtp_sync="lazy"), 0.0),
        (dict(draft_policy="always", mtp_sync="eager"), 0.8),
        (dict(draft_policy="always", mtp_sync="lazy", draft_tokens=3), 0.8),  # k q's a row
    ):
        eng = engine_cache(max_batch_size=2, prefill_chunk=8, mtp=True, **knobs)
        extra = []

        def check(event):
            if isinstance(event, PassEvent):
                live = eng.scheduler.running
                backlog = sum(s.computed - s.mtp_computed for s in live) * eng.args.hidden_size * 4
                q = sum(p.nbytes for s in live for p in s.draft_probs)
                assert (
                    eng.state_bytes() == sum(len(s.blocks) for s in live) * eng.pool.block_bytes + backlog + q
                )
                extra.append(backlog + q)

        eng.sink = check
        eng.generate([list(range(1, 30)), [7, 8, 9]], max_new_tokens=12, temperature=temperature, seed=3)
        assert max(extra) > 0 and eng.state_bytes() == 0


def test_finished_row_frees_its_slot_and_blocks_at_once(engine_cache):
    eng = engine_cache(max_batch_size=2, prefill_chunk=64)
    eng.add_request([1, 2, 3], max_new_tokens=2)
    eng.add_request([4, 5, 6], max_new_tokens=8)
    eng.add_request([7, 8, 9], max_new_tokens=3)  # waits for a slot
    widths = []
    eng.sink = lambda e: (
        widths.append((e.width, len(eng.scheduler.running))) if isinstance(e, PassEvent) else None
    )
    while eng.has_work():
        for ev in eng.step():
            if ev.request_id == 0:
                assert eng.scheduler.running and all(s.request_id != 0 for s in eng.scheduler.running)
    # the third request was admitted in the pass right after the first finished
    assert widths[1] == (2, 1) and widths[2][0] == 2


def test_pool_growth_keeps_every_row_state(engine_cache, tiny_checkpoint):
    """Rows that outgrow the initial pool (64 blocks) keep their cached keys and values."""
    prompts = [[(13 * i + 7 * j) % 290 + 1 for j in range(70 + 9 * i)] for i in range(4)]
    alone = engine_cache(max_batch_size=1, kv_block_size=4)
    expected = [alone.generate([p], max_new_tokens=6)[0] for p in prompts]
    eng = Engine.from_pretrained(
        tiny_checkpoint, max_batch_size=4, kv_block_size=4, prefill_chunk=32, mtp=True, compile=False
    )
    before = eng.pool.n_blocks
    assert eng.generate(prompts, max_new_tokens=6) == expected
    assert eng.pool.n_blocks > before


def test_collect_gives_outputs_and_events_and_puts_the_sink_back(engine_cache):
    eng = engine_cache(max_batch_size=2)
    mine = []
    eng.sink = mine.append
    outs, passes, reqs = eng.collect([[5, 6, 7], [8]], 3)
    assert eng.sink == mine.append and not mine
    assert outs == eng.generate([[5, 6, 7], [8]], max_new_tokens=3)
    assert [r.tokens for r in sorted(reqs, key=lambda r: r.request_id)] == [tuple(o) for o in outs]
    assert sum(p.emitted for p in passes) == 6 and all(isinstance(p, PassEvent) for p in passes)


@settings(max_examples=40)
@given(
    prompts=prompts_st,
    batch=st.integers(1, 4),
    policy=st.sampled_from([None, "always", "solo", "adaptive"]),
    sync=st.sampled_from(["eager", "lazy"]),
    pipeline=st.booleans(),
    budget=st.sampled_from([0, 3]),
    max_new=st.integers(1, 9),
)
def test_every_token_carries_its_commit_time(
    engine_cache, prompts, batch, policy, sync, pipeline, budget, max_new
):
    spec = dict(mtp=True, draft_policy=policy, mtp_sync=sync) if policy else {}
    eng = engine_cache(
        max_batch_size=batch, prefill_chunk=8, pipeline=pipeline, max_pass_tokens=budget, **spec
    )
    _, passes, reqs = eng.collect(prompts, max_new)
    assert len(reqs) == len(prompts)
    for r in reqs:
        t = r.token_ns
        assert len(t) == r.output_tokens == len(r.tokens)
        assert list(t) == sorted(t) and t[0] == r.first_token_ns and t[-1] == r.done_ns
        assert r.arrival_ns <= t[0]
    # Each token was stamped by the step that committed its pass (a queued pass's too):
    # a pass's window holds exactly the tokens it emitted, all with one time.
    times = sorted(x for r in reqs for x in r.token_ns)
    for p in passes:
        lo, hi = bisect_left(times, p.start_ns), bisect_right(times, p.start_ns + p.duration_ns)
        assert hi - lo == p.emitted and len(set(times[lo:hi])) <= 1
    assert sum(p.emitted for p in passes) == len(times)
