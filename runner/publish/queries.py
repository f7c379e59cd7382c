"""The only reader of DuckDB for pages: one named method per question a page asks.

Every aggregate is computed in DuckDB SQL over complete runs; Python receives per-cell
and per-run results, and, for the bootstrap (`intervals.py`), per-request values as
numpy arrays (never a Python loop over pass or request rows). Every query is sorted so
that the same database always yields the same page. This module does not format or
render anything and never writes to the database.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from runner.publish.metrics import METRICS


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


# The runs a page uses: complete ones of the chosen quickness, measured before $as_of
# when given, and for a cell measured more than once in a round, the latest (a
# re-measurement supersedes, it never mixes with the older run).
CHOSEN_RUNS = """
chosen AS (
    SELECT * FROM runs
    WHERE experiment = $experiment AND status = 'complete' AND quick = $quick
      AND ($as_of::TIMESTAMP IS NULL OR started_at < $as_of::TIMESTAMP)
    QUALIFY row_number() OVER (PARTITION BY chip_id, arm, concurrency, round
                               ORDER BY started_at DESC, run_id DESC) = 1
)"""

RUN_METRICS = "WITH " + CHOSEN_RUNS + """,
req AS (
    SELECT q.run_id,
        avg(q.prompt_tokens * 1e9 / nullif(q.first_token_ns - q.arrival_ns, 0)) AS prefill_tps,
        avg(CASE WHEN q.output_tokens > 1 THEN (q.output_tokens - 1) * 1e9
                 / nullif(q.done_ns - q.first_token_ns, 0) END) AS decode_tps,
        sum(q.output_tokens) * 1e9 / nullif(max(q.done_ns) - min(q.arrival_ns), 0) AS aggregate_tps,
        quantile_cont((q.first_token_ns - q.arrival_ns) / 1e6, 0.5) AS ttft_p50_ms,
        quantile_cont((q.first_token_ns - q.arrival_ns) / 1e6, 0.9) AS ttft_p90_ms,
        quantile_cont(CASE WHEN q.output_tokens > 1 THEN (q.done_ns - q.first_token_ns) / 1e6
                           / (q.output_tokens - 1) END, 0.5) AS tpot_p50_ms,
        quantile_cont(CASE WHEN q.output_tokens > 1 THEN (q.done_ns - q.first_token_ns) / 1e6
                           / (q.output_tokens - 1) END, 0.9) AS tpot_p90_ms
    FROM requests q JOIN chosen c ON q.run_id = c.run_id
    GROUP BY q.run_id
),
pas AS (
    SELECT p.run_id,
        count(*) AS passes,
        count(*) FILTER (WHERE p.drafted > 0) AS drafted_passes,
        sum(p.accepted) / nullif(sum(p.drafted), 0) AS acceptance,
        avg(p.state_bytes / nullif(p.width, 0)) / 1e6 AS state_mb,
        max(p.max_row_state_bytes) / 1e6 AS max_state_mb
    FROM passes p JOIN chosen c ON p.run_id = c.run_id
    GROUP BY p.run_id
),
per_run AS (
    SELECT c.chip_id, c.arm, c.concurrency, c.round, c.run_id, """ + ",\n        ".join(
    f"CAST({m} AS DOUBLE) AS {m}" for m in METRICS) + """
    FROM chosen c LEFT JOIN req USING (run_id) LEFT JOIN pas USING (run_id)
),
long AS (
    UNPIVOT per_run ON """ + ", ".join(METRICS) + """ INTO NAME metric VALUE value
)"""

CELLS_SQL = RUN_METRICS + """
SELECT chip_id, arm, concurrency, metric,
       avg(value) AS mean, min(value) AS lo, max(value) AS hi, count(*) AS n_rounds
