"""`runner run NAME --plan`: which chip this process measures on and which cells a run
would measure, with an estimate of the time, as one JSON object; nothing is run.

It runs in the measuring process itself (after the OpenBLAS re-run), because the BLAS
library is part of the chip fingerprint: a parent process without OpenBLAS preloaded
would name another chip and find none of its cells. `python -m runner.report` asks
this before it measures, to say what it will measure and why.
"""

from __future__ import annotations

from pathlib import Path

from runner.experiments import cell_plan, chip, execute
from runner.experiments.declaration import Experiment
from runner.store.cell import CellRecord
from runner.store.machine_class import of_fingerprint
from runner.store.store import Store, chip_id_of

# Used when execute.py has no estimate_seconds: a cell of a small workload takes a few
# seconds here, and each arm's engine loads and compiles once before its first cell.
FALLBACK_CELL_SECONDS = 3.0
FALLBACK_ARM_SECONDS = 10.0


def estimate(exp: Experiment, cells: list[CellRecord]) -> tuple[float, str]:
    """Seconds to measure the cells, and what the figure is based on."""
    estimate_seconds = getattr(execute, "estimate_seconds", None)
    if estimate_seconds is not None:
        return float(estimate_seconds(exp, cells)), "execute.estimate_seconds"
    arms = len({c.arm for c in cells})
    seconds = len(cells) * FALLBACK_CELL_SECONDS + arms * FALLBACK_ARM_SECONDS if cells else 0.0
    return seconds, (
        f"rough: {FALLBACK_CELL_SECONDS:g} s a cell and {FALLBACK_ARM_SECONDS:g} s "
        "of loading and warm-up an arm"
    )


def plan(exp: Experiment, db: Path, remeasure: bool) -> dict:
    fingerprint = chip.fingerprint()
    chip_id = chip_id_of(fingerprint)
    cells = cell_plan.plan_cells(exp)
    done: set = set()
    if not remeasure and Path(db).exists():
        with Store.open(db) as st:
            done = cell_plan.done_cells(st, exp, chip_id)
    todo = [c for c in cells if c.key not in done]
    seconds, basis = estimate(exp, todo)
    return {
        "experiment": exp.name,
        "declaration_sha256": exp.sha256,
        "chip": {
            "chip_id": chip_id,
            **{k: fingerprint[k] for k in ("name", "device", "cores", "blas")},
            "machine_class": of_fingerprint(fingerprint, chip.declared_machine_class()).label,
        },
        "planned": len(cells),
        "complete_here": len(cells) - len(todo),
        "todo": [list(c.key) for c in todo],
        "todo_by_arm": {arm: sum(c.arm == arm for c in todo) for arm in exp.arms},
        "estimate_seconds": round(seconds, 1),
        "estimate_basis": basis,
    }
