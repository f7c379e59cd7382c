"""Which arms' runtimes are up during a run: each started and warmed up, outside any cell's
clock, before the first group of cells it is in (a round's arms at one concurrency and
rate), together with the group's other arms. execute.py runs the cells and stops each
runtime after its arm's last one; memory.py releases idle ones over the memory budget.

Under `restart_every = N`, every runtime is stopped before the first group of each block
of N rounds, and each starts again with its next group. What stays with one engine
instance while it runs (where its arrays landed, what its warm-up timed) made two engines
of identical work read a few percent apart over a whole run here, and a round's pairing
cannot cancel it: both of a round's cells run on the same instances. Started afresh, the
instances vary between blocks, and the interval over rounds covers them.
"""

from __future__ import annotations

from itertools import takewhile
from pathlib import Path

from runner.engine.shelf import Shelf
from runner.experiments import memory
from runner.experiments.declaration import Experiment
from runner.experiments.progress import Progress
from runner.runtimes import Runtime, RuntimeFault
from runner.runtimes import start as start_runtime
from runner.store.cell import CellRecord


def start_arm(
    exp: Experiment, arm: str, checkpoint: Path, shelf: Shelf | None = None
) -> Runtime | RuntimeFault:
    """The arm's runtime, started and warmed up; a RuntimeFault (a server that cannot be
    started or reached) is returned, to fail each of the arm's cells with its line.
    shelf: the run's loaded models, shared by its arms' engines (engine/shelf.py)."""
    runtime = None
    w = exp.workload
    try:
        runtime = start_runtime(exp.runtime(arm), exp.runtime_knobs(arm), checkpoint, shelf)
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


def start(exp: Experiment, arm: str, runtimes: dict, progress: Progress, shelf: Shelf) -> None:
    progress.note(f"loading and warming up {exp.runtime(arm)} for arm {arm}")
    runtimes[arm] = start_arm(exp, arm, exp.checkpoint, shelf)


def start_group(
    exp: Experiment,
    cells: list[CellRecord],
    i: int,
    runtimes: dict,
    budget: int | None,
    progress: Progress,
    shelf: Shelf,
) -> None:
    """Before a group's first cell (index i), the engines of every arm in the group, so that
    its cells run back to back: an arm started between two of them would put its load and
    warm-up (tens of seconds) between the cells a round's ratio pairs, and machine drift in
    that gap would become that round's difference. Over the memory budget the rest start
    lazily, before their cells, as memory.py frees room."""
    group = group_of(cells[i])
    arms = [c.arm for c in takewhile(lambda c: group_of(c) == group, cells[i:])]
    for n, arm in enumerate(a for a in dict.fromkeys(arms) if a not in runtimes):
        if n and memory.over(budget) is not None:
            return
        start(exp, arm, runtimes, progress, shelf)


def restart_due(exp: Experiment, cells: list[CellRecord], i: int) -> bool:
    """Whether every runtime starts afresh before cells[i], the first of its group: the
    first cell of a new block of `restart_every` rounds (never for the invocation's first)."""
    n = exp.restart_every
    return bool(n) and i > 0 and cells[i].round // n != cells[i - 1].round // n


def stop_all(runtimes: dict, progress: Progress, round_: int) -> None:
    """Stop every runtime (each starts again before its next group) and hand back memory."""
    for runtime in runtimes.values():
        if isinstance(runtime, Runtime):
            runtime.stop()
    runtimes.clear()
    memory.release()
    progress.note(f"round {round_}: every arm's runtime starts afresh (restart_every)")


def group_of(cell: CellRecord) -> tuple:
    """The group a cell is in: its (round, concurrency, rate)."""
    return cell.round, cell.concurrency, cell.rate


def group_before(cells: list[CellRecord], i: int) -> tuple | None:
    """The group of the cell before index i (None for the first)."""
    return None if i == 0 else group_of(cells[i - 1])
