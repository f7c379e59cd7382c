"""The DuckDB store and the Parquet exchange, on real DuckDB files in tmp dirs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from runner.store.cell import CellRecord
from runner.store.exchange import export_experiment, import_tables, read_source
from runner.store.store import LOAD_COLUMNS, MIGRATIONS, SCHEMA_VERSION, Store, StoreError, StoreLocked

CHIP = {
    "name": "Test CPU",
    "device": "cpu",
    "cores": 2,
    "memory_bytes": 2**30,
    "os": "Linux-test",
    "mlx_version": "0.0",
    "blas": "libblas.so.3",
    "python": "3.11",
}


def request_rows(n: int) -> list[dict]:
    return [
        {
            "request_id": i,
            "client": i % 2,
            "prompt_tokens": 10 + i,
            "output_tokens": 4,
            "cached_tokens": 0,
            "arrival_ns": 100 * i,
            "first_token_ns": 100 * i + 50,
            "done_ns": 100 * i + 90,
            "output_sha256": f"{i:064x}",
        }
        for i in range(n)
    ]


def token_times(n: int) -> dict[int, tuple[int, ...]]:
    """Each request_rows request's 4 output tokens: the first at first_token_ns, the last at done_ns."""
    return {i: (100 * i + 50, 100 * i + 60, 100 * i + 75, 100 * i + 90) for i in range(n)}


def pass_rows(n: int) -> list[dict]:
    return [
        {
            "pass_index": i,
            "start_ns": 10 * i,
            "duration_ns": 9,
            "kind": "decode",
            "width": 2,
            "prefill_tokens": 0,
            "decode_tokens": 2,
            "drafted": 0,
            "accepted": 0,
            "emitted": 2,
            "state_bytes": 1000 + i,
            "max_row_state_bytes": 500 + i,
        }
        for i in range(n)
    ]


def add_run(
    st: Store,
    experiment="exp",
    arm="a",
    concurrency=1,
    round=0,
    status="complete",
    n_requests=3,
    n_passes=5,
    chip=CHIP,
) -> str:
    chip_id = st.ensure_chip(chip)
    run_id = st.begin_run(
        CellRecord(
            experiment=experiment,
            declaration_sha256="d" * 64,
            arm=arm,
            concurrency=concurrency,
            round=round,
            seed=7,
            quick=False,
        ),
        chip_id=chip_id,
        model_sha256="m" * 64,
        code_version="abc",
        knobs={"mtp": False},
    )
    st.append_requests(run_id, request_rows(n_requests))
    st.append_tokens(run_id, token_times(n_requests))
    st.append_passes(run_id, pass_rows(n_passes))
    if status != "running":
        st.finish_run(run_id, status)
    return run_id


def counts(st: Store) -> dict[str, int]:
    return {
        t: st.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
        for t in ("chips", "runs", "requests", "passes", "tokens")
    }


def test_open_creates_parents_and_migrates_once(tmp_path):
    db = tmp_path / "deep" / "er" / "runs.duckdb"
    with Store.open(db) as st:
        assert st.schema_version() == SCHEMA_VERSION
    with Store.open(db) as st:
        # once each (numbers are assigned per issue: a branch may not hold every one)
        assert st.con.execute("SELECT count(*) FROM schema_version").fetchall()[0][0] == len(MIGRATIONS)
        assert counts(st) == {"chips": 0, "runs": 0, "requests": 0, "passes": 0, "tokens": 0}


def test_newer_schema_is_refused(tmp_path):
    db = tmp_path / "runs.duckdb"
    with Store.open(db) as st:
        st.con.execute("INSERT INTO schema_version VALUES (?)", [SCHEMA_VERSION + 1])
    with pytest.raises(StoreError, match="newer than this bothrows"):
        Store.open(db)


def test_not_a_database_is_a_readable_error(tmp_path):
    db = tmp_path / "runs.duckdb"
    db.write_text("not duckdb")
    with pytest.raises(StoreError, match=str(db)):
        Store.open(db)


def test_chip_id_is_a_hash_of_the_canonical_fingerprint(tmp_path):
    with Store.open(tmp_path / "runs.duckdb") as st:
        chip_id = st.ensure_chip(CHIP)
        assert st.ensure_chip(dict(reversed(list(CHIP.items())))) == chip_id
        canonical = json.dumps(CHIP, sort_keys=True, separators=(",", ":"))
        assert chip_id == hashlib.sha256(canonical.encode()).hexdigest()[:16]
        assert counts(st)["chips"] == 1
        stored = st.con.execute("SELECT name, cores, fingerprint FROM chips").fetchall()[0]
        assert stored[:2] == ("Test CPU", 2) and json.loads(stored[2])["blas"] == "libblas.so.3"
        with pytest.raises(StoreError, match="missing"):
            st.ensure_chip({"name": "x"})


def test_run_lifecycle_and_bulk_rows(tmp_path):
    with Store.open(tmp_path / "runs.duckdb") as st:
        run_id = add_run(st, n_requests=50, n_passes=20_000)
        assert counts(st) == {"chips": 1, "runs": 1, "requests": 50, "passes": 20_000, "tokens": 200}
        status, knobs, quick, fin = st.con.execute(
            "SELECT status, knobs, quick, finished_at FROM runs WHERE run_id = ?", [run_id]
        ).fetchall()[0]
        assert (status, json.loads(knobs), quick) == ("complete", {"mtp": False}, False)
        assert fin is not None
        total = st.con.execute("SELECT sum(state_bytes) FROM passes").fetchall()[0][0]
        assert total == sum(1000 + i for i in range(20_000))