FROM long
GROUP BY chip_id, arm, concurrency, metric
ORDER BY chip_id, arm, concurrency, metric"""

# Per-run values (the cells' inputs) and per-request values (the bootstrap's inputs).
RUN_VALUES_SQL = RUN_METRICS + """
SELECT chip_id, arm, concurrency, round, """ + ", ".join(METRICS) + """ FROM per_run
ORDER BY chip_id, arm, concurrency, round"""

REQUEST_VALUES_SQL = "WITH " + CHOSEN_RUNS + """
SELECT c.chip_id, c.arm, c.concurrency, c.round, q.request_id,
       CAST(q.prompt_tokens * 1e9 / nullif(q.first_token_ns - q.arrival_ns, 0) AS DOUBLE) AS prefill_tps,
       CAST(CASE WHEN q.output_tokens > 1 THEN (q.output_tokens - 1) * 1e9
                 / nullif(q.done_ns - q.first_token_ns, 0) END AS DOUBLE) AS decode_tps,
       CAST((q.first_token_ns - q.arrival_ns) / 1e6 AS DOUBLE) AS ttft_ms,
       CAST(CASE WHEN q.output_tokens > 1 THEN (q.done_ns - q.first_token_ns) / 1e6
                 / (q.output_tokens - 1) END AS DOUBLE) AS tpot_ms
FROM requests q JOIN chosen c ON q.run_id = c.run_id
ORDER BY c.chip_id, c.arm, c.concurrency, c.round, q.request_id"""

ROUND_VALUES_SQL = RUN_METRICS + """
SELECT chip_id, arm, concurrency, round, value FROM long
WHERE metric = $metric
ORDER BY chip_id, arm, concurrency, round"""

DRAFTED_BY_WIDTH_SQL = "WITH " + CHOSEN_RUNS + """
SELECT c.chip_id, c.arm, p.width,
       count(*) AS passes,
       count(*) FILTER (WHERE p.drafted > 0) AS drafted_passes,
       count(*) FILTER (WHERE p.drafted > 0) / count(*) AS drafted_share
FROM passes p JOIN chosen c ON p.run_id = c.run_id
GROUP BY c.chip_id, c.arm, p.width
ORDER BY c.chip_id, c.arm, p.width"""

DRAFTED_BY_WIDTH_RUNS_SQL = "WITH " + CHOSEN_RUNS + """
SELECT c.chip_id, c.arm, p.width, c.run_id,
       count(*) AS passes, count(*) FILTER (WHERE p.drafted > 0) AS drafted_passes
FROM passes p JOIN chosen c ON p.run_id = c.run_id
GROUP BY c.chip_id, c.arm, p.width, c.run_id
ORDER BY c.chip_id, c.arm, p.width, c.run_id"""

# Which cells the experiment has, from runs of any status: a cell whose runs all failed
# is a gap, not silently absent.
LAYOUT_SQL = """
SELECT DISTINCT chip_id, arm, concurrency FROM runs
WHERE experiment = $experiment AND quick = $quick
ORDER BY chip_id, arm, concurrency"""

CHIPS_SQL = """
SELECT DISTINCT ch.chip_id, ch.name, ch.device,
       coalesce(json_extract_string(ch.fingerprint, '$.blas'), 'unknown') AS blas
FROM chips ch JOIN runs r ON r.chip_id = ch.chip_id
WHERE r.experiment = $experiment AND r.quick = $quick
ORDER BY ch.name, ch.chip_id"""

PROVENANCE_SQL = "WITH " + CHOSEN_RUNS + """
SELECT 'code_version' AS what, code_version AS value FROM chosen
UNION SELECT 'model_sha256', model_sha256 FROM chosen
UNION SELECT 'declaration_sha256', declaration_sha256 FROM chosen
UNION SELECT 'run_date', strftime(started_at, '%Y-%m-%d') FROM chosen
ORDER BY what, value"""

# The machine's load while each chip measured (columns added by a store migration; a
# database from before it has none, and pages then say nothing about load).
LOAD_SQL = "WITH " + CHOSEN_RUNS + """
SELECT c.chip_id, count(*) AS runs,
       min(least(c.loadavg_start, c.loadavg_end)) AS load_min,
       max(greatest(c.loadavg_start, c.loadavg_end)) AS load_max,
       max(c.steal_fraction) AS steal_max,
       max(c.busy_fraction_other) AS busy_other_max,
       count(*) FILTER (WHERE c.loadavg_start IS NOT NULL) AS with_load
