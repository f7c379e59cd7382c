"""Moving runs between machines: export one experiment's complete runs to Parquet, and
merge such exports (or another machine's whole DuckDB file) into this database.

Import is idempotent: a run already present (same run_id) or a chip already present
(same chip_id) is skipped, so importing the same export twice adds nothing. An export or
database from before a table existed (tokens.parquet, from schema version 4) imports as
having none of its rows, and columns added since (ADDED_COLUMNS) as NULL. This module
writes only through an open Store; it does not render anything.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from runner.store import chip_classes
from runner.store.store import ADDED_COLUMNS, TOKEN_SCHEMA, Store, StoreError

REQUIRED_TABLES = ("chips", "runs", "requests", "passes")
# Tables later schema versions added, with their columns: a source without one has no rows.
ADDED_TABLES: dict[str, pa.Schema] = {"tokens": pa.schema([("run_id", pa.string())] + list(TOKEN_SCHEMA))}
TABLES = REQUIRED_TABLES + tuple(ADDED_TABLES)


def _columns(st: Store, table: str) -> list[str]:
    rows = st.con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return [r[0] for r in rows]


def export_experiment(st: Store, experiment: str, out_dir: str | Path) -> dict[str, int]:
    """Write chips/runs/requests/passes/tokens.parquet for the experiment's complete runs.
    Returns rows written per table; raises StoreError when there is nothing to export."""
    selects = {
        "runs": "SELECT * FROM runs WHERE experiment = ? AND status = 'complete' ORDER BY run_id",
        "chips": "SELECT * FROM chips WHERE chip_id IN (SELECT chip_id FROM runs WHERE "
        "experiment = ? AND status = 'complete') ORDER BY chip_id",
        "requests": "SELECT q.* FROM requests q JOIN runs r USING (run_id) WHERE r.experiment = ? "
        "AND r.status = 'complete' ORDER BY q.run_id, q.request_id",
        "passes": "SELECT p.* FROM passes p JOIN runs r USING (run_id) WHERE r.experiment = ? "
        "AND r.status = 'complete' ORDER BY p.run_id, p.pass_index",
        "tokens": "SELECT k.* FROM tokens k JOIN runs r USING (run_id) WHERE r.experiment = ? "
        "AND r.status = 'complete' ORDER BY k.run_id, k.request_id, k.token_index",
    }
    tables = {t: st.con.sql(sql, params=[experiment]).to_arrow_table() for t, sql in selects.items()}
    if tables["runs"].num_rows == 0:
        known = [
            r[0]
            for r in st.con.execute(
                "SELECT DISTINCT experiment FROM runs WHERE status = 'complete' ORDER BY 1"
            ).fetchall()
        ]
        raise StoreError(
            f"database {st.path} has no complete runs of experiment {experiment!r} "
            f"(experiments with complete runs: {known or 'none'})"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for t in TABLES:
        pq.write_table(tables[t], out / f"{t}.parquet")
    return {t: tables[t].num_rows for t in TABLES}


def _read_export(source: Path) -> dict[str, pa.Table]:
    folder = source.parent if source.suffix == ".parquet" else source
    missing = [f"{t}.parquet" for t in REQUIRED_TABLES if not (folder / f"{t}.parquet").is_file()]
    if missing:
        raise StoreError(f"{source}: not an export (missing {', '.join(missing)} in {folder})")
    try:
        return {
            t: pq.read_table(folder / f"{t}.parquet") for t in TABLES if (folder / f"{t}.parquet").is_file()
        }
    except (pa.ArrowInvalid, OSError) as e:
        raise StoreError(f"{folder}: cannot read Parquet: {e}") from None


def _read_database(source: Path) -> dict[str, pa.Table]:
    try:
        con = duckdb.connect(str(source), read_only=True)
    except duckdb.Error as e:
        raise StoreError(f"{source}: cannot open as a DuckDB database: {e}") from None
    try:
        present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        return {
            t: con.sql(
                f"SELECT * FROM {t} WHERE " + ("status = 'complete'" if t == "runs" else "true")
            ).to_arrow_table()
            for t in TABLES
            if t in REQUIRED_TABLES or t in present
        }  # an older database may lack a later table
    except duckdb.Error as e:
        raise StoreError(f"{source}: not a bothrows database: {e}") from None
    finally:
        con.close()


def read_source(source: str | Path) -> dict[str, pa.Table]:
    """An export folder, one of its Parquet files, or a bothrows .duckdb file."""
    path = Path(source)
    if not path.exists():
        raise StoreError(f"{path}: no such file or folder")
    if path.is_file() and path.suffix != ".parquet":
        return _read_database(path)
    return _read_export(path)


def import_tables(st: Store, tables: dict[str, pa.Table], source: str) -> dict[str, int]:
    """Merge exported tables; returns rows added per table (0 everywhere on a repeat).
    A table of ADDED_TABLES may be absent (a source from before it): it adds no rows."""
    lacking = [t for t in REQUIRED_TABLES if t not in tables]
    if lacking:
        raise StoreError(f"{source}: lacks the {', '.join(lacking)} table(s)")
    tables = {
        t: _with_added_columns(t, tables[t] if t in tables else ADDED_TABLES[t].empty_table()) for t in TABLES
    }
    for t in TABLES:
        missing = sorted(set(_columns(st, t)) - set(tables[t].column_names))
        if missing:
            raise StoreError(f"{source}: {t} lacks columns {missing}")
    before = {t: st._one(f"SELECT count(*) FROM {t}")[0] for t in TABLES}
    names = {t: f"_import_{t}" for t in TABLES}
    for t in TABLES:
        st.con.register(names[t], tables[t])
    try:
        orphans = st.con.execute(
            f"SELECT DISTINCT chip_id FROM {names['runs']} WHERE chip_id NOT IN "
            f"(SELECT chip_id FROM {names['chips']}) AND chip_id NOT IN (SELECT chip_id FROM chips)"
        ).fetchall()
        if orphans:
            raise StoreError(f"{source}: runs name chips {[o[0] for o in orphans]} that it does not carry")
        with st.transaction():
            _merge(st, names)
            chip_classes.classify_unclassified(st.con, source)  # chips exported before classes
    finally:
        for t in TABLES:
            st.con.unregister(names[t])
    return {t: st._one(f"SELECT count(*) FROM {t}")[0] - before[t] for t in TABLES}


def _with_added_columns(table: str, rows: pa.Table) -> pa.Table:
    """An export made before a migration lacks the columns it added: they become NULL."""
    for name, kind in ADDED_COLUMNS.get(table, {}).items():
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(rows.num_rows, kind))
    return rows


def _merge(st: Store, names: dict[str, str]) -> None:
    cols = {t: ", ".join(_columns(st, t)) for t in TABLES}
    st.con.execute(
        "CREATE TEMP TABLE _new_runs AS SELECT DISTINCT run_id FROM "
        f"{names['runs']} WHERE status = 'complete' AND run_id NOT IN (SELECT run_id FROM runs)"
    )
    try:
        st.con.execute(
            f"INSERT INTO chips SELECT DISTINCT {cols['chips']} FROM {names['chips']} "
            "WHERE chip_id NOT IN (SELECT chip_id FROM chips)"
        )
        st.con.execute(
            f"INSERT INTO runs SELECT {cols['runs']} FROM {names['runs']} "
            "WHERE run_id IN (SELECT run_id FROM _new_runs)"
        )
        for t in ("requests", "passes", "tokens"):
            st.con.execute(
                f"INSERT INTO {t} SELECT {cols[t]} FROM {names[t]} "
                "WHERE run_id IN (SELECT run_id FROM _new_runs)"
            )
    finally:
        st.con.execute("DROP TABLE _new_runs")


def export_runs(st: Store, run_ids: list[str], out_dir: str | Path) -> dict[str, int]:
    """Write chips/runs/requests/passes/tokens.parquet holding exactly the given complete runs
    (the format `export_experiment` writes); the measurement folders of
    runner.store.measurements are made this way. Raises StoreError when an id is not a
    complete run of this database."""
    ids = pa.table({"run_id": pa.array(sorted(set(run_ids)), pa.string())})
    st.con.register("_export_ids", ids)
    try:
        found = {
            r[0]
            for r in st.con.execute(
                "SELECT run_id FROM runs WHERE status = 'complete' AND run_id IN "
                "(SELECT run_id FROM _export_ids)"
            ).fetchall()
        }
        missing = sorted(set(run_ids) - found)
        if missing:
            raise StoreError(f"database {st.path}: no complete runs {missing}")
        chosen = "SELECT run_id FROM _export_ids"
        selects = {
            "runs": f"SELECT * FROM runs WHERE run_id IN ({chosen}) ORDER BY run_id",
            "chips": f"SELECT * FROM chips WHERE chip_id IN (SELECT chip_id FROM runs WHERE "
            f"run_id IN ({chosen})) ORDER BY chip_id",
            "requests": f"SELECT * FROM requests WHERE run_id IN ({chosen}) ORDER BY run_id, request_id",
            "passes": f"SELECT * FROM passes WHERE run_id IN ({chosen}) ORDER BY run_id, pass_index",
            "tokens": f"SELECT * FROM tokens WHERE run_id IN ({chosen}) "
            "ORDER BY run_id, request_id, token_index",
        }
        tables = {t: st.con.sql(sql).to_arrow_table() for t, sql in selects.items()}
    finally:
        st.con.unregister("_export_ids")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for t in TABLES:  # zstd: these files are committed, and smaller diffs travel faster
        pq.write_table(tables[t], out / f"{t}.parquet", compression="zstd")
    return {t: tables[t].num_rows for t in TABLES}
