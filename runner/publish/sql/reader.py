"""The only reader of DuckDB for pages: one named method per question a page asks.

- Every aggregate is computed in DuckDB SQL over complete runs; Python receives per-cell
  and per-run results and, for the bootstrap (`intervals.py`), per-request values as
  numpy arrays (never a Python loop over pass or request rows).
- Rows come out named (`rows.py`, `CellStat`, `Chip`), never as bare tuples.
- Every query is sorted, so the same database always yields the same page.
- It formats and renders nothing, and never writes to the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from runner.publish.metrics import METRICS
from runner.publish.sql import classes
from runner.publish.sql.arm_queries import ArmQueries
from runner.publish.sql.pages import (
    CELLS_SQL,
    DRAFTED_BY_WIDTH_RUNS_SQL,
    GAP_VALUES_SQL,
    RAW_SQL,
    REQUEST_VALUES_SQL,
    RUN_VALUES_SQL,
    TIMELINE_SQL,
)
from runner.publish.sql.pass_queries import PassQueries
from runner.publish.sql.provenance import (
    BUSY,
    BUSY_CELLS_SQL,
    CHIPS_SQL,
    DECLARATION_CELLS_SQL,
    LAYOUT_SQL,
    LOAD_SQL,
    PROVENANCE_SQL,
    REMEASURED_SQL,
    REPETITIONS_SQL,
    RUN_SUMMARY_SQL,
)
from runner.publish.sql.rows import (
    CellKey,
    CellRound,
    ChipKey,
    LaterRun,
    RunKey,
    RunSummary,
    TokenTime,
    WidthKey,
    WidthRuns,
)
from runner.publish.sql.sweep_queries import SweepQueries
from runner.publish.sql.sweeps import at_rate
from runner.publish.sql.view_queries import ViewQueries, judged
from runner.store.migrations import SCHEMA_VERSION


class QueryError(Exception):
    """The database cannot be read (missing file, wrong schema)."""


@dataclass(frozen=True, slots=True)
class CellStat:
    """One metric of one (chip, arm, concurrency) cell: mean over rounds and its spread."""

    chip_id: str
    arm: str
    concurrency: int
    metric: str
    mean: float
    lo: float
    hi: float
    n_rounds: int


@dataclass(frozen=True, slots=True)
class Chip:
    chip_id: str
    name: str
    device: str
    blas: str
    aliases: tuple[str, ...] = ()  # its instances' chip names and ids: a post may name either


class Reader:
    """A read-only connection to one bothrows database. The cells' and runs' questions are its
    own methods; the rest come by subject, each a small object over the same connection:
    `judging` (views and probes), `passes` (the pass-cost model), `sweeps` (rates, short
    requests, contention) and `arms` (what measured each arm)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise QueryError(f"database {self.path} does not exist; run `runner run <experiment>` first")
        try:
            self.con = duckdb.connect(str(self.path), read_only=True)
            self.con.execute("SELECT count(*) FROM runs").fetchall()
            version = self.con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
        except duckdb.Error as e:
            raise QueryError(f"database {self.path} cannot be read: {e}") from None
        if version != SCHEMA_VERSION:
            self.con.close()
            raise QueryError(
                f"database {self.path} has schema version {version}, this bothrows reads "
                f"{SCHEMA_VERSION}: `runner build` (or `make report`) brings it up to date"
            )
        classes.shadow(self.con)  # pages see machine classes as chips, instances as blocks
        self.judging = ViewQueries(self._rows)
        self.passes = PassQueries(self._rows, self._blocks)
        self.sweeps = SweepQueries(self._rows)
        self.arms = ArmQueries(self._rows)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _rows(self, sql: str, params: dict) -> list[tuple]:
        used = {k: v for k, v in params.items() if f"${k}" in sql}
        return self.con.execute(sql, used).fetchall()

    def quick_choice(self, experiment: str) -> bool | None:
        """Whether pages use quick runs: False when full runs exist, True when only quick
        ones do, None when the experiment has no complete runs at all."""
        rows = self._rows(
            "SELECT DISTINCT quick FROM runs WHERE experiment = $experiment "
            "AND status = 'complete' ORDER BY quick",
            {"experiment": experiment},
        )
        flags = [bool(r[0]) for r in rows]
        return None if not flags else (False if False in flags else True)

    def cells(self, experiment: str, quick: bool, as_of: datetime | None = None) -> list[CellStat]:
        p = {"experiment": experiment, "quick": quick, "as_of": as_of, "label": None}
        return [
            CellStat(c, a, int(k), m, mean, lo, hi, int(n))
            for c, a, k, m, mean, lo, hi, n in self._rows(CELLS_SQL, p)
        ]

    def run_values(
        self,
        experiment: str,
        quick: bool,
        as_of: datetime | None = None,
        label: str | None = None,
        rate: float | None = None,
    ) -> dict[tuple, dict[str, float | None]]:
        """(chip, arm, concurrency, round) -> {metric: the run's value}; with `label`,
        the request figures of the requests so labelled only; with `rate`, that rate's
        runs of a rate sweep."""
        p = {"experiment": experiment, "quick": quick, "as_of": as_of, "label": label, "rate": rate}
        sql, p = judged(RUN_VALUES_SQL, p)
        return {
            RunKey(c, a, int(k), int(r)): dict(zip(METRICS, vals))
            for c, a, k, r, *vals in self._rows(sql if rate is None else at_rate(sql), p)
        }

    def _blocks(self, sql: str, params: dict) -> list[tuple[RunKey, dict]]:
        """Rows sorted by (chip, arm, concurrency, round), one (key, columns) per run,
        columns as numpy arrays (nulls NaN); no Python loop over the rows themselves."""
        t = self.con.sql(sql, params={k: v for k, v in params.items() if f"${k}" in sql}).to_arrow_table()
        if t.num_rows == 0:
            return []
        cols = {n: t.column(n).to_numpy(zero_copy_only=False) for n in t.column_names}
        key_cols = [cols["chip_id"], cols["arm"], cols["concurrency"], cols["round"]]
        change = np.zeros(t.num_rows - 1, dtype=bool)
        for col in key_cols:
            change |= col[1:] != col[:-1]
        starts = np.concatenate([[0], np.nonzero(change)[0] + 1])
        ends = np.concatenate([starts[1:], [t.num_rows]])
        return [
            (
                RunKey(str(key_cols[0][a]), str(key_cols[1][a]), int(key_cols[2][a]), int(key_cols[3][a])),
                {n: v[a:b] for n, v in cols.items()},
            )
            for a, b in zip(starts.tolist(), ends.tolist())
        ]

    def request_values(
        self,
        experiment: str,
        quick: bool,
        as_of: datetime | None = None,
        label: str | None = None,
        rate: float | None = None,
    ) -> dict[RunKey, dict]:
        """(chip, arm, concurrency, round) -> {column: (request ids, values)} as numpy
        arrays: one value a request, and every inter-token gap ("itl_ms", the ids repeat)
        with each request's longest ("stall_ms"); with `rate`, that rate's runs."""
        p = {"experiment": experiment, "quick": quick, "as_of": as_of, "label": label, "rate": rate}
        swept = (lambda sql: sql) if rate is None else at_rate  # noqa: E731
        (request_sql, p), (gap_sql, _) = judged(REQUEST_VALUES_SQL, p), judged(GAP_VALUES_SQL, p)
        out: dict[RunKey, dict] = {}
        for k, cols in self._blocks(swept(request_sql), p):
            ids = cols["request_id"].astype(np.int64)
            out[k] = {
                c: (ids, np.asarray(cols[c], dtype=float))
                for c in ("prefill_tps", "decode_tps", "ttft_ms", "tpot_ms", "e2el_ms")
            }
        for k, cols in self._blocks(swept(gap_sql), p):
            ids, gaps = cols["request_id"].astype(np.int64), np.asarray(cols["gap_ms"], dtype=float)
            firsts = np.concatenate([[0], np.nonzero(ids[1:] != ids[:-1])[0] + 1])
            run = out.setdefault(k, {})
            run["itl_ms"] = (ids, gaps)
            run["stall_ms"] = (ids[firsts], np.maximum.reduceat(gaps, firsts))
        return out

    def timeline(
        self, experiment: str, quick: bool, chip: str, concurrency: int, round_: int
    ) -> list[TokenTime]:
        """One run per arm: each token's arrival and the gap before it."""
        p = {
            "experiment": experiment,
            "quick": quick,
            "as_of": None,
            "label": None,
            "chip": chip,
            "concurrency": concurrency,
            "round": round_,
        }
        return [
            TokenTime(a, int(r), lab, float(t), float(g)) for a, r, lab, t, g in self._rows(TIMELINE_SQL, p)
        ]

    def drafted_by_width_runs(self, experiment: str, quick: bool) -> dict[WidthKey, WidthRuns]:
        """(chip, arm, width) -> passes and drafted passes per run, for intervals."""
        out: dict[WidthKey, WidthRuns] = {}
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        for c, a, w, _, n, d in self._rows(DRAFTED_BY_WIDTH_RUNS_SQL, p):
            runs = out.setdefault(WidthKey(c, a, int(w)), WidthRuns([], []))
            runs.passes.append(int(n))
            runs.drafted.append(int(d))
        return out

    def layout(self, experiment: str, quick: bool) -> list[CellKey]:
        return [
            CellKey(c, a, int(k))
            for c, a, k in self._rows(LAYOUT_SQL, {"experiment": experiment, "quick": quick})
        ]

    def chips(self, experiment: str, quick: bool) -> list[Chip]:
        rows = self._rows(CHIPS_SQL, {"experiment": experiment, "quick": quick})
        return [Chip(*r[:4], tuple(r[4])) for r in rows]

    def provenance(self, experiment: str, quick: bool) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for what, value in self._rows(
            PROVENANCE_SQL, {"experiment": experiment, "quick": quick, "as_of": None}
        ):
            out.setdefault(what, []).append(value)
        return out

    def declaration_cells(self, experiment: str, declaration: str) -> dict[ChipKey, set[tuple]]:
        """(chip name, chip id) -> {(arm, concurrency, round[, rate])} of complete full runs
        (the rate for a rate sweep's runs, as CellRecord.key has it)."""
        out: dict[ChipKey, set[tuple]] = {}
        for name, chip_id, arm, conc, rnd, rate in self._rows(
            DECLARATION_CELLS_SQL, {"experiment": experiment, "declaration": declaration}
        ):
            key = CellRound(arm, int(conc), int(rnd))
            out.setdefault(ChipKey(name, chip_id), set()).add(key if rate is None else (*key, float(rate)))
        return out

    def run_summary(self, experiment: str | None = None) -> RunSummary:
        """Complete runs (of one experiment, full ones only; or of all) and the newest finish."""
        n, newest = self._rows(RUN_SUMMARY_SQL, {"experiment": experiment})[0]
        return RunSummary(int(n), newest)

    def repetition_starts(self, experiment: str, arm: str) -> list[datetime]:
        return [r[0] for r in self._rows(REPETITIONS_SQL, {"experiment": experiment, "arm": arm})]

    def load_by_chip(self, experiment: str, quick: bool) -> dict[str, dict]:
        """chip_id -> the load figures of its runs."""
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        keys = ("runs", "load_min", "load_max", "steal_max", "busy_other_max", "with_load", "ruled")
        keys += ("reruns", "rerun_cells")  # the contention rule: runs it judged, re-runs, cells re-run
        return {r[0]: dict(zip(keys, r[1:])) for r in self._rows(LOAD_SQL, p)}

    def busy_cells(self, experiment: str, quick: bool) -> set[CellKey]:
        p = {"experiment": experiment, "quick": quick, "as_of": None, **BUSY}
        return {CellKey(c, a, int(k)) for c, a, k in self._rows(BUSY_CELLS_SQL, p)}

    def remeasured(self, experiment: str, quick: bool, since: datetime) -> list[LaterRun]:
        """Complete runs started at or after `since`."""
        p = {"experiment": experiment, "quick": quick, "since": since}
        return [
            LaterRun(run_id, chip, arm, int(k), int(r), day, code, ran, started)
            for run_id, chip, arm, k, r, day, code, ran, started in self._rows(REMEASURED_SQL, p)
        ]

    def raw_tables(self, experiment: str, quick: bool) -> dict[str, pa.Table]:
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        used = lambda sql: {k: v for k, v in p.items() if f"${k}" in sql}  # noqa: E731
        return {name: self.con.sql(sql, params=used(sql)).to_arrow_table() for name, sql in RAW_SQL.items()}
