"""Schema version 4 on real DuckDB files: per-token times (the tokens table), request
labels and the runs' SLO; a version-3 database migrating, exports and measurement
folders from before version 4 (the committed one included) loading as no token rows and
NULL labels and SLOs."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from store_rows import CHIP, add_run, request_rows, token_times

from runner.experiments.cell import CellRows
from runner.runtimes import Finished
from runner.store import measurements
from runner.store.cell import CellRecord
from runner.store.exchange import export_experiment, import_tables, read_source
from runner.store.store import MIGRATIONS, SCHEMA_VERSION, Store, StoreError

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "reports" / "data" / "measurements"


def query(st: Store, sql: str) -> list[tuple]:
    return st.con.execute(sql).fetchall()


def version_3_database(path: Path) -> Path:
    """A database as bothrows wrote it at schema version 3: its DDL, rows by position."""
    con = duckdb.connect(str(path))
    for version in (1, 2, 3):
        con.execute(MIGRATIONS[version])
        con.execute("INSERT INTO schema_version VALUES (?)", [version])
    con.execute("INSERT INTO chips VALUES ('c1', 'Old CPU', 'cpu', 2, 1024, 'Linux', '0.0', '{}')")
    con.execute(
        "INSERT INTO runs VALUES ('r1', 'exp', 'd', 'a', 1, 0, 'c1', 'm', 'v', '{}', 7, false, "
        "TIMESTAMP '2026-11-29 09:00:00', TIMESTAMP '2026-11-29 09:01:00', 'complete', "
        "0.5, 0.5, 0.0, 0.1, 'openai')"
    )
    con.execute("INSERT INTO requests VALUES ('r1', 0, 0, 10, 4, NULL, 0, 50, 90, NULL)")
    con.execute("INSERT INTO passes VALUES ('r1', 0, 0, 9, 'decode', 1, 0, 1, 0, 0, 1, 100, 100)")
    con.close()
    return path


def test_a_version_3_database_migrates_with_no_tokens_and_null_labels_and_slo(tmp_path):
    db = version_3_database(tmp_path / "v3.duckdb")
    with Store.open(db) as st:
        assert st.schema_version() == SCHEMA_VERSION >= 4
        assert query(st, "SELECT count(*) FROM tokens") == [(0,)]
        assert query(st, "SELECT label, asked_tokens FROM requests") == [(None, None)]
        assert query(st, "SELECT slo_ttft_ms, slo_tpot_ms, runtime FROM runs") == [(None, None, "openai")]
        chip_id = st.ensure_chip(CHIP)
        run_id = st.begin_run(
            CellRecord(
                experiment="exp",
                declaration_sha256="d",
                arm="a",
                concurrency=1,
                round=0,
                seed=7,
                quick=False,
                slo_ttft_ms=500.0,
                slo_tpot_ms=50,
            ),
            chip_id=chip_id,
            model_sha256="m",
            code_version="v",
            knobs={},
        )
        st.append_requests(
            run_id, [{**r, "label": "long" if r["request_id"] == 1 else None} for r in request_rows(2)]
        )
        st.append_tokens(run_id, token_times(2))
        st.finish_run(run_id)
    with Store.open(db) as st:
        assert query(st, f"SELECT slo_ttft_ms, slo_tpot_ms FROM runs WHERE run_id = '{run_id}'") == [
            (500.0, 50.0)
        ]
        assert query(st, "SELECT request_id, label FROM requests WHERE run_id != 'r1' ORDER BY 1") == [
            (0, None),
            (1, "long"),
        ]
        assert query(st, "SELECT request_id, token_index, t_ns FROM tokens ORDER BY 1, 2") == [
            (0, 0, 50),
            (0, 1, 60),
            (0, 2, 75),
            (0, 3, 90),
            (1, 0, 150),
            (1, 1, 160),
            (1, 2, 175),
            (1, 3, 190),
        ]


def test_token_rows_must_match_the_runs_requests_and_nothing_is_written_otherwise(tmp_path):
    with Store.open(tmp_path / "runs.duckdb") as st:
        run_id = add_run(st, status="running", n_requests=2, n_passes=0)
        before = query(st, "SELECT count(*) FROM tokens")
        with pytest.raises(
            StoreError, match=f"append_tokens: request 1 of run {run_id} has 4 output tokens but 3 times"
        ):
            st.append_tokens(run_id, {1: (1, 2, 3)})
        with pytest.raises(StoreError, match=f"request 7 of run {run_id} is not in its requests"):
            st.append_tokens(run_id, {7: (1, 2, 3, 4)})
        with pytest.raises(StoreError, match="append_tokens"):
            st.append_tokens(run_id, {0: ("a", 2, 3, 4)})
        st.append_tokens(run_id, {})  # a runtime that times no token: no rows
        assert query(st, "SELECT count(*) FROM tokens") == before
        st.finish_run(run_id)
        with pytest.raises(StoreError, match="already complete"):
            st.append_tokens(run_id, {0: (1, 2, 3, 4)})
        chip_id = st.ensure_chip(CHIP)
        for bad in (0, -1.0, float("nan"), True):
            with pytest.raises(StoreError, match="slo_ttft_ms must be a positive finite number"):
                st.begin_run(
                    CellRecord(
                        experiment="e",
                        declaration_sha256="d",
                        arm="a",
                        concurrency=1,
                        round=0,
                        seed=1,
                        quick=False,
                        slo_ttft_ms=bad,
                    ),
                    chip_id=chip_id,
                    model_sha256="m",
                    code_version="v",
                    knobs={},
                )


def test_a_request_without_token_times_has_no_rows_never_zeros():
    rows = CellRows()
    rows.add(Finished(0, 5, 2, None, 1000, 1100, 1200, None, None), request_id=4, client=0)
    rows.add(Finished(1, 5, 2, 0, 1000, 1150, 1300, (7, 8), (1150, 1300)), request_id=2, client=1, label="x")
    rows.close(t0=1000, passes=None)
    assert rows.stored_tokens() == {2: (150, 300)}
    assert [(r["request_id"], r["label"], r["arrival_ns"], r["done_ns"]) for r in rows.stored_requests()] == [
        (2, "x", 0, 300),
        (4, None, 0, 200),
    ]


def test_exports_carry_tokens_and_older_exports_load_without_them(tmp_path):
    with Store.open(tmp_path / "a.duckdb") as st:
        add_run(st)
        assert export_experiment(st, "exp", tmp_path / "new")["tokens"] == 12
    old = tmp_path / "old"  # what an export written before version 4 holds
    shutil.copytree(tmp_path / "new", old)
    (old / "tokens.parquet").unlink()
    requests = pq.read_table(old / "requests.parquet")
    pq.write_table(requests.drop_columns(["label"]), old / "requests.parquet")
    runs = pq.read_table(old / "runs.parquet")
    pq.write_table(runs.drop_columns(["slo_ttft_ms", "slo_tpot_ms"]), old / "runs.parquet")
    for source, tokens in (("new", 12), ("old", 0)):
        with Store.open(tmp_path / f"from-{source}.duckdb") as st:
            added = import_tables(st, read_source(tmp_path / source), source)
            assert (added["runs"], added["requests"], added["tokens"]) == (1, 3, tokens)
            assert query(st, "SELECT count(label), count(slo_ttft_ms) FROM requests, runs") == [(0, 0)]
    with Store.open(tmp_path / "b.duckdb") as st:  # an unmigrated version-3 database file
        v3 = version_3_database(tmp_path / "v3.duckdb")
        assert import_tables(st, read_source(v3), str(v3))["tokens"] == 0


def test_the_committed_measurements_and_older_folders_still_load(tmp_path):
    root = tmp_path / "measurements"
    root.mkdir()
    old = [p for p in measurements.measurement_folders(COMMITTED) if not (p / "tokens.parquet").exists()]
    assert old  # committed before per-token times existed
    for folder in old:
        shutil.copytree(folder, root / folder.name)
    db = tmp_path / "runs.duckdb"
    loaded = measurements.sync_database(db, root)
    assert loaded.rebuilt and loaded.runs > 0
    with Store.open(tmp_path / "new.duckdb") as st:  # a version-4 measurement beside them
        run_id = add_run(st)
        measurements.write_runs(st, {run_id}, root)
    assert measurements.sync_database(db, root).runs == loaded.runs + 1
    with Store.open(db) as st:
        assert query(st, "SELECT count(*), count(DISTINCT run_id) FROM tokens") == [(12, 1)]
        assert query(st, "SELECT count(label) FROM requests") == [(0,)]
        assert query(st, "SELECT count(*) FROM requests WHERE run_id IN (SELECT run_id FROM tokens)") == [
            (3,)
        ]
    assert not measurements.sync_database(db, root).rebuilt  # the manifest counts tokens.parquet
