"""Appending a run's rows (requests, per-token times, passes), a mixin of `store.Store`.

- Rows go in as Arrow tables (`row_schemas.py`), never one `executemany` row at a time,
  and only while their run is running: runs are append-only.
- Per-token times are checked against the run's requests (every request named is one of
  them, with exactly its output_tokens times) before they go in.
Uses the Store's own connection (`self.con`, `self._one`); opens nothing itself.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

from runner.store.errors import StoreError
from runner.store.row_schemas import (
    OPTIONAL_PASS_COLUMNS,
    OPTIONAL_REQUEST_COLUMNS,
    PASS_SCHEMA,
    REQUEST_SCHEMA,
    TOKEN_SCHEMA,
)


class RowAppends:
    """Store methods that append a running run's rows."""

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
