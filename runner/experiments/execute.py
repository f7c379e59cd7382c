"""Running an experiment's cells on each arm's runtime and handing their raw rows to the store.

- Cells: arm x concurrency x round (`cell_plan.plan_cells`, one `CellRecord` each), ordered round ->
  concurrency -> arm so that the arms interleave and machine drift hits them alike, in
  counterbalanced order (A B, then B A).
- A cell's requests: closed-loop clients (`closed_loop.py`) or open-loop arrivals (a
  Poisson process or a script, at most c requests in flight: openloop.py's, their
  schedules workloads/arrivals.py's).
- Sized by time, the same rule for every arm: a client keeps sending while it has sent
  fewer than requests_per_client, or the cell has run less than min_cell_seconds (from
  its t0) or produced fewer than min_cell_tokens output tokens (of finished requests);
  the requests then in flight finish and are kept. Every arm replays the same requests
  in the same order; a faster arm replays more of the stream.
- One runtime an arm (runner.runtimes: our engine, mlx-lm in-process, an mlx_lm.server the
  runner starts, or any OpenAI-compatible server), started and warmed up outside any cell's
  clock before the first group of cells (a round's arms at one concurrency and rate) it is
  in, together with the group's other arms, so that a group's cells run back to back; it
  is stopped after its last cell or when the run ends however it ends, and, under
  `restart_every`, before each block of that many rounds (arm_runtimes.py says why).
- Rows are buffered in memory during a cell and written between cells, so logging does
  not perturb the timing; given `cell_folders`, each finished cell also goes to a
  measurement folder at once (a killed run loses no finished cell). Per-token times ride
  on the request rows (token_ns) and become the tokens table's rows in the same
  transaction (none for a runtime that cannot time its tokens); a runtime without
  per-pass rows stores none (absent, not zero). The machine's load (load.py) is sampled
  just outside the cell's clock and stored with the run, as is the declared SLO; a cell
  whose CPU other processes or the hypervisor took past the declared contention limit is
  measured again in its slot (load.py's rule), and the run kept says how many times.
- Measuring until decided (`until_decided.py`) runs a subset of the cells (`keep`) and
  stops between groups of cells at a deadline.
- Resuming: cells complete in the database (same experiment, declaration sha256, chip
  and quick flag) are skipped; with `remeasure` every cell runs again and its new run is
  appended (pages use the newest run of a cell), except those re-measured since
  `remeasured_since` (an earlier look of the same re-measurement).
- Faults: a runtime fault (a server unreachable, dead, erroring or silent) fails its cell
  with one line and the run goes on; any other error (Ctrl-C included) fails the cell
  and goes on up.
- It parses no declaration, renders no page and prints nothing itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from runner.engine.checkpoint import checkpoint_sha256
from runner.engine.drafting.block_drafter import DRAFTER_FILES
from runner.engine.shelf import Shelf
from runner.experiments import arm_runtimes, chip, load, memory, probe
from runner.experiments.cell import CellRows, needs_more, output_sha256, request_seed  # noqa: F401  (the API)
from runner.experiments.cell_plan import at_rate, done_cells, plan_cells
from runner.experiments.closed_loop import run_cell
from runner.experiments.declaration import Experiment
from runner.experiments.estimate import cell_seconds, estimate_seconds  # noqa: F401  (estimate_seconds: the API)
from runner.experiments.progress import CellLabel, CellTarget, Progress
from runner.experiments.workloads.arrivals import describe, min_requests
from runner.experiments.workloads.workload import PromptStream
from runner.runtimes import Runtime, RuntimeFault
from runner.store.cell import CellRecord
from runner.store.cell_folders import CellFolders
from runner.store.store import Store, StoreError


@dataclass
class RunSummary:
    planned: int = 0
    skipped: int = 0
    completed: int = 0
    failed_cell: CellRecord | None = None  # the cell an error stopped the run in
    faults: list[tuple[CellRecord, str]] = field(default_factory=list)  # cells a runtime fault cost
    chip_id: str | None = None  # the machine it ran on
    stopped_by_budget: bool = False  # a deadline ended it between two groups of cells


def run_experiment(
    exp: Experiment,
    db_path: Path,
    progress: Progress,
    *,
    remeasure: bool = False,
    remeasured_since: datetime | None = None,
    cell_folders: CellFolders | None = None,
    memory_budget_mb: float | None = None,
    keep=None,
    deadline: float | None = None,
) -> RunSummary:
    """cell_folders: where each finished cell's run is written as it completes (the
    committed record; `runner run` passes one beside the database). memory_budget_mb:
    the resident memory over which idle arms' engines are released (memory.py). keep:
    which planned cells to run (measuring until decided: the undecided concurrencies);
    deadline: a time.monotonic() after which no new group of cells (a round's arms at
    one concurrency) starts."""
    budget = memory.budget_bytes(memory_budget_mb)
    cells = [c for c in plan_cells(exp) if keep is None or keep(c)]
    summary = RunSummary(planned=len(cells))
    fingerprint, code = chip.fingerprint(), chip.code_version()
    checkpoint = exp.checkpoint
    with Store.open(db_path) as st:
        stale = st.fail_stale_runs()
        if stale:
            progress.note(f"marked {stale} run(s) left 'running' by a killed process as failed")
        chip_id = summary.chip_id = st.ensure_chip(fingerprint, chip.declared_machine_class())
        if remeasure:
            done = set() if remeasured_since is None else done_cells(st, exp, chip_id, remeasured_since)
        else:
            done = done_cells(st, exp, chip_id)
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
                if arm_runtimes.group_of(cell) != arm_runtimes.group_before(todo, k - 1):
                    if deadline is not None and time.monotonic() >= deadline:
                        summary.stopped_by_budget = True
                        break
                    if arm_runtimes.restart_due(exp, todo, k - 1):
                        arm_runtimes.stop_all(runtimes, progress, cell.round)
                    arm_runtimes.start_group(exp, todo, k - 1, runtimes, budget, progress, shelf)
                if cell.arm not in runtimes:  # released over the memory budget since
                    arm_runtimes.start(exp, cell.arm, runtimes, progress, shelf)
                measuring = _Measuring(
                    st,
                    exp,
                    stream,
                    progress,
                    summary,
                    dict(chip_id=chip_id, model_sha256=model_sha256[cell.arm], code_version=code),
                    cell_folders,
                    machine.columns(),
                )
                label = CellLabel(k, len(todo), cell.arm, cell.concurrency, cell.round)
                _cell(measuring, cell, runtimes[cell.arm], label)
                if k == last[cell.arm] and isinstance(runtimes[cell.arm], Runtime):
                    runtimes.pop(cell.arm).stop()  # the arm is done: its server goes now
                    memory.release()
                memory.bound(runtimes, todo[k].arm if k < len(todo) else None, budget, progress)
        finally:  # whatever ends the run ends every runtime: no server outlives it
            for runtime in runtimes.values():
                if isinstance(runtime, Runtime):
                    runtime.stop()
    return summary


@dataclass
class _Measuring:
    """What every cell of one invocation is measured with and handed to."""

    st: Store
    exp: Experiment
    stream: PromptStream
    progress: Progress
    summary: RunSummary
    run: dict  # the run row's machine facts: chip, model hash, code version
    cell_folders: CellFolders | None
    machine: dict[str, float] | None  # the machine probe's columns


def _cell(m: _Measuring, cell: CellRecord, runtime: Runtime | RuntimeFault, label: CellLabel) -> None:
    """One cell, measured again in its slot (at most load.MAX_RERUNS times) while other
    processes or the hypervisor took more of its CPU than the declared limit; the run
    kept records how many times it was (and is flagged busy when still contended)."""
    limit = load.contention_limit(m.exp.contention_limit)
    for attempt in range(load.MAX_RERUNS + 1):
        last = limit is None or attempt == load.MAX_RERUNS
        if _attempt(m, cell, runtime, label, None if last else limit, None if limit is None else attempt):
            return


def _attempt(
    m: _Measuring,
    cell: CellRecord,
    runtime: Runtime | RuntimeFault,
    label: CellLabel,
    limit: float | None,
    reruns: int | None,
) -> bool:
    """Measure the cell once; False when it was contended past `limit` (to run again)."""
    st, stream, progress, summary = m.st, m.stream, m.progress, m.summary
    exp = at_rate(m.exp, cell.rate)
    knobs = runtime.knobs if isinstance(runtime, Runtime) else exp.runtime_knobs(cell.arm)
    run_id = st.begin_run(
        cell,
        knobs=knobs,
        runtime_version=runtime.runtime_version if isinstance(runtime, Runtime) else None,
        server_version=runtime.server_version() if isinstance(runtime, Runtime) else None,
        **m.run,
    )
    if m.machine:
        st.record_probe(run_id, m.machine)
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
        return True
    except BaseException:
        st.finish_run(run_id, "failed", load=load.figures(before, load.sample()))
        summary.failed_cell = cell
        progress.cell_finished(label, "failed", 0, time.perf_counter() - t)
        raise
    seconds = time.perf_counter() - t
    figures = load.figures(before, load.closing_sample(before))
    why = None if limit is None else load.contended(figures, limit)
    if why:  # its rows are not kept: the slot is measured again at once
        st.finish_run(run_id, "contended", load=figures)
        progress.cell_finished(
            label, "contended", rows.output_tokens, seconds, reason=f"{why}; measuring again"
        )
        return False
    with st.transaction():
        st.append_requests(run_id, rows.stored_requests())
        st.append_tokens(run_id, rows.stored_tokens())
        if rows.passes:
            st.append_passes(run_id, rows.passes)
        st.finish_run(run_id, "complete", load=figures, contention_reruns=reruns)
    summary.completed += 1
    if m.cell_folders is not None:  # outside the clock, before the next cell: a kill now loses nothing
        try:
            m.cell_folders.write(st, run_id)
        except StoreError as e:  # the run's folder, or the next load, writes it
            progress.note(f"the finished cell's folder was not written: {e}")
    progress.cell_finished(label, "complete", rows.output_tokens, seconds, requests=len(rows.requests))
    return True
