"""Running an experiment's cells on each arm's runtime and handing their raw rows to the store.

- Cells: arm x concurrency x round (`cell_plan.plan_cells`, one `CellRecord` each), ordered round ->
  concurrency -> arm so that the arms interleave and machine drift hits them alike, in
  counterbalanced order (A B, then B A).
- Closed loop (`arrivals = "closed"`, the default): a cell at concurrency c is c clients,
  each sending its next prompt when its last request finishes; client c's i-th prompt is
  request i * width + c of the workload's unbounded seeded stream (workload.py).
  Open-loop arrivals (a Poisson process or a script, at most c requests in flight) are
  openloop.py's, their schedules arrivals.py's.
- Sized by time, the same rule for every arm: a client keeps sending while it has sent
  fewer than requests_per_client, or the cell has run less than min_cell_seconds (from
  its t0) or produced fewer than min_cell_tokens output tokens (of finished requests);
  the requests then in flight finish and are kept. Every arm replays the same requests
  in the same order; a faster arm replays more of the stream.
- One runtime an arm (runner.runtimes: our engine, mlx-lm in-process, an mlx_lm.server the
  runner starts, or any OpenAI-compatible server), started and warmed up before its
  first cell, outside any cell's clock, and stopped when the run ends however it ends.
- Rows are buffered in memory during a cell and written between cells, so logging does
  not perturb the timing; given `cell_folders`, each finished cell also goes to a
  measurement folder at once (a killed run loses no finished cell). Per-token times ride
  on the request rows (token_ns) and become the tokens table's rows in the same
  transaction (none for a runtime that cannot time its tokens); a runtime without
  per-pass rows stores none (absent, not zero). The machine's load (load.py) is sampled
  just outside the cell's clock and stored with the run, as is the declared SLO.
- Resuming: cells complete in the database (same experiment, declaration sha256, chip
  and quick flag) are skipped; with `remeasure` every cell runs again and its new run is
  appended (pages use the newest run of a cell).
- Faults: a runtime fault (a server unreachable, dead, erroring or silent) fails its cell
  with one line and the run goes on; any other error (Ctrl-C included) fails the cell
  and goes on up.
- It parses no declaration, renders no page and prints nothing itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from runner.engine.checkpoint import checkpoint_sha256
from runner.engine.drafting.block_drafter import DRAFTER_FILES
from runner.engine.shelf import Shelf
from runner.experiments import chip, load, memory, probe
from runner.experiments.arrivals import describe, min_requests
from runner.experiments.cell import CellRows, needs_more, output_sha256, request_seed  # noqa: F401  (the API)
from runner.experiments.cell_plan import at_rate, done_cells, plan_cells
from runner.experiments.declaration import Experiment
from runner.experiments.estimate import cell_seconds, estimate_seconds  # noqa: F401  (estimate_seconds: the API)
from runner.experiments.openloop import run_open_cell
from runner.experiments.progress import CellLabel, CellTarget, Progress
from runner.experiments.workload import PromptStream
from runner.runtimes import Runtime, RuntimeFault, start
from runner.store.cell import CellRecord
from runner.store.cell_folders import CellFolders
from runner.store.store import Store, StoreError


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


def start_arm(
    exp: Experiment, arm: str, checkpoint: Path, shelf: Shelf | None = None
) -> Runtime | RuntimeFault:
    """The arm's runtime, started and warmed up; a RuntimeFault (a server that cannot be
    started or reached) is returned, to fail each of the arm's cells with its line.
    shelf: the run's loaded models, shared by its arms' engines (engine/shelf.py)."""
    runtime = None
    w = exp.workload
    try:
        runtime = start(exp.runtime(arm), exp.runtime_knobs(arm), checkpoint, shelf)
        runtime.warm_up(w.prompt_tokens, w.max_new_tokens, exp.seed, w.max_context)
        return runtime
    except RuntimeFault as fault:
        if runtime is not None:
            runtime.stop()
        return fault
    except BaseException:
        if runtime is not None:
            runtime.stop()
        raise


@dataclass
class RunSummary:
    planned: int = 0
    skipped: int = 0
    completed: int = 0
    failed_cell: CellRecord | None = None  # the cell an error stopped the run in
    faults: list[tuple[CellRecord, str]] = field(default_factory=list)  # cells a runtime fault cost


def run_experiment(
    exp: Experiment,
    db_path: Path,
    progress: Progress,
    *,
    remeasure: bool = False,
    cell_folders: CellFolders | None = None,
    memory_budget_mb: float | None = None,
) -> RunSummary:
    """cell_folders: where each finished cell's run is written as it completes (the
    committed record; `runner run` passes one beside the database). memory_budget_mb:
    the resident memory over which idle arms' engines are released (memory.py)."""
    budget = memory.budget_bytes(memory_budget_mb)
    cells = plan_cells(exp)
    summary = RunSummary(planned=len(cells))
    fingerprint, code = chip.fingerprint(), chip.code_version()
    checkpoint = exp.checkpoint
    with Store.open(db_path) as st:
        stale = st.fail_stale_runs()
        if stale:
            progress.note(f"marked {stale} run(s) left 'running' by a killed process as failed")
        chip_id = st.ensure_chip(fingerprint, chip.declared_machine_class())
        done = set() if remeasure else done_cells(st, exp, chip_id)
        todo = [c for c in cells if c.key not in done]
        summary.skipped = len(cells) - len(todo)
        if summary.skipped:
            progress.note(
                f"{summary.skipped} of {len(cells)} cells already complete; running the {len(todo)} missing"
            )
        if not todo:
            return summary
        stream = PromptStream(exp.workload, exp.seed, checkpoint, width=max(exp.concurrency))
        progress.plan([cell_seconds(exp, c.concurrency) for c in todo])
        runtimes: dict[str, Runtime | RuntimeFault] = {}
        # a block-drafting arm's model includes its drafter's files; each kind hashed once
        files = {arm: DRAFTER_FILES if exp.knobs(arm).get("drafter") == "block" else () for arm in exp.arms}
        sha_of = {extra: checkpoint_sha256(checkpoint, extra) for extra in set(files.values())}
        model_sha256 = {arm: sha_of[extra] for arm, extra in files.items()}
        memory.cap_cache()
        shelf = Shelf()  # arms on the same model share it and its compiled functions
        machine = probe.measure()  # once per invocation, before any engine holds memory
        progress.note(
            f"machine probe: prefill-sized products {machine.prefill_gflops:g} GFLOP/s, decode-sized "
            f"{machine.decode_gflops:g} GFLOP/s, memory read {machine.read_gbps:g} GB/s"
        )
        last = {cell.arm: k for k, cell in enumerate(todo, 1)}
        try:
            for k, cell in enumerate(todo, 1):
                if cell.arm not in runtimes:
                    progress.note(f"loading and warming up {exp.runtime(cell.arm)} for arm {cell.arm}")
                    runtimes[cell.arm] = start_arm(exp, cell.arm, checkpoint, shelf)
                _cell(
                    st,
                    exp,
                    cell,
                    runtimes[cell.arm],
                    stream,
                    progress,
                    summary,
                    CellLabel(k, len(todo), cell.arm, cell.concurrency, cell.round),
                    dict(chip_id=chip_id, model_sha256=model_sha256[cell.arm], code_version=code),
                    cell_folders,
                    machine.columns(),
                )
                if k == last[cell.arm] and isinstance(runtimes[cell.arm], Runtime):
                    runtimes.pop(cell.arm).stop()  # the arm is done: its server goes now
                    memory.release()
                _bound_memory(runtimes, todo[k].arm if k < len(todo) else None, budget, progress)
        finally:  # whatever ends the run ends every runtime: no server outlives it
            for runtime in runtimes.values():
                if isinstance(runtime, Runtime):
                    runtime.stop()
    return summary


