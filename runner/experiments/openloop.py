"""One open-loop cell: requests arrive on a schedule (arrivals.py), not when the last one
finished.

At concurrency c at most c requests are in flight: an arrival that finds c in flight
waits client-side, first come first served, and is submitted when one finishes; its
arrival_ns stays the time it arrived, so its TTFT includes the wait. A request is
submitted at its arrival time, or as soon after it as the runtime hands control back:
while requests are in flight the loop polls the runtime, and poll() is where the work
happens (our engine and mlx-lm run one pass or step; a server's runtime waits on its
streams, here at most until the next arrival is due), so a due arrival waits at most
one pass, as it would at a real server's queue. With nothing in flight the loop sleeps
until the next arrival. The cell ends when the schedule has nothing more to send and
every request has finished. This module does not talk to the store.
"""

from __future__ import annotations

import time
from collections import deque

from runner.experiments.cell import CellRows, request_seed
from runner.experiments.declaration import Experiment
from runner.experiments.progress import Progress
from runner.experiments.workloads.arrivals import Arrival, schedule
from runner.experiments.workloads.workload import PromptStream
from runner.runtimes import Runtime

NS = 1_000_000_000


def run_open_cell(
    runtime: Runtime,
    stream: PromptStream,
    concurrency: int,
    exp: Experiment,
    progress: Progress | None = None,
) -> CellRows:
    w = exp.workload
    plan = schedule(w, exp.seed, concurrency, stream)
    rows = CellRows()
    owner: dict[int, Arrival] = {}  # runtime handle -> the request it is
    waiting: deque[Arrival] = deque()
    tokens = 0
    clock = time.perf_counter_ns

    runtime.begin_cell()
    t0 = clock()
    try:
        while True:
            waiting.extend(plan.due(clock() - t0, tokens))
            while waiting and len(owner) < concurrency:
                a = waiting.popleft()
                handle = runtime.submit(
                    a.prompt, a.max_new_tokens, w.temperature, request_seed(exp.seed, a.request_id)
                )
                owner[handle] = a
            upcoming = plan.next_ns(tokens)
            now = clock() - t0
            if upcoming is not None and upcoming <= now:
                continue  # due already (a new play starts, or time passed while submitting)
            if not owner:
                if upcoming is None:
                    break
                time.sleep((upcoming - now) / NS)
                continue
            wait_s = None if upcoming is None else (upcoming - now) / NS
            for ev in runtime.poll(wait_s):
                a = owner.pop(ev.handle)
                tokens += ev.output_tokens
                rows.add(
                    ev,
                    a.request_id,
                    a.client,
                    arrival_ns=t0 + a.at_ns,
                    label=a.label,
                    asked_tokens=a.max_new_tokens,
                )
                plan.finished(a.request_id, ev.done_ns - t0)
                if progress:
                    progress.update(len(rows.requests), tokens)
    finally:
        passes = runtime.end_cell()
    return rows.close(t0, passes)
