"""The `runner run` verb: argument parsing, exit codes and messages (`export` and `import`
are `exchange_commands.py`'s).

- Bad input (declaration, database, export files): readable lines on stderr, exit code
  2, no traceback.
- An interrupted run exits 130 and says how to resume; a run some of whose cells a
  runtime fault cost (a server not reachable, say) measures the rest, exits 1 and says
  how many failed.
- The work itself lives in execute.py and runner.store.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path

DEFAULT_DB = Path("reports/data/runs.duckdb")
EXPERIMENTS = Path("reports/experiments")
QUICK_HELP = (
    "shrink the workload for a smoke test: 1 round, at most 2 requests per client, "
    "at most 16 new tokens, no time or token minimum per cell; the runs are stored "
    "with quick=true and pages label them"
)
AA_HELP = (
    "A/A check: measure ARM against an identical copy of itself (arms ARM and ARM-aa, "
    "same knobs), stored as experiment NAME-aa so it never mixes with NAME's runs"
)


def _note_cut_off(experiment: str, root: Path, progress) -> None:
    """Say where an earlier run of the experiment was cut off and left a folder a cell."""
    from runner.store.fold import cell_groups

    for g in cell_groups(root, experiment):
        fold = f"`runner fold {experiment}` folds them into one"
        progress.note(f"{g.describe()} from a run that was cut off: {fold}")


def _err(*lines: str) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Run every cell (arm x concurrency x round) of a declared experiment on "
        "each arm's runtime and append raw rows to DuckDB. Cells already complete for this "
        "declaration on this chip are skipped, so re-running resumes."
    )
    p.add_argument("experiment", help=f"a name (a file in {EXPERIMENTS}/) or a path to a .toml")
    p.add_argument("--quick", action="store_true", help=QUICK_HELP)
    p.add_argument("--json", action="store_true", help="progress as JSON lines on stderr")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"database (default {DEFAULT_DB})")
    p.add_argument("--check", action="store_true", help="validate the declaration and stop")
    p.add_argument("--aa", metavar="ARM", help=AA_HELP)
    p.add_argument(
        "--no-openblas",
        action="store_true",
        help="keep MLX's bundled reference BLAS (default: re-run under Debian's OpenBLAS "
        "when installed; the chip fingerprint records which)",
    )
    p.add_argument(
        "--remeasure",
        action="store_true",
        help="run every cell again even when complete runs exist; the new runs are "
        "appended and pages use the newest run of each cell and round",
    )
    p.add_argument(
        "--until-decided",
        action="store_true",
        help="after the declared rounds, add rounds at pre-declared looks (rounds, doubling, up to "
        "max_rounds: the declaration's, else four times the rounds) to the concurrencies whose "
        "deciding comparisons are undecided, until each is decided, max_rounds or the budget ends",
    )
    p.add_argument(
        "--budget",
        metavar="DURATION",
        help="after this long from the start (20m, 90s, 1h30m), add no more rounds",
    )
    p.add_argument(
        "--max-rounds", type=int, metavar="N", help="the most rounds a cell reaches (implies --until-decided)"
    )
    p.add_argument(
        "--machine-class",
        metavar="NAME",
        help="the machine class this run's chip belongs to, as pages label it (default: "
        "computed from the chip, e.g. 'Intel Xeon, 2 cores'; or $BOTHROWS_MACHINE_CLASS)",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="print this chip and the cells a run would measure (with an estimate of "
        "the time) as one JSON line, and stop",
    )


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def main_run(args: argparse.Namespace) -> int:
    from runner.experiments.declaration import DeclarationError, find_declaration, load
    from runner.experiments.workloads.workload import WorkloadError
    from runner.store.store import StoreError

    path = find_declaration(args.experiment, EXPERIMENTS)
    try:
        exp = load(path)
    except DeclarationError as e:
        known = sorted(p.stem for p in EXPERIMENTS.glob("*.toml"))
        hint = [f"declared experiments: {', '.join(known)}"] if not path.exists() and known else []
        _err(f"error: {path} is not a valid experiment declaration:", *(f"  {i}" for i in e.issues), *hint)
        return 2
    from runner.experiments import chip

    problem = chip.declare_machine_class(args.machine_class)
    if problem:  # before OpenBLAS re-runs this process: the child inherits the declared name
        _err(f"error: {problem}")
        return 2
    if args.aa is not None:
        try:
            exp = exp.aa(args.aa)
        except DeclarationError as e:
            _err(*(f"error: {i}" for i in e.issues))
            return 2
    if args.check:
        print(
            f"{path}: valid ({len(exp.arms)} arms, concurrency {list(exp.concurrency)}, {exp.rounds} rounds)"
        )
        return 0
    if not args.no_openblas:
        from runner import blas

        blas.reexec_with_openblas(blas.argv_from("run"))
    from runner.experiments import memory

    try:  # a bad memory budget is one line before anything runs
        memory.budget_bytes()
    except ValueError as e:
        _err(f"error: {e}")
        return 2
    if args.until_decided or args.budget is not None or args.max_rounds is not None:
        from runner.experiments.until_decided import with_arguments

        try:
            exp = with_arguments(exp, args.budget, args.max_rounds)
        except ValueError as e:
            _err(f"error: {e}")
            return 2
    if len(exp.schedule) > 1:  # a post's headline floor it cannot read: one line, nothing measured
        from runner.experiments.until_decided import post_headline

        try:
            post_headline(exp)
        except ValueError as e:
            _err(f"error: {e}")
            return 2
    if args.quick:
        exp = exp.shrunk()
    from runner.experiments.execute import run_experiment
    from runner.experiments.progress import Progress
    from runner.store import measurements
    from runner.store.cell_folders import CellFolders

    progress = Progress(mode="json" if args.json else None)
    try:  # the database is a cache of the committed measurement folders: bring it up to date
        loaded = measurements.sync_database(args.db)
        if loaded is not None and loaded.rebuilt:
            progress.note(loaded.describe())
        _note_cut_off(exp.name, measurements.folder_of(args.db), progress)
        if args.plan:
            from runner.experiments.plan import plan

            print(json.dumps(plan(exp, args.db, args.remeasure), sort_keys=True), flush=True)
            return 0
        before = measurements.complete_run_ids(args.db)
    except StoreError as e:
        _err(f"error: {e}")
        return 2
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)  # a polite kill marks the cell failed
    again = args.experiment + (f" --aa {args.aa}" if args.aa is not None else "")
    resume = f"run `runner run {again}{' --quick' if args.quick else ''}` again to resume"
    if args.remeasure:  # a resumed re-measurement keeps the cells it already re-ran
        resume += " (without --remeasure: the cells not yet re-measured keep their older runs)"
    cells = CellFolders(measurements.folder_of(args.db))  # each finished cell, committed at once
    # a re-measurement's later looks count only its own runs as done and as judged
    since = datetime.now(timezone.utc).replace(tzinfo=None) if args.remeasure else None
    try:

        def run(e, keep, deadline):
            return run_experiment(
                e,
                args.db,
                progress,
                remeasure=args.remeasure,
                remeasured_since=since,
                cell_folders=cells,
                keep=keep,
                deadline=deadline,
            )

        if len(exp.schedule) > 1:
            from runner.experiments.until_decided import run_until_decided

            summary = run_until_decided(exp, args.db, progress, run, since)
        else:
            summary = run(exp, None, None)
    except (StoreError, WorkloadError) as e:
        _save_measurement(args.db, before, progress, cells)
        _err(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        _save_measurement(args.db, before, progress, cells)
        _err(f"interrupted: the cell in progress is marked failed, finished cells are kept; {resume}")
        return 130
    except Exception:
        traceback.print_exc()
        _save_measurement(args.db, before, progress, cells)
        _err(
            f"error: the run crashed; the cell in progress is marked failed, finished cells are "
            f"kept; {resume}"
        )
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    saved = _save_measurement(args.db, before, progress, cells)
    progress.note(
        f"{exp.name}: {summary.completed} cells run, {summary.skipped} already complete "
        f"({summary.planned} planned) -> {args.db}"
    )
    if summary.faults:  # each was reported as its line when it happened
        arms = sorted({cell.arm for cell, _ in summary.faults})
        _err(
            f"error: {len(summary.faults)} cell(s) failed (arm{'s' if len(arms) > 1 else ''} "
            f"{', '.join(arms)}); the other cells are kept; {resume}"
        )
        return 1
    return 0 if saved else 2


def _save_measurement(db: Path, before: set[str], progress, cells=None) -> bool:
    """Write the runs this invocation completed (an interrupted run's finished cells too)
    to a new measurement folder beside the database, in place of the folder each cell
    got as it finished: the folders are what is committed, and the database is rebuilt
    from them."""
    from runner.store import measurements
    from runner.store.store import StoreError

    try:
        for folder, runs in measurements.save_new_runs(db, before, cells):
            progress.note(f"wrote {runs} run(s) to {folder} (commit this folder to publish them)")
    except StoreError as e:
        _err(
            f"error: the new runs are in {db} but their measurement folder was not written: {e}; "
            "the next load of the measurement folders writes it"
        )
        return False
    return True
