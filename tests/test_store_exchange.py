"""The Parquet exchange and the load-figure migration, on real DuckDB files in tmp dirs:
exports, imports (twice adds nothing), databases and exports from before the migration."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from store_rows import CHIP, add_run, counts

from runner.store.exchange import export_experiment, import_tables, read_source
from runner.store.store import LOAD_COLUMNS, MIGRATIONS, SCHEMA_VERSION, Store, StoreError


def test_export_then_import_twice_adds_nothing_the_second_time(tmp_path):
    with Store.open(tmp_path / "a.duckdb") as st:
        kept = {add_run(st, arm="a"), add_run(st, arm="b", concurrency=4)}
        add_run(st, arm="a", status="failed")
        add_run(st, experiment="other")
        written = export_experiment(st, "exp", tmp_path / "out")
        assert written == {"chips": 1, "runs": 2, "requests": 6, "passes": 10, "tokens": 24}
        with pytest.raises(StoreError, match=r"no complete runs of experiment 'nope'.*'exp', 'other'"):
            export_experiment(st, "nope", tmp_path / "none")
    other_chip = {**CHIP, "name": "Other CPU"}
    with Store.open(tmp_path / "b.duckdb") as st:
        add_run(st, chip=other_chip)
        first = import_tables(st, read_source(tmp_path / "out"), "out")
        assert first == {"chips": 1, "runs": 2, "requests": 6, "passes": 10, "tokens": 24}
        again = import_tables(st, read_source(tmp_path / "out" / "runs.parquet"), "out")
        assert again == {"chips": 0, "runs": 0, "requests": 0, "passes": 0, "tokens": 0}
        ids = {
            r[0]
            for r in st.con.execute(
                "SELECT run_id FROM runs WHERE chip_id != ?", [st.ensure_chip(other_chip)]
            ).fetchall()
        }
        assert ids == kept
        assert counts(st) == {"chips": 2, "runs": 3, "requests": 9, "passes": 15, "tokens": 36}


def test_import_from_a_database_file_takes_complete_runs_only(tmp_path):
    with Store.open(tmp_path / "a.duckdb") as st:
        add_run(st)
        add_run(st, status="running")
    with Store.open(tmp_path / "b.duckdb") as st:
        added = import_tables(st, read_source(tmp_path / "a.duckdb"), "a.duckdb")
        assert added == {"chips": 1, "runs": 1, "requests": 3, "passes": 5, "tokens": 12}
        assert st.con.execute("SELECT DISTINCT status FROM runs").fetchall() == [("complete",)]


def test_import_of_something_else_is_a_readable_error(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "runs.parquet").write_text("x")
    with Store.open(tmp_path / "b.duckdb"):
        with pytest.raises(StoreError, match="no such file"):
            read_source(tmp_path / "missing")
        with pytest.raises(StoreError, match="not an export"):
            read_source(tmp_path / "junk")
        empty = tmp_path / "empty.duckdb"
        duckdb.connect(str(empty)).close()
        with pytest.raises(StoreError, match="not a bothrows database"):
            read_source(empty)


LOAD = {"loadavg_start": 0.5, "loadavg_end": 1.25, "steal_fraction": 0.01, "busy_fraction_other": None}


def old_database(path: Path) -> Path:
    """A database as bothrows wrote it at schema version 1 (before the load figures): the
    version-1 DDL and rows inserted by position, as the old begin_run did."""
    con = duckdb.connect(str(path))
    con.execute(MIGRATIONS[1])
    con.execute("INSERT INTO schema_version VALUES (1)")
    con.execute("INSERT INTO chips VALUES ('c1', 'Old CPU', 'cpu', 2, 1024, 'Linux', '0.0', '{}')")
    con.execute(
        "INSERT INTO runs VALUES ('r1', 'exp', 'd', 'a', 1, 0, 'c1', 'm', 'v', '{}', 7, "
        "false, TIMESTAMP '2026-11-29 09:00:00', TIMESTAMP '2026-11-29 09:01:00', 'complete')"
    )
    con.execute("INSERT INTO requests VALUES ('r1', 0, 0, 10, 4, 0, 0, 50, 90, 'h')")
    con.execute("INSERT INTO passes VALUES ('r1', 0, 0, 9, 'decode', 1, 0, 1, 0, 0, 1, 100, 100)")
    con.close()
    return path


def test_load_figures_are_stored_with_the_finish(tmp_path):
    with Store.open(tmp_path / "runs.duckdb") as st:
        run_id = add_run(st, status="running")
        with pytest.raises(StoreError, match=r"unknown load columns \['loadavg'\]"):
            st.finish_run(run_id, "complete", load={"loadavg": 1.0})
        with pytest.raises(StoreError, match="steal_fraction must be a finite number or None"):
            st.finish_run(run_id, "complete", load={"steal_fraction": float("nan")})
        st.finish_run(run_id, "complete", load=LOAD)
        assert st.con.execute(f"SELECT status, {', '.join(LOAD_COLUMNS)} FROM runs").fetchall() == [
            ("complete", 0.5, 1.25, 0.01, None)
        ]
        add_run(st)  # no figures given: NULL, not 0
        assert st.con.execute("SELECT count(*) FROM runs WHERE loadavg_start IS NULL").fetchall() == [(1,)]


def test_an_old_database_migrates_with_null_load_figures(tmp_path):
    old = old_database(tmp_path / "old.duckdb")
    with Store.open(old) as st:
        assert st.schema_version() == SCHEMA_VERSION
        nulls = st.con.execute(
            "SELECT count(*), " + ", ".join(f"count({c})" for c in LOAD_COLUMNS) + " FROM runs"
        ).fetchall()[0]
        assert nulls == (1,) + (0,) * len(LOAD_COLUMNS)
        run_id = add_run(st, status="running")  # new runs still go in after the migration
        st.finish_run(run_id, "complete", load=LOAD)
    with Store.open(old) as st:
        assert st.con.execute("SELECT run_id, loadavg_end FROM runs ORDER BY started_at").fetchall() == [
            ("r1", None),
            (run_id, 1.25),
        ]


def test_exports_made_before_the_migration_import_with_null_load_figures(tmp_path):
    old = old_database(tmp_path / "old.duckdb")
    with Store.open(tmp_path / "a.duckdb") as st:  # an old database file, read unmigrated
        added = import_tables(st, read_source(old), str(old))
        assert added == {"chips": 1, "runs": 1, "requests": 1, "passes": 1, "tokens": 0}
        assert st.con.execute("SELECT count(loadavg_start) FROM runs").fetchall() == [(0,)]
    with Store.open(tmp_path / "b.duckdb") as st:  # an old Parquet export: no load columns
        run_id = add_run(st, status="running")
        st.finish_run(run_id, "complete", load=LOAD)
        export_experiment(st, "exp", tmp_path / "new")
    runs = pq.read_table(tmp_path / "new" / "runs.parquet")
    assert set(LOAD_COLUMNS) <= set(runs.column_names)  # exports carry the figures
    (tmp_path / "old-export").mkdir()
    for f in (tmp_path / "new").iterdir():
        shutil.copyfile(f, tmp_path / "old-export" / f.name)
    pq.write_table(runs.drop_columns(list(LOAD_COLUMNS)), tmp_path / "old-export" / "runs.parquet")
    for source, expected in (("old-export", None), ("new", 1.25)):
        with Store.open(tmp_path / f"from-{source}.duckdb") as st:
            assert import_tables(st, read_source(tmp_path / source), source)["runs"] == 1
            assert st.con.execute("SELECT loadavg_end FROM runs").fetchall() == [(expected,)]
