"""The only writer of the bothrows DuckDB file.

- Open (with its write lock), migrate (the schema's history is migrations.py's), and
  append chips, runs (one a `CellRecord`, `cell.py`), requests, per-token times and
  passes (`row_appends.py`, in the shapes of `row_schemas.py`).
- Append-only: a re-measurement adds runs; nothing changes in place except what a run's
  finish records (its status, finish time and the machine-load figures taken over its
  cell) and, while it runs, its machine probe (`record_probe`).
- It reads no data for pages (that is `runner.publish.sql.reader`) and knows nothing about
  the engine or experiments beyond the column names.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb

from runner.store import chip_classes
from runner.store.cell import CellRecord
from runner.store.errors import StoreError, StoreLocked  # noqa: F401  (the API)
from runner.store.migrations import ADDED_COLUMNS, CLASS_MIGRATION, MIGRATIONS, SCHEMA_VERSION  # noqa: F401
from runner.store.row_appends import RowAppends
from runner.store.row_schemas import (  # noqa: F401  (the API)
    CHIP_COLUMNS,
    OPTIONAL_PASS_COLUMNS,
    OPTIONAL_REQUEST_COLUMNS,
    PASS_SCHEMA,
    REQUEST_SCHEMA,
    TOKEN_SCHEMA,
)

LOAD_COLUMNS = ("loadavg_start", "loadavg_end", "steal_fraction", "busy_fraction_other")
PROBE_COLUMNS = ("probe_prefill_gflops", "probe_decode_gflops", "probe_read_gbps")

RUN_STATUSES = ("running", "complete", "failed")
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")
# DuckDB hands a second connection in the same process the same database instance
# without any lock error; this registry makes "one writer per file" hold in-process too.
_OPEN_HERE: set[str] = set()


def chip_id_of(fingerprint: dict) -> str:
    canonical = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _positive(value) -> bool:
    return (
        not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    )


def _utc_naive(ts: datetime | None) -> datetime:
    ts = ts or datetime.now(timezone.utc)
    return ts.astimezone(timezone.utc).replace(tzinfo=None) if ts.tzinfo else ts


class Store(RowAppends):
    """An open, migrated database holding the write lock until close()."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path):
        self.con = con
        self.path = path

    # -- opening -------------------------------------------------------------
    @classmethod
    def open(cls, db_path: str | os.PathLike) -> "Store":
        path = Path(db_path).resolve()
        key = str(path)
        if key in _OPEN_HERE:
            raise StoreLocked(
                f"database {path} is locked by this process (PID {os.getpid()}): "
                "another Store is already open on it"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"database {path}: cannot create its folder: {e.strerror}") from None
        try:
            con = duckdb.connect(key)
        except duckdb.IOException as e:
            m = _LOCK_HOLDER.search(str(e))
            if m:
                raise StoreLocked(
                    f"database {path} is locked by PID {m.group(2)} ({m.group(1)}); "
                    "wait for it to finish or pass --db another file"
                ) from None
            raise StoreError(f"database {path}: {e}") from None
        except duckdb.Error as e:
            raise StoreError(f"database {path}: {e}") from None
        store = cls(con, path)
        try:
            store._migrate()
        except BaseException:
            con.close()
            raise
        _OPEN_HERE.add(key)
        return store

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None
            _OPEN_HERE.discard(str(self.path))

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def schema_version(self) -> int:
        has = self._one("SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'")[
            0
        ]
        if not has:
            return 0
        v = self._one("SELECT max(version) FROM schema_version")[0]
        return int(v or 0)

    def _migrate(self) -> None:
        current = self.schema_version()
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"database {self.path} has schema version {current}, newer than this "
                f"bothrows understands ({SCHEMA_VERSION}); update bothrows"
            )
        # Every migration not yet applied, in order: numbers are assigned per issue, so a
        # branch may hold 6 before 5 exists, and a database migrated there later gets 5.
        applied = (
            {int(v) for (v,) in self.con.execute("SELECT version FROM schema_version").fetchall()}
            if current
            else set()
        )
        for version in sorted(v for v in MIGRATIONS if v not in applied):
            with self.transaction():
                self.con.execute(MIGRATIONS[version])
                self.con.execute("INSERT INTO schema_version VALUES (?)", [version])
                if version == CLASS_MIGRATION:  # chips stored before classes: from their own fields
                    chip_classes.classify_unclassified(self.con, str(self.path))

    def _one(self, sql: str, params: list | None = None) -> tuple | None:
        """First row of a query, fetched to the end (DuckDB refuses new work on a
        connection with an unfinished result)."""
        rows = self.con.execute(sql, params or []).fetchall()
        return rows[0] if rows else None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All statements inside commit together or not at all."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    # -- writing -------------------------------------------------------------
    def ensure_chip(self, fingerprint: dict, machine_class: str | None = None) -> str:
        """The chip (instance) of this fingerprint, added with its machine class: the
        declared name when given, else computed from the fingerprint (chip_classes.py)."""
        missing = [k for k in CHIP_COLUMNS if k not in fingerprint]
        if missing:
            raise StoreError(f"chip fingerprint is missing {missing}")
        chip_id = chip_id_of(fingerprint)
        with self.transaction():
            chip_classes.insert_chip(self.con, chip_id, fingerprint, CHIP_COLUMNS, machine_class)
        return chip_id

    def begin_run(
        self,
        cell: CellRecord,
        *,
        chip_id: str,
        model_sha256: str,
        code_version: str,
        knobs: dict,
        started_at: datetime | None = None,
        runtime_version: str | None = None,
        server_version: str | None = None,
    ) -> str:
        """A new 'running' run of `cell` on this chip; knobs: what its runtime ran with;
        runtime_version / server_version: what ran it (None: not known or not a server)."""
        if not self._one("SELECT 1 FROM chips WHERE chip_id = ?", [chip_id]):
            raise StoreError(f"begin_run: chip {chip_id!r} is not in the database; call ensure_chip first")
        for key, value in (("slo_ttft_ms", cell.slo_ttft_ms), ("slo_tpot_ms", cell.slo_tpot_ms)):
            if value is not None and not _positive(value):
                raise StoreError(f"begin_run: {key} must be a positive finite number or None, got {value!r}")
        run_id = uuid.uuid4().hex
        self.con.execute(  # columns named: later migrations append columns to the table
            "INSERT INTO runs (run_id, experiment, declaration_sha256, arm, concurrency, round, "
            "chip_id, model_sha256, code_version, knobs, seed, quick, started_at, finished_at, "
            "status, runtime, slo_ttft_ms, slo_tpot_ms, runtime_version, server_version, rate, looks) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 'running', ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                cell.experiment,
                cell.declaration_sha256,
                cell.arm,
                int(cell.concurrency),
                int(cell.round),
                chip_id,
                model_sha256,
                code_version,
                json.dumps(knobs, sort_keys=True, default=str),
                int(cell.seed),
                bool(cell.quick),
                _utc_naive(started_at),
                str(cell.runtime),
                cell.slo_ttft_ms,
                cell.slo_tpot_ms,
                runtime_version,
                server_version,
                cell.rate,
                cell.looks,
            ],
        )
        return run_id

    def finish_run(
        self,
        run_id: str,
        status: str = "complete",
        finished_at: datetime | None = None,
        load: dict[str, float | None] | None = None,
        contention_reruns: int | None = None,
    ) -> None:
        """Close a running run; `load` optionally gives LOAD_COLUMNS (None = not reported);
        'contended': measured, but its CPU was taken past the run's limit, so the cell was
        measured again and this run is not kept (its rows were never appended);
        contention_reruns: how many contended runs of the cell came before this one."""
        if status not in ("complete", "failed", "contended"):
            raise StoreError(
                f"finish_run: status must be 'complete', 'failed' or 'contended', got {status!r}"
            )
        load = dict(load or {})
        unknown = sorted(set(load) - set(LOAD_COLUMNS))
        if unknown:
            raise StoreError(f"finish_run: unknown load columns {unknown} (known: {list(LOAD_COLUMNS)})")
        for key, value in load.items():
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            ):
                raise StoreError(
                    f"finish_run: load column {key} must be a finite number or None, got {value!r}"
                )
        self._require_running(run_id, "finish_run")
        if contention_reruns is not None:
            load["contention_reruns"] = int(contention_reruns)
        sets = "".join(f", {k} = ?" for k in load)
        self.con.execute(
            f"UPDATE runs SET status = ?, finished_at = ?{sets} WHERE run_id = ?",
            [status, _utc_naive(finished_at), *load.values(), run_id],
        )

    def record_probe(self, run_id: str, probe: dict[str, float | None]) -> None:
        """A running run's machine probe (PROBE_COLUMNS; runner/experiments/probe.py)."""
        unknown = sorted(set(probe) - set(PROBE_COLUMNS))
        if unknown:
            raise StoreError(f"record_probe: unknown probe columns {unknown} (known: {list(PROBE_COLUMNS)})")
        bad = {k: v for k, v in probe.items() if v is not None and not _positive(v)}
        if bad:
            raise StoreError(
                f"record_probe: probe figures must be positive finite numbers or None, got {bad}"
            )
        self._require_running(run_id, "record_probe")
        sets = ", ".join(f"{k} = ?" for k in probe)
        if sets:
            self.con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*probe.values(), run_id])

    def fail_stale_runs(self) -> int:
        """Mark runs left 'running' by a killed process as failed (we hold the lock, so no
        live process can still be writing them). Returns how many were marked."""
        n = self._one("SELECT count(*) FROM runs WHERE status = 'running'")[0]
        if n:
            self.con.execute("UPDATE runs SET status = 'failed' WHERE status = 'running'")
        return int(n)

    # -- reading what the runner itself needs (resume) -------------------------
    def complete_cells(
        self,
        *,
        experiment: str,
        declaration_sha256: str,
        chip_id: str,
        quick: bool,
        since: datetime | None = None,
        rates: bool = False,
    ) -> set[tuple]:
        """(arm, concurrency, round) of the complete runs matching this declaration on this
        chip (started at or after `since`, when given); with `rates`, a sweep's cells, the
        rate fourth."""
        rows = self.con.execute(
            "SELECT arm, concurrency, round, rate FROM runs WHERE status = 'complete' AND experiment = ? "
            "AND declaration_sha256 = ? AND chip_id = ? AND quick = ? "
            "AND (?::TIMESTAMP IS NULL OR started_at >= ?::TIMESTAMP)",
            [experiment, declaration_sha256, chip_id, bool(quick), since, since],
        ).fetchall()
        if rates:
            return {(a, int(c), int(r), None if x is None else float(x)) for a, c, r, x in rows}
        return {(a, int(c), int(r)) for a, c, r, _ in rows}
