"""`python -m runner.report --experiment NAME --measure 0|1`: the `make report` pipeline.

Decides whether to measure, says why, measures through `runner run` when needed, then
builds the whole site strictly through `runner build`:

- `--measure 1`: re-measure every cell (`runner run NAME --remeasure`), then build;
- `--measure 0` and the database already holds a complete, non-quick set of runs of the
  experiment's current declaration (every arm x concurrency x round on some chip): use
  that data as it is; a fresh clone rebuilds the committed site without measuring;
- `--measure 0` and no such set: run the missing cells (`runner run NAME`), then build.

Reproducible builds: unless SOURCE_DATE_EPOCH is already set, it is set to the newest
finish time of any complete run in the database, so the dates mkdocs writes (sitemap
lastmod and its gzip header) come from the data, never from the clock of the machine
that builds. The database is the one the mkdocs config's `bothrows` plugin reads. This
module reads the database (read-only) only to make these two decisions; it does not
measure or render anything itself.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import duckdb

EXPERIMENTS = Path("reports/experiments")


class ReportError(Exception):
    """Bad input (declaration, config, unreadable database): one readable message."""


@dataclass(frozen=True)
class DataState:
    complete_on: tuple[str, ...]   # chip names holding every cell of the current declaration
    runs: int                      # complete non-quick runs of the experiment (all declarations)
    newest: datetime | None        # newest finish time of those runs (UTC)

    @property
    def complete(self) -> bool:
        return bool(self.complete_on)


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc)  # the store keeps naive UTC timestamps


def _read(db: Path, sql: str, params: list) -> list[tuple]:
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as e:
        raise ReportError(f"database {db} cannot be read: {e}") from None
    try:
        return con.execute(sql, params).fetchall()
    except duckdb.Error as e:
        raise ReportError(f"database {db} cannot be read: {e}") from None
    finally:
        con.close()


def data_state(db: Path, exp) -> DataState:
    """What the database holds for the experiment `exp` (an Experiment)."""
    if not db.is_file():
        return DataState((), 0, None)
    from runner.experiments.execute import plan_cells
    planned = {(c.arm, c.concurrency, c.round) for c in plan_cells(exp)}
    cells = _read(db, "SELECT ch.name, r.chip_id, r.arm, r.concurrency, r.round FROM runs r "
                      "JOIN chips ch USING (chip_id) WHERE r.experiment = ? AND "
                      "r.declaration_sha256 = ? AND r.status = 'complete' AND NOT r.quick",
                  [exp.name, exp.sha256])
    by_chip: dict[tuple[str, str], set] = {}
    for name, chip_id, arm, conc, rnd in cells:
        by_chip.setdefault((name, chip_id), set()).add((arm, int(conc), int(rnd)))
    complete = tuple(sorted(name for (name, _), done in by_chip.items() if planned <= done))
    runs, newest = _read(db, "SELECT count(*), max(finished_at) FROM runs WHERE experiment = ? "
                             "AND status = 'complete' AND NOT quick", [exp.name])[0]
    return DataState(complete, int(runs), _utc(newest) if newest else None)


def source_date_epoch(db: Path) -> int | None:
    """The newest finish time of any complete run in the database, in Unix seconds."""
    if not db.is_file():
        return None
    newest = _read(db, "SELECT max(finished_at) FROM runs WHERE status = 'complete'", [])[0][0]
    return int(_utc(newest).timestamp()) if newest else None


def database_of(config_file: Path) -> Path:
    """The DuckDB file the config's `bothrows` plugin reads (relative to the config)."""
    from mkdocs.config import load_config
    from mkdocs.exceptions import ConfigurationError
    if not config_file.is_file():
        raise ReportError(f"{config_file}: no such mkdocs config file")
    try:
        cfg = load_config(str(config_file))
    except ConfigurationError as e:
        raise ReportError(f"{config_file}: {e}") from None
    plugin = cfg.plugins.get("bothrows")
    if plugin is None:
        raise ReportError(f"{config_file}: plugins: the `bothrows` plugin is not configured")
    db = Path(plugin.config.database)
    return db if db.is_absolute() else config_file.resolve().parent / db


def build(config_file: Path, site_dir: Path | None, db: Path) -> int:
    """`runner build` (strict) with SOURCE_DATE_EPOCH taken from the data unless set."""
    from runner.publish.commands import main_build
    if "SOURCE_DATE_EPOCH" in os.environ:
        print(f"report: SOURCE_DATE_EPOCH={os.environ['SOURCE_DATE_EPOCH']} (already set)")
    else:
        epoch = source_date_epoch(db)
        if epoch is not None:
            os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
            print(f"report: SOURCE_DATE_EPOCH={epoch} ({_day(datetime.fromtimestamp(epoch, timezone.utc))},"
                  " the newest run's finish time), so every machine builds the same site")
    return main_build(argparse.Namespace(config_file=str(config_file), no_strict=False,
                                         site_dir=str(site_dir) if site_dir else None))


def _day(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M UTC")


def _measure(declaration: Path, db: Path, remeasure: bool) -> int:
    # A child process: `runner run` may re-run itself under OpenBLAS (runner/blas.py),
    # which replaces the process, and the report still has a site to build afterwards.
    cmd = [sys.executable, "-m", "runner.cli", "run", str(declaration), "--db", str(db)]
    return subprocess.run(cmd + (["--remeasure"] if remeasure else [])).returncode


def report(experiment: str, measure: bool, config_file: Path, site_dir: Path | None) -> int:
    from runner.experiments.declaration import DeclarationError, find_declaration, load
    declaration = find_declaration(experiment, EXPERIMENTS)
    try:
        exp = load(declaration)
    except DeclarationError as e:
        raise ReportError(f"{declaration} is not a valid experiment declaration:\n" +
                          "\n".join(f"  {i}" for i in e.issues)) from None
    db = database_of(config_file)
    state = data_state(db, exp)
    if measure:
        print(f"report: re-measuring every cell of {exp.name} (MEASURE=1); the new runs are "
              f"appended to {db} and the pages use them")
    elif state.complete:
        print(f"report: using committed data from {_day(state.newest)}, {state.runs} runs of "
              f"{exp.name} in {db} (complete on {', '.join(state.complete_on)}); "
              "pass MEASURE=1 to re-measure")
    else:
        print(f"report: measuring {exp.name}: {db} has no complete non-quick set of runs of "
              f"its current declaration ({declaration}, sha256 {exp.sha256[:12]})")
    if measure or not state.complete:
        t = time.perf_counter()
        rc = _measure(declaration, db, remeasure=measure)
        if rc:
            return rc
        print(f"report: measured in {time.perf_counter() - t:.0f} s")
    t = time.perf_counter()
    rc = build(config_file, site_dir, db)
    if rc == 0:
        print(f"report: site built in {time.perf_counter() - t:.0f} s")
    return rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m runner.report", description=__doc__.splitlines()[0])
    p.add_argument("--experiment", required=True,
                   help=f"the experiment (a name in {EXPERIMENTS}/ or a path to its .toml)")
    p.add_argument("--measure", choices=("0", "1"), default="0",
                   help="1: re-measure every cell before building; 0 (default): measure only "
                        "when the database lacks the experiment's current declaration")
    p.add_argument("--config-file", "-f", type=Path, default=Path("mkdocs.yml"),
                   help="mkdocs config (default mkdocs.yml); its bothrows plugin names the database")
    p.add_argument("--site-dir", "-d", type=Path, default=None,
                   help="output folder (default: the config's site_dir)")
    args = p.parse_args(argv)
    try:
        return report(args.experiment, args.measure == "1", args.config_file, args.site_dir)
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
