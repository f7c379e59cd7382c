"""`python -m runner.report [--experiment NAME] --measure 0|1`: the `make report` pipeline.

Loads the committed measurement folders into the database the pages read
(runner.store.measurements), decides for every experiment a post names (front matter
`experiment:` or `experiments:`; declarations in `<docs_dir>/experiments/`) whether to
measure, says why, measures through `runner run` child processes, then builds the whole
site strictly through `runner build`:

- `--measure 1`: re-measure every cell of every such experiment (`runner run NAME
  --remeasure`);
- `--measure 0` and the database holds a complete, non-quick set of runs of the
  experiment's current declaration on some chip (every arm x concurrency x round): use
  that data as it is, so a fresh clone rebuilds the committed site without measuring;
- `--measure 0` and no such set: run the cells this chip lacks (`runner run NAME`
  resumes exactly those);
- `--experiment NAME` narrows the measuring to that one experiment; the build is always
  the whole site.

Before measuring it prints which chip this is, what it will measure and why, and an
estimate of the time; the chip and the cells come from `runner run NAME --plan`, run in
the measuring process's own BLAS setting, which is part of the chip fingerprint.

Reproducible builds are `runner build`'s (publish.commands.build_site sets
SOURCE_DATE_EPOCH from the data). This module reads the database only through
`queries.Reader`, to make these decisions; it writes nothing itself (loading is
runner.store.measurements, measuring `runner run`, rendering `runner build`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from runner.report_inputs import ReportError, declarations, named_experiments, site_paths


@dataclass(frozen=True)
class DataState:
    complete_on: tuple[str, ...]  # chip names holding every cell of the current declaration
    runs: int  # complete non-quick runs of the experiment (all declarations)
    newest: datetime | None  # newest finish time of those runs (UTC)

    @property
    def complete(self) -> bool:
        return bool(self.complete_on)


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc)  # the store keeps naive UTC timestamps


def data_state(db: Path, exp) -> DataState:
    """What the database holds for the experiment `exp` (an Experiment)."""
    if not db.is_file():
        return DataState((), 0, None)
    from runner.experiments.cell_plan import plan_cells
    from runner.publish.sql.reader import QueryError, Reader

    planned = {c.key for c in plan_cells(exp)}
    try:
        with Reader(db) as reader:
            by_chip = reader.declaration_cells(exp.name, exp.sha256)
            runs, newest = reader.run_summary(exp.name)
    except (QueryError, duckdb.Error) as e:
        raise ReportError(f"database {db} cannot be read: {e}") from None
    complete = tuple(sorted(name for (name, _), done in by_chip.items() if planned <= done))
    return DataState(complete, runs, _utc(newest) if newest else None)


def build(config_file: Path, site_dir: Path | None) -> int:
    """`runner build` (strict): the database is already loaded; build_site sets
    SOURCE_DATE_EPOCH from the data unless it is set."""
    from runner.publish.site.commands import build_site

    return build_site(config_file, site_dir, strict=True)


def _day(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M UTC")


def _run(declaration: Path, db: Path, *flags: str, capture: bool = False) -> subprocess.CompletedProcess:
    # A child process: `runner run` may re-run itself under OpenBLAS (runner/blas.py),
    # which replaces the process, and the report still has a site to build afterwards.
    cmd = [sys.executable, "-m", "runner.cli", "run", str(declaration), "--db", str(db), *flags]
    return subprocess.run(cmd, stdout=subprocess.PIPE if capture else None, text=True)


def _plan(declaration: Path, db: Path, remeasure: bool) -> dict:
    done = _run(declaration, db, "--plan", *(["--remeasure"] if remeasure else []), capture=True)
    try:
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    raise ReportError(
        f"`runner run {declaration} --plan` failed (exit code {done.returncode}); its messages are above"
    )


def _load(db: Path) -> None:
    """Bring the database in line with the committed measurement folders beside it."""
    from runner.store.measurements import sync_database
    from runner.store.store import StoreError

    try:
        loaded = sync_database(db)
    except StoreError as e:
        raise ReportError(str(e)) from None
    if loaded is not None:
        print(f"report: {loaded.describe()}")


def _why(exp, state: DataState, plan: dict, measure: bool) -> str:
    arms = ", ".join(f"{arm} {n}" for arm, n in plan["todo_by_arm"].items() if n)
    what = f"{len(plan['todo'])} of {plan['planned']} cells (by arm: {arms})"
    if measure:
        return f"re-measuring {what}: MEASURE=1 asked for every cell"
    why = (
        f"no chip has a complete non-quick set of runs of its current declaration (sha256 {exp.sha256[:12]})"
    )
    if state.runs:
        why += f"; its {state.runs} complete runs are of an earlier declaration or incomplete"
    if plan["complete_here"]:
        why += f"; the {plan['complete_here']} cells this chip already has are kept"
    return f"measuring {what}: {why}"


def report(
    only: str | None, measure: bool, config_file: Path, site_dir: Path | None, load_only: bool = False
) -> int:
    docs_dir, db = site_paths(config_file)
    if load_only:
        _load(db)
        return 0
    named = named_experiments(docs_dir)
    if only is not None and only not in named:
        raise ReportError(
            f"EXPERIMENT={only}: no post names this experiment (posts name: {', '.join(named) or 'none'})"
        )
    exps = declarations({only: named[only]} if only else named, docs_dir / "experiments")
    _load(db)
    todo = []
    for name, (declaration, exp) in exps.items():
        state = data_state(db, exp)
        if not measure and state.complete:
            print(
                f"report: {name}: using the data from {_day(state.newest)}, {state.runs} runs "
                f"in {db} (complete on {', '.join(state.complete_on)}); pass MEASURE=1 to re-measure"
            )
        else:
            todo.append((declaration, exp, state))
    if todo:
        plans = [_plan(declaration, db, measure) for declaration, _, _ in todo]
        chip = plans[0]["chip"]
        print(
            f"report: this chip: {chip['name']} (chip {chip['chip_id'][:8]}, {chip['device']}, "
            f"{chip['cores']} cores, BLAS {chip['blas']}), an instance of "
            f"{chip.get('machine_class', 'an unknown class')!r}"
        )
        for (_, exp, state), plan in zip(todo, plans):
            print(f"report: {exp.name}: {_why(exp, state, plan, measure)}")
        seconds = sum(p["estimate_seconds"] for p in plans)
        print(
            f"report: estimated measuring time: about {_duration(seconds)} "
            f"({'; '.join(sorted({p['estimate_basis'] for p in plans}))})"
        )
        t = time.perf_counter()
        for (declaration, _, _), plan in zip(todo, plans):
            if plan["todo"]:
                rc = _run(declaration, db, *(["--remeasure"] if measure else [])).returncode
                if rc:
                    return rc
        print(f"report: measured in {_duration(time.perf_counter() - t)}")
        _load(db)
    t = time.perf_counter()
    rc = build(config_file, site_dir)
    if rc == 0:
        print(f"report: site built in {time.perf_counter() - t:.0f} s")
    return rc


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m runner.report", description=__doc__.splitlines()[0])
    p.add_argument(
        "--experiment",
        default=None,
        help="measure only this experiment (a name some post gives); default: all",
    )
    p.add_argument(
        "--measure",
        choices=("0", "1"),
        default="0",
        help="1: re-measure every cell before building; 0 (default): measure only "
        "the cells of experiments no chip has complete",
    )
    p.add_argument(
        "--config-file",
        "-f",
        type=Path,
        default=Path("mkdocs.yml"),
        help="mkdocs config (default mkdocs.yml); its bothrows plugin names the database",
    )
    p.add_argument(
        "--site-dir", "-d", type=Path, default=None, help="output folder (default: the config's site_dir)"
    )
    p.add_argument(
        "--load-only",
        action="store_true",
        help="only load the measurement folders into the database, then stop",
    )
    args = p.parse_args(argv)
    try:
        return report(
            args.experiment or None, args.measure == "1", args.config_file, args.site_dir, args.load_only
        )
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
