"""The step after a drafting pass, and the next verify pass built while its drafts are made.

- A block-drafting step is serial on MLX's CPU backend: the verify pass runs, the host
  commits it, the drafter's pass runs, the host reads the drafts and cuts them
  (row_lengths.py), then builds the next verify pass's graph while the device waits (the
  graph of a pass through every layer takes the host a good part of the pass's own time).
  Built on the drafter's lazy tokens instead, the next verify graph is made while the
  drafter's pass runs, and queued as soon as the drafts have landed and been cut. On
  MLX's CPU backend the overlap is the pass's tail only: queuing a graph returns once
  about a hundred of its kernels are left to run (MLX keeps at most ten tasks of ten
  kernels in flight a stream), so the host builds while the drafter's last layers run.
- It is built for the drafts each row is likely to keep: a fixed policy's k, under the
  adaptive policy as many as the last cut at that width left (`DraftPolicy.likely_left`);
  the cut is told, and prices any other lengths with what building this one took.
  When the cut leaves the rows anything else, the built graph is dropped unqueued:
  nothing of it ran, the KV pool's arrays it replaced are put back, and the pass is
  planned afresh from the rows' drafts, as without it.
- Only where the plan is the one `Launcher.launch` would make then: every running row a
  greedy decode row drafting this step, no waiting request a free row could admit, no
  draft tree, a compiled engine that pipelines. The pass is then one launched ahead of
  its step (`Launched.ahead`), as a pipelined decode pass is.
"""

from __future__ import annotations

import time
from typing import NamedTuple, Optional

from .drafting.drafter import PendingDrafts, TargetOutputs
from .launch import Launcher
from .passes import Landed, Launched


class BuiltAhead(NamedTuple):
    launched: Launched  # built, not queued
    pool_arrays: list  # the KV pool's arrays before the build, put back if it is dropped
    drafts: int  # the drafts every row carries in it
    build_ns: int  # what building it took the host (what building it again would take)


def draft_next(
    launcher: Launcher, cur: Launched, out: Landed, may_build: bool
) -> tuple[str, Optional[Launched]]:
    """Decide the drafts of the pass after `cur`, bring the drafter up to date (or book a
    fused pass's drafts) and cut the rows' drafts; with `may_build`, build the next pass on
    drafts still being made. Returns why the rows carry what they carry, and that pass
    when it was built and queued (None: plan the next pass afresh)."""
    drafter, policy = launcher.drafter, launcher.policy
    k = launcher.decide(cur)
    reason = policy.reason
    if cur.fused:
        drafter.adopt(cur.plan.rows, out.drafts, k > 0)
        return reason, None
    pending = drafter.draft(cur.plan.rows, TargetOutputs(out.starts, cur.hidden, cur.first), k)
    if drafter.looked_up:
        looked = f"looked up: {drafter.looked_up} of {len(cur.plan.rows)} rows"
        reason = f"{reason}; {looked}" if reason else looked
    built = None
    if pending is not None:
        if may_build:
            built = build(launcher, pending, policy.likely_left(len(pending.rows), k))
        pending.land()
    ahead = None if built is None else (built.drafts, built.build_ns)
    cut = policy.trim(cur.plan.rows, launcher.config.draft_tree, ahead)
    if cut:
        reason = f"{reason}; cut: {cut}"
    return reason, (None if built is None else queue_if_kept(launcher, built))


def build(launcher: Launcher, pending: PendingDrafts, k: int) -> Optional[BuiltAhead]:
    """The next pass's graph with every row verifying k drafts taken from `pending`'s lazy
    tokens; None where the plan could differ from the one Launcher.launch would make."""
    sched, config = launcher.scheduler, launcher.config
    rows = sched.running
    if not (config.pipeline and config.compile) or k < 2 or (config.draft_tree and len(rows) == 1):
        return None
    if pending.rows != rows:  # rows compare by identity
        return None  # a row finished, or sits this step out (prefill)
    if any(s.temperature > 0 for s in rows) or not launcher.policy.permits(len(rows)):
        return None
    if sched.waiting and len(rows) < config.max_batch_size:
        return None  # a slot is free: admit at the next planned pass
    for s in rows:
        s.drafts = [0] * k  # lengths for the plan; the tokens come from the graph
    try:
        plan = sched.plan(use_drafts=True)
    finally:
        for s in rows:
            s.drafts = []
    saved = [(kv.kv, kv.ik) for kv in launcher.forward.pool.layers]
    t0 = time.perf_counter_ns()
    launched = launcher.launch_plan(plan, drafts=pending.tokens, queue=False)
    return BuiltAhead(launched, saved, k, time.perf_counter_ns() - t0)


def queue_if_kept(launcher: Launcher, built: BuiltAhead) -> Optional[Launched]:
    """Queue the built pass if every row kept the drafts it was built for; else drop it
    and put the KV pool's arrays back."""
    launched, plan = built.launched, built.launched.plan
    kept = plan.rows == launcher.scheduler.running and all(
        len(s.drafts) == d and not s.draft_parents for s, d in zip(plan.rows, plan.drafted)
    )
    if kept:
        built.pool_arrays.clear()  # unreferenced, the pool's old arrays may be written in place
        launched.ahead = True
        launched.queue()
        launcher.passes_built_ahead += 1
        return launched
    for kv, (a, b) in zip(launcher.forward.pool.layers, built.pool_arrays):
        kv.kv, kv.ik = a, b
    return None