def _bound_memory(runtimes: dict, next_arm: str | None, budget: int | None, progress: Progress) -> None:
    """Over the budget, release every engine but the next cell's (between cells)."""
    rss = memory.over(budget)
    if rss is None:
        return
    idle = sorted(a for a, r in runtimes.items() if a != next_arm and isinstance(r, Runtime))
    for arm in idle:
        runtimes.pop(arm).stop()
    memory.release()
    if idle:
        progress.note(
            f"resident memory {rss / 2**20:,.0f} MB is over the budget of {budget / 2**20:,.0f} MB: "
            f"released the engine(s) of arm(s) {', '.join(idle)}; each starts again before its next cell"
        )


def _cell(
    st: Store,
    exp: Experiment,
    cell: CellRecord,
    runtime: Runtime | RuntimeFault,
    stream: PromptStream,
    progress: Progress,
    summary: RunSummary,
    label: CellLabel,
    run: dict,
    cell_folders: CellFolders | None = None,
    machine: dict[str, float] | None = None,
) -> None:
    exp = at_rate(exp, cell.rate)
    knobs = runtime.knobs if isinstance(runtime, Runtime) else exp.runtime_knobs(cell.arm)
    run_id = st.begin_run(
        cell,
        knobs=knobs,
        runtime_version=runtime.runtime_version if isinstance(runtime, Runtime) else None,
        server_version=runtime.server_version() if isinstance(runtime, Runtime) else None,
        **run,
    )
    if machine:
        st.record_probe(run_id, machine)
    w = exp.workload
    target = CellTarget(
        min_requests(w, cell.concurrency),
        w.min_cell_seconds,
        w.min_cell_tokens,
        progress.estimates[label.index - 1],
        arrivals=describe(w),
    )
    progress.cell_started(label, target)
    before = load.sample()
    t = time.perf_counter()
    try:
        if isinstance(runtime, RuntimeFault):
            raise RuntimeFault(str(runtime))
        rows = run_cell(runtime, stream, cell.concurrency, exp, progress)
    except RuntimeFault as fault:  # costs this cell only: one line, and on to the next
        st.finish_run(run_id, "failed", load=load.figures(before, load.sample()))
        summary.faults.append((cell, str(fault)))
        progress.cell_finished(label, "failed", 0, time.perf_counter() - t, reason=str(fault))
        return
    except BaseException:
        st.finish_run(run_id, "failed", load=load.figures(before, load.sample()))
        summary.failed_cell = cell
        progress.cell_finished(label, "failed", 0, time.perf_counter() - t)
        raise
    seconds = time.perf_counter() - t
    figures = load.figures(before, load.sample())
    with st.transaction():
        st.append_requests(run_id, rows.stored_requests())
        st.append_tokens(run_id, rows.stored_tokens())
        if rows.passes:
            st.append_passes(run_id, rows.passes)
        st.finish_run(run_id, "complete", load=figures)
    summary.completed += 1
    if cell_folders is not None:  # outside the clock, before the next cell: a kill now loses nothing
        try:
            cell_folders.write(st, run_id)
        except StoreError as e:  # the run's folder, or the next load, writes it
            progress.note(f"the finished cell's folder was not written: {e}")
    progress.cell_finished(label, "complete", rows.output_tokens, seconds, requests=len(rows.requests))