FROM chosen c
GROUP BY c.chip_id ORDER BY c.chip_id"""

BUSY_CELLS_SQL = "WITH " + CHOSEN_RUNS + """
SELECT DISTINCT c.chip_id, c.arm, c.concurrency
FROM chosen c JOIN chips ch USING (chip_id)
WHERE greatest(c.loadavg_start, c.loadavg_end) > ch.cores + $busy_load_margin
   OR c.steal_fraction > $busy_steal OR c.busy_fraction_other > $busy_other
ORDER BY 1, 2, 3"""
# A cell is marked busy when, in any of its rounds, the load average exceeded the cores
# by more than one run's own threads could explain, or another tenant took CPU time.
BUSY = {"busy_load_margin": 1.0, "busy_steal": 0.05, "busy_other": 0.25}

# What `make report` needs to decide whether to measure: cells of one declaration's
# complete full runs by chip, and the experiment's run count and newest finish.
DECLARATION_CELLS_SQL = """
SELECT ch.name, r.chip_id, r.arm, r.concurrency, r.round FROM runs r JOIN chips ch USING (chip_id)
WHERE r.experiment = $experiment AND r.declaration_sha256 = $declaration
  AND r.status = 'complete' AND NOT r.quick
ORDER BY 1, 2, 3, 4, 5"""

RUN_SUMMARY_SQL = """
SELECT count(*), max(finished_at) FROM runs
WHERE ($experiment::VARCHAR IS NULL OR experiment = $experiment) AND status = 'complete'
  AND ($experiment::VARCHAR IS NULL OR NOT quick)"""

# Each complete pass over an experiment's cells starts with round 0 of the lowest
# concurrency of its first arm: those start times separate repetitions (the A/A check).
REPETITIONS_SQL = """
SELECT started_at FROM runs
WHERE experiment = $experiment AND status = 'complete' AND NOT quick AND round = 0 AND arm = $arm
  AND concurrency = (SELECT min(concurrency) FROM runs WHERE experiment = $experiment)
ORDER BY started_at"""

# Each arm's runtime (runs from before the runtime column are our engine's) and whether
# its runs have per-pass rows: a runtime without them leaves the per-pass metrics NULL.
ARM_RUNTIMES_SQL = "WITH " + CHOSEN_RUNS + """
SELECT c.arm, string_agg(DISTINCT coalesce(c.runtime, 'bothrows'), ', ' ORDER BY coalesce(c.runtime, 'bothrows')),
       bool_or(EXISTS (SELECT 1 FROM passes p WHERE p.run_id = c.run_id))
FROM chosen c GROUP BY c.arm ORDER BY c.arm"""

REMEASURED_SQL = """
SELECT r.run_id, r.chip_id, r.arm, r.concurrency, r.round,
       strftime(r.started_at, '%Y-%m-%d') AS day, r.code_version
FROM runs r
WHERE r.experiment = $experiment AND r.status = 'complete' AND r.quick = $quick
  AND r.started_at >= $since::TIMESTAMP