def test_finished_runs_are_append_only(tmp_path):
    with Store.open(tmp_path / "runs.duckdb") as st:
        run_id = add_run(st)
        with pytest.raises(StoreError, match="already complete"):
            st.append_passes(run_id, pass_rows(1))
        with pytest.raises(StoreError, match="already complete"):
            st.finish_run(run_id, "failed")
        with pytest.raises(StoreError, match="no run"):
            st.finish_run("nope")
        assert counts(st)["passes"] == 5


def test_bad_rows_name_the_columns_and_keep_earlier_data(tmp_path):
    with Store.open(tmp_path / "runs.duckdb") as st:
        add_run(st)
        run_id = add_run(st, status="running", n_requests=0, n_passes=0)
        bad = pass_rows(2)
        del bad[1]["emitted"]
        bad[1]["emited"] = 1
        with pytest.raises(StoreError, match=r"row 1 has missing columns \['emitted'\].*\['emited'\]"):
            st.append_passes(run_id, bad)
        wrong_type = pass_rows(1)
        wrong_type[0]["width"] = "wide"
        with pytest.raises(StoreError, match="append_passes"):
            st.append_passes(run_id, wrong_type)
        with pytest.raises(StoreError, match="status must be"):
            st.finish_run(run_id, "done")
        assert counts(st) == {"chips": 1, "runs": 2, "requests": 3, "passes": 5, "tokens": 12}


def test_stale_running_runs_become_failed_and_only_complete_cells_count(tmp_path):
    with Store.open(tmp_path / "runs.duckdb") as st:
        add_run(st, arm="a", round=0)
        add_run(st, arm="b", round=0, status="failed")
        add_run(st, arm="a", round=1, status="running")
        chip_id = st.ensure_chip(CHIP)
        key = dict(experiment="exp", declaration_sha256="d" * 64, chip_id=chip_id)
        assert st.complete_cells(**key, quick=False) == {("a", 1, 0)}
        assert st.complete_cells(**key, quick=True) == set()
        assert st.fail_stale_runs() == 1
        statuses = st.con.execute("SELECT status, count(*) FROM runs GROUP BY 1 ORDER BY 1").fetchall()
        assert statuses == [("complete", 1), ("failed", 2)]


def test_second_writer_in_this_process_is_refused(tmp_path):
    db = tmp_path / "runs.duckdb"
    with Store.open(db):
        with pytest.raises(StoreLocked, match="locked by this process"):
            Store.open(db)
    Store.open(db).close()  # released on close


def test_second_writer_in_another_process_gets_a_clear_error(tmp_path):
    db = tmp_path / "runs.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys
            from runner.store.store import Store
            st = Store.open({str(db)!r})
            print("ready", flush=True)
            sys.stdin.readline()
            st.close()
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLocked) as err:
            Store.open(db)
        assert str(err.value).startswith(f"database {db.resolve()} is locked by PID {holder.pid}")
    finally:
        holder.communicate("\n", timeout=30)
    assert holder.returncode == 0
    Store.open(db).close()


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


def test_begin_run_writes_every_field_of_the_cell_record(tmp_path):
    # A new cell dimension is one CellRecord field: it must land in its own runs column.
    cell = CellRecord(
        experiment="e",
        declaration_sha256="d",
        arm="a",
        concurrency=3,
        round=2,
        seed=9,
        quick=True,
        runtime="openai",
        slo_ttft_ms=250.0,
        slo_tpot_ms=20.0,
        rate=2.5,
    )
    with Store.open(tmp_path / "c.duckdb") as st:
        run_id = st.begin_run(
            cell, chip_id=st.ensure_chip(CHIP), model_sha256="m", code_version="v", knobs={"x": 1}
        )
        names = [f.name for f in dataclasses.fields(CellRecord)]
        row = st.con.execute(f"SELECT {', '.join(names)} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    assert dict(zip(names, row)) == dataclasses.asdict(cell)


def test_migration_6_adds_asked_tokens_and_runtime_versions_as_null_for_old_rows(tmp_path):
    """Rows from before version 6 read NULL (not known); new rows keep what they are given."""
    db = tmp_path / "runs.duckdb"
    with Store.open(db) as st:
        old = add_run(st)
        chip_id = st.ensure_chip(CHIP)
        new = st.begin_run(
            CellRecord("exp", "d" * 64, "a", 1, 0, 1, False, runtime="mlx-lm-server"),
            chip_id=chip_id,
            model_sha256="m" * 64,
            code_version="abc",
            knobs={},
            runtime_version="mlx-lm 0.32.2",
            server_version="0.32.2-0.32.4-Linux",
        )
        st.append_requests(new, [{**request_rows(1)[0], "asked_tokens": 9}])
        got = st.con.execute(
            "SELECT r.run_id = ?, r.runtime_version, r.server_version, q.asked_tokens "
            "FROM runs r JOIN requests q USING (run_id) ORDER BY 1",
            [new],
        ).fetchall()
    assert got[0][1:] == (None, None, None) and got[-1] == (True, "mlx-lm 0.32.2", "0.32.2-0.32.4-Linux", 9)
    assert old
