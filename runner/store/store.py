"""The only writer of the bothrows DuckDB file.

- Open (with its write lock), migrate (the schema's history is migrations.py's), and
  append chips, runs (one a `CellRecord`, `cell.py`), requests, per-token times and
  passes.
- Append-only: a re-measurement adds runs; nothing changes in place except what a run's
  finish records (its status, finish time and the machine-load figures taken over its
  cell) and, while it runs, its machine probe (`record_probe`).
- Rows go in as Arrow tables, never one `executemany` row at a time.
- It reads no data for pages (that is `runner.publish.queries`) and knows nothing about
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
from typing import Iterator, Sequence

import duckdb
import pyarrow as pa

from .cell import CellRecord
from .migrations import ADDED_COLUMNS, MIGRATIONS, SCHEMA_VERSION  # noqa: F401  (the API)

LOAD_COLUMNS = ("loadavg_start", "loadavg_end", "steal_fraction", "busy_fraction_other")
PROBE_COLUMNS = ("probe_prefill_gflops", "probe_decode_gflops", "probe_read_gbps")

CHIP_COLUMNS = ("name", "device", "cores", "memory_bytes", "os", "mlx_version")
REQUEST_SCHEMA = pa.schema(
    [
        ("request_id", pa.int32()),
        ("client", pa.int32()),
        ("prompt_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("cached_tokens", pa.int32()),
        ("arrival_ns", pa.int64()),
        ("first_token_ns", pa.int64()),
        ("done_ns", pa.int64()),
        ("output_sha256", pa.string()),
        ("label", pa.string()),
        ("asked_tokens", pa.int32()),
        ("error", pa.string()),
    ]
)
# Request columns a caller may leave out (NULL): added after callers that do not know them.
OPTIONAL_REQUEST_COLUMNS = ("label", "asked_tokens", "error")
TOKEN_SCHEMA = pa.schema([("request_id", pa.int32()), ("token_index", pa.int32()), ("t_ns", pa.int64())])
PASS_SCHEMA = pa.schema(
    [
        ("pass_index", pa.int32()),
        ("start_ns", pa.int64()),
        ("duration_ns", pa.int64()),
        ("kind", pa.string()),
        ("width", pa.int32()),
        ("prefill_tokens", pa.int32()),
        ("decode_tokens", pa.int32()),
        ("drafted", pa.int32()),
        ("accepted", pa.int32()),
        ("emitted", pa.int32()),
        ("state_bytes", pa.int64()),
        ("max_row_state_bytes", pa.int64()),
        ("accepted_lengths", pa.list_(pa.int32())),
        ("draft_lengths", pa.list_(pa.int32())),
    ]
)
# Pass columns a caller may leave out (NULL): the drafting histograms (schema 7).
OPTIONAL_PASS_COLUMNS = ("accepted_lengths", "draft_lengths")
RUN_STATUSES = ("running", "complete", "failed")
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")
# DuckDB hands a second connection in the same process the same database instance
# without any lock error; this registry makes "one writer per file" hold in-process too.
_OPEN_HERE: set[str] = set()


class StoreError(Exception):
    """A readable problem with the database or the rows given to it."""


class StoreLocked(StoreError):
    """Another writer holds the database."""


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


class Store:
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
    def ensure_chip(self, fingerprint: dict) -> str:
        missing = [k for k in CHIP_COLUMNS if k not in fingerprint]
        if missing:
            raise StoreError(f"chip fingerprint is missing {missing}")
        chip_id = chip_id_of(fingerprint)
        fp_json = json.dumps(fingerprint, sort_keys=True, default=str)
        self.con.execute(
            "INSERT INTO chips SELECT ?, ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS "
            "(SELECT 1 FROM chips WHERE chip_id = ?)",
            [chip_id, *(fingerprint[k] for k in CHIP_COLUMNS), fp_json, chip_id],
        )
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
            "status, runtime, slo_ttft_ms, slo_tpot_ms, runtime_version, server_version, rate) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 'running', ?, ?, ?, ?, ?, ?)",
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
            ],
        )
        return run_id

    def append_requests(self, run_id: str, rows: list[dict]) -> None:
        """Rows of REQUEST_SCHEMA's columns (OPTIONAL_REQUEST_COLUMNS may be left out: NULL)."""
        rows = [
            r
            if all(k in r for k in OPTIONAL_REQUEST_COLUMNS)
            else {**dict.fromkeys(OPTIONAL_REQUEST_COLUMNS), **r}
            for r in rows
        ]
        self._append("requests", REQUEST_SCHEMA, run_id, rows)

    def append_tokens(self, run_id: str, times: dict[int, Sequence[int]]) -> None:
        """Per-token times: request_id -> each output token's t_ns (cell-relative), in token
        order. Append the run's requests first: every request named must be one of them,
        with exactly output_tokens times. Built column-wise: a cell has many tokens."""
        self._require_running(run_id, "append_tokens")
        if not times:
            return
        try:
            ids = [int(k) for k in times]
            lengths = [len(v) for v in times.values()]
            arrow = pa.table(
                {
                    "request_id": pa.array([k for k, n in zip(ids, lengths) for _ in range(n)], pa.int32()),
                    "token_index": pa.array([i for n in lengths for i in range(n)], pa.int32()),
                    "t_ns": pa.array([t for v in times.values() for t in v], pa.int64()),
                },
                schema=TOKEN_SCHEMA,
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            raise StoreError(f"append_tokens: {e}") from None
        counts = pa.table({"request_id": pa.array(ids, pa.int32()), "n": pa.array(lengths, pa.int64())})
        self.con.register("_incoming", arrow)
        self.con.register("_counts", counts)
        try:
            wrong = self.con.execute(
                "SELECT c.request_id, c.n, q.output_tokens FROM _counts c LEFT JOIN "
                "(SELECT request_id, output_tokens FROM requests WHERE run_id = ?) q USING (request_id) "
                "WHERE q.output_tokens IS DISTINCT FROM c.n ORDER BY c.request_id LIMIT 3",
                [run_id],
            ).fetchall()
            if wrong:
                raise StoreError(
                    "append_tokens: "
                    + "; ".join(
                        f"request {k} of run {run_id} "
                        + (
                            "is not in its requests"
                            if out is None
                            else f"has {out} output tokens but {n} times"
                        )
                        for k, n, out in wrong
                    )
                )
            self.con.execute(
                "INSERT INTO tokens (run_id, request_id, token_index, t_ns) "
                "SELECT ?, request_id, token_index, t_ns FROM _incoming",
                [run_id],
            )
        finally:
            self.con.unregister("_incoming")
            self.con.unregister("_counts")

    def append_passes(self, run_id: str, rows: list[dict]) -> None:
        """Rows of PASS_SCHEMA's columns (OPTIONAL_PASS_COLUMNS may be left out: NULL)."""
        rows = [{**dict.fromkeys(OPTIONAL_PASS_COLUMNS), **r} for r in rows]
        self._append("passes", PASS_SCHEMA, run_id, rows)

    def finish_run(
        self,
        run_id: str,
        status: str = "complete",
        finished_at: datetime | None = None,
        load: dict[str, float | None] | None = None,
    ) -> None:
        """Close a running run; `load` optionally gives LOAD_COLUMNS (None = not reported)."""
        if status not in ("complete", "failed"):
            raise StoreError(f"finish_run: status must be 'complete' or 'failed', got {status!r}")
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

    def _require_running(self, run_id: str, what: str) -> None:
        row = self._one("SELECT status FROM runs WHERE run_id = ?", [run_id])
        if row is None:
            raise StoreError(f"{what}: no run {run_id!r}")
        if row[0] != "running":
            raise StoreError(f"{what}: run {run_id} is already {row[0]}; runs are append-only")

    def _append(self, table: str, schema: pa.Schema, run_id: str, rows: list[dict]) -> None:
        self._require_running(run_id, f"append_{table}")
        if not rows:
            return
        want = set(schema.names)
        for i, row in enumerate(rows):
            if set(row) != want:
                missing, extra = sorted(want - set(row)), sorted(set(row) - want)
                raise StoreError(
                    f"append_{table}: row {i} has missing columns {missing} and unknown columns {extra}"
                )
        try:
            arrow = pa.Table.from_pylist(rows, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as e:
            raise StoreError(f"append_{table}: {e}") from None
        cols = ", ".join(schema.names)
        self.con.register("_incoming", arrow)
        try:
            self.con.execute(
                f"INSERT INTO {table} (run_id, {cols}) SELECT ?, {cols} FROM _incoming", [run_id]
            )
        finally:
            self.con.unregister("_incoming")

    # -- reading what the runner itself needs (resume) -------------------------
    def complete_cells(
        self, *, experiment: str, declaration_sha256: str, chip_id: str, quick: bool
    ) -> set[tuple[str, int, int]]:
        """(arm, concurrency, round) of the complete runs matching this declaration on this chip."""
        rows = self.con.execute(
            "SELECT arm, concurrency, round FROM runs WHERE status = 'complete' AND experiment = ? "
            "AND declaration_sha256 = ? AND chip_id = ? AND quick = ?",
            [experiment, declaration_sha256, chip_id, bool(quick)],
        ).fetchall()
        return {(a, int(c), int(r)) for a, c, r in rows}

    def complete_sweep_cells(
        self, *, experiment: str, declaration_sha256: str, chip_id: str, quick: bool
    ) -> set[tuple[str, int, int, float | None]]:
        """(arm, concurrency, round, rate) of the complete runs, for a rate sweep's cells."""
        rows = self.con.execute(
            "SELECT arm, concurrency, round, rate FROM runs WHERE status = 'complete' AND experiment = ? "
            "AND declaration_sha256 = ? AND chip_id = ? AND quick = ?",
            [experiment, declaration_sha256, chip_id, bool(quick)],
        ).fetchall()
        return {(a, int(c), int(r), None if x is None else float(x)) for a, c, r, x in rows}