ORDER BY r.started_at, r.run_id"""

RAW_SQL = {
    "runs": "WITH " + CHOSEN_RUNS + "\nSELECT * FROM chosen ORDER BY chip_id, arm, concurrency, round, run_id",
    "requests": "WITH " + CHOSEN_RUNS + "\nSELECT q.* FROM requests q JOIN chosen c ON q.run_id = c.run_id "
                "ORDER BY c.chip_id, c.arm, c.concurrency, c.round, q.run_id, q.request_id",
    "passes": "WITH " + CHOSEN_RUNS + "\nSELECT p.* FROM passes p JOIN chosen c ON p.run_id = c.run_id "
              "ORDER BY c.chip_id, c.arm, c.concurrency, c.round, p.run_id, p.pass_index",
}


def sql_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def inline_sql(sql: str, params: dict) -> str:
    """The query with its parameters written in, so a reader can paste it into duckdb."""
    for name in sorted(params, key=len, reverse=True):
        sql = sql.replace(f"${name}", sql_literal(params[name]))
    return sql.strip() + ";\n"


class Reader:
    """A read-only connection to one bothrows database."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise QueryError(f"database {self.path} does not exist; run `runner run <experiment>` first")
        try:
            self.con = duckdb.connect(str(self.path), read_only=True)
            self.con.execute("SELECT count(*) FROM runs").fetchall()
        except duckdb.Error as e:
            raise QueryError(f"database {self.path} cannot be read: {e}") from None

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
        rows = self._rows("SELECT DISTINCT quick FROM runs WHERE experiment = $experiment "
                          "AND status = 'complete' ORDER BY quick", {"experiment": experiment})
        flags = [bool(r[0]) for r in rows]
        return None if not flags else (False if False in flags else True)

    def cells(self, experiment: str, quick: bool, as_of: datetime | None = None) -> list[CellStat]:
        p = {"experiment": experiment, "quick": quick, "as_of": as_of}
        return [CellStat(c, a, int(k), m, mean, lo, hi, int(n))
                for c, a, k, m, mean, lo, hi, n in self._rows(CELLS_SQL, p)]

    def round_values(self, experiment: str, quick: bool, metric: str,
                     as_of: datetime | None = None) -> list[tuple[str, str, int, int, float]]:
        p = {"experiment": experiment, "quick": quick, "as_of": as_of, "metric": metric}
        return [(c, a, int(k), int(r), v) for c, a, k, r, v in self._rows(ROUND_VALUES_SQL, p)]

    def run_values(self, experiment: str, quick: bool,
                   as_of: datetime | None = None) -> dict[tuple, dict[str, float | None]]:
        """(chip, arm, concurrency, round) -> {metric: the run's value}."""
        p = {"experiment": experiment, "quick": quick, "as_of": as_of}
        return {(c, a, int(k), int(r)): dict(zip(METRICS, vals))
                for c, a, k, r, *vals in self._rows(RUN_VALUES_SQL, p)}

    def request_values(self, experiment: str, quick: bool, as_of: datetime | None = None) -> dict:
        """(chip, arm, concurrency, round) -> {column: (request ids, values)} as numpy
        arrays, for the bootstrap (`intervals.py`); nulls are NaN."""
        p = {"experiment": experiment, "quick": quick, "as_of": as_of}
        used = {k: v for k, v in p.items() if f"${k}" in REQUEST_VALUES_SQL}
        t = self.con.sql(REQUEST_VALUES_SQL, params=used).to_arrow_table()
        if t.num_rows == 0:
            return {}
        cols = {n: t.column(n).to_numpy(zero_copy_only=False) for n in t.column_names}
        key_cols = [cols["chip_id"], cols["arm"], cols["concurrency"], cols["round"]]
        change = np.zeros(t.num_rows - 1, dtype=bool)
        for col in key_cols:  # rows are sorted by key: each run is one block
            change |= col[1:] != col[:-1]
        starts = np.concatenate([[0], np.nonzero(change)[0] + 1])
        ends = np.concatenate([starts[1:], [t.num_rows]])
        out = {}
        for a, b in zip(starts.tolist(), ends.tolist()):
            k = (str(key_cols[0][a]), str(key_cols[1][a]), int(key_cols[2][a]), int(key_cols[3][a]))
            ids = cols["request_id"][a:b].astype(np.int64)
            out[k] = {c: (ids, np.asarray(cols[c][a:b], dtype=float))
                      for c in ("prefill_tps", "decode_tps", "ttft_ms", "tpot_ms")}
        return out

    def drafted_by_width(self, experiment: str, quick: bool,
                         as_of: datetime | None = None) -> list[tuple[str, str, int, int, int, float]]:
        p = {"experiment": experiment, "quick": quick, "as_of": as_of}
        return [(c, a, int(w), int(n), int(d), float(s))
                for c, a, w, n, d, s in self._rows(DRAFTED_BY_WIDTH_SQL, p)]

    def drafted_by_width_runs(self, experiment: str, quick: bool) -> dict[tuple, tuple[list, list]]:
        """(chip, arm, width) -> (passes per run, drafted passes per run), for intervals."""
        out: dict[tuple, tuple[list, list]] = {}
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        for c, a, w, _, n, d in self._rows(DRAFTED_BY_WIDTH_RUNS_SQL, p):
            n_list, d_list = out.setdefault((c, a, int(w)), ([], []))
            n_list.append(int(n))
            d_list.append(int(d))
        return out

    def layout(self, experiment: str, quick: bool) -> list[tuple[str, str, int]]:
        return [(c, a, int(k)) for c, a, k in
                self._rows(LAYOUT_SQL, {"experiment": experiment, "quick": quick})]

    def chips(self, experiment: str, quick: bool) -> list[Chip]:
        return [Chip(*r) for r in self._rows(CHIPS_SQL, {"experiment": experiment, "quick": quick})]

    def provenance(self, experiment: str, quick: bool) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for what, value in self._rows(PROVENANCE_SQL, {"experiment": experiment, "quick": quick,
                                                       "as_of": None}):
            out.setdefault(what, []).append(value)
        return out

    def declaration_cells(self, experiment: str, declaration: str) -> dict[tuple[str, str], set]:
        """(chip name, chip id) -> {(arm, concurrency, round)} of complete full runs."""
        out: dict[tuple[str, str], set] = {}
        for name, chip_id, arm, conc, rnd in self._rows(
                DECLARATION_CELLS_SQL, {"experiment": experiment, "declaration": declaration}):
            out.setdefault((name, chip_id), set()).add((arm, int(conc), int(rnd)))
        return out

    def run_summary(self, experiment: str | None = None) -> tuple[int, datetime | None]:
        """Complete runs (of one experiment, full ones only; or of all) and the newest finish."""
        n, newest = self._rows(RUN_SUMMARY_SQL, {"experiment": experiment})[0]
        return int(n), newest

    def repetition_starts(self, experiment: str, arm: str) -> list[datetime]:
        return [r[0] for r in self._rows(REPETITIONS_SQL, {"experiment": experiment, "arm": arm})]

    def _has_load(self) -> bool:
        cols = {r[0] for r in self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'").fetchall()}
        return {"loadavg_start", "loadavg_end", "steal_fraction", "busy_fraction_other"} <= cols

    def load_by_chip(self, experiment: str, quick: bool) -> dict[str, dict]:
        """chip_id -> the load figures of its runs (empty for databases without them)."""
        if not self._has_load():
            return {}
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        keys = ("runs", "load_min", "load_max", "steal_max", "busy_other_max", "with_load")
        return {r[0]: dict(zip(keys, r[1:])) for r in self._rows(LOAD_SQL, p)}

    def busy_cells(self, experiment: str, quick: bool) -> set[tuple[str, str, int]]:
        if not self._has_load():
            return set()
        p = {"experiment": experiment, "quick": quick, "as_of": None, **BUSY}
        return {(c, a, int(k)) for c, a, k in self._rows(BUSY_CELLS_SQL, p)}

    def arm_runtimes(self, experiment: str, quick: bool) -> dict[str, tuple[str, bool]]:
        """arm -> (its runtime, whether its runs have per-pass rows)."""
        cols = {r[0] for r in self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'").fetchall()}
        sql = ARM_RUNTIMES_SQL if "runtime" in cols else ARM_RUNTIMES_SQL.replace("c.runtime", "NULL")
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        return {a: (rt, bool(has)) for a, rt, has in self._rows(sql, p)}

    def remeasured(self, experiment: str, quick: bool, since: datetime) -> list[tuple]:
        """Complete runs started at or after `since`
        (run_id, chip_id, arm, concurrency, round, day, code_version)."""
        return self._rows(REMEASURED_SQL, {"experiment": experiment, "quick": quick, "since": since})

    def raw_tables(self, experiment: str, quick: bool) -> dict[str, pa.Table]:
        p = {"experiment": experiment, "quick": quick, "as_of": None}
        used = lambda sql: {k: v for k, v in p.items() if f"${k}" in sql}  # noqa: E731
        return {name: self.con.sql(sql, params=used(sql)).to_arrow_table()
                for name, sql in RAW_SQL.items()}
