"""The `runner export` and `runner import` verbs: moving an experiment's rows between
machines (Parquet folders, or another DuckDB file) and `export --format json`'s figures.
Bad input is one readable line on stderr and exit code 2; the work is runner.store's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runner.experiments.commands import DEFAULT_DB, _err


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Write an experiment's complete runs (chips, runs, requests, passes) as Parquet."
    p.add_argument("experiment", help="the experiment name (the declaration's file stem)")
    p.add_argument(
        "--out",
        type=Path,
        help="parquet: folder for the .parquet files (required); json: file (default stdout)",
    )
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"database (default {DEFAULT_DB})")
    p.add_argument(
        "--format",
        choices=("parquet", "json"),
        default="parquet",
        help="parquet: the raw rows; json: per chip, arm and cell the page's figures with their "
        "intervals, keyed as vllm bench serve's --save-result (see the README)",
    )


def main_export(args: argparse.Namespace) -> int:
    from runner.store.exchange import export_experiment
    from runner.store.store import Store, StoreError

    if not args.db.exists():
        _err(f"error: database {args.db} does not exist")
        return 2
    if getattr(args, "format", "parquet") == "json":
        return _export_json(args)
    if args.out is None:
        _err("error: --out FOLDER is required with --format parquet")
        return 2
    try:
        with Store.open(args.db) as st:
            written = export_experiment(st, args.experiment, args.out)
    except StoreError as e:
        _err(f"error: {e}")
        return 2
    print(f"exported {args.experiment} to {args.out}: " + ", ".join(f"{n} {t}" for t, n in written.items()))
    return 0


def _export_json(args: argparse.Namespace) -> int:
    from runner.publish.site.summary import SummaryError, summary_json
    from runner.publish.sql.reader import QueryError, Reader

    try:
        with Reader(args.db) as reader:
            text = summary_json(reader, args.experiment)
    except (QueryError, SummaryError) as e:
        _err(f"error: {e}")
        return 2
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        args.out.write_text(text, encoding="utf-8")
    except OSError as e:
        _err(f"error: cannot write {args.out}: {e.strerror or e}")
        return 2
    print(f"exported the figures of {args.experiment} to {args.out}")
    return 0


def add_import_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Merge runs exported on other machines (an export folder, one of its "
        ".parquet files, or a bothrows .duckdb file). Idempotent by run id."
    )
    p.add_argument("sources", nargs="+", type=Path, metavar="FILE_OR_DIR")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"database (default {DEFAULT_DB})")


def main_import(args: argparse.Namespace) -> int:
    from runner.store.exchange import import_tables, read_source
    from runner.store.store import Store, StoreError

    tables, problems = {}, []
    for source in args.sources:  # read everything first: a bad source imports nothing
        try:
            tables[source] = read_source(source)
        except StoreError as e:
            problems.append(f"  {e}")
    if problems:
        _err("error: nothing imported:", *problems)
        return 2
    try:
        with Store.open(args.db) as st:
            for source, t in tables.items():
                added = import_tables(st, t, str(source))
                print(f"{source}: added " + ", ".join(f"{n} {name}" for name, n in added.items()))
    except StoreError as e:
        _err(f"error: {e}")
        return 2
    return 0
