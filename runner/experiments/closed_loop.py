"""One cell's requests: closed-loop clients (`arrivals = "closed"`, the default) or, for
open-loop arrivals, `openloop.py`'s driver.

A cell at concurrency c is c clients, each sending its next prompt when its last request
finishes; client c's i-th prompt is request i * width + c of the workload's unbounded
seeded stream (workloads/workload.py). It keeps sending while needs_more() says so (the
same sizing rule for every arm); the requests then in flight finish and are kept. Rows
stay in memory (cell.py's CellRows); nothing is stored or printed here.
"""

from __future__ import annotations

import time

from runner.experiments.cell import CellRows, needs_more, request_seed
from runner.experiments.declaration import Experiment
from runner.experiments.openloop import run_open_cell
from runner.experiments.progress import Progress
from runner.experiments.workloads.workload import PromptStream
from runner.runtimes import Runtime


def run_cell(
    runtime: Runtime,
    stream: PromptStream,
    concurrency: int,
    exp: Experiment,
    progress: Progress | None = None,
) -> CellRows:
    """One cell: c closed-loop clients over the stream's clients 0..c-1, sized by
    needs_more(), or the declaration's open-loop arrivals (openloop.py)."""
    if exp.workload.arrivals != "closed":
        return run_open_cell(runtime, stream, concurrency, exp, progress)
    w = exp.workload
    owner: dict[int, tuple[int, int, int]] = {}  # runtime handle -> (client, request_id, asked)
    sent = [0] * concurrency
    rows = CellRows()
    tokens = 0

    def submit(client: int) -> None:
        i = sent[client]
        sent[client] += 1
        request_id = stream.request_id(client, i)
        asked = stream.new_tokens(request_id)
        handle = runtime.submit(
            stream.prompt(client, i), asked, w.temperature, request_seed(exp.seed, request_id)
        )
        owner[handle] = (client, request_id, asked)

    runtime.begin_cell()
    t0 = time.perf_counter_ns()
    try:
        for client in range(concurrency):
            submit(client)
        while runtime.busy():
            finished = runtime.poll()
            now = time.perf_counter_ns()
            for ev in finished:
                client, request_id, asked = owner.pop(ev.handle)
                tokens += ev.output_tokens
                if needs_more(w, sent[client], now - t0, tokens):
                    submit(client)
                rows.add(ev, request_id, client, asked_tokens=asked)
                if progress:
                    progress.update(len(rows.requests), tokens)
    finally:
        passes = runtime.end_cell()
    return rows.close(t0, passes)
