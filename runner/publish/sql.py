"""The SQL behind every page question, by name.

- The runs a page uses, per-run and per-request values, per-pass summaries, layout and
  provenance; each per-request figure's expression is written once (`PREFILL_TPS`,
  `DECODE_TPS`, `TTFT_MS`, `TPOT_MS`).
- `queries.Reader` runs them; a block's "SQL behind this table" download is one of them
  with its parameters written in (`inline_sql`).
- Text only: nothing here connects to a database. The pass-cost model's SQL is
  `sql_passes.py`'s, a rate sweep's `sql_sweeps.py`'s, the judging views' (earliest
  runs, pins, machine probes) `sql_views.py`'s, accepted length and acceptance by
  position `sql_drafts.py`'s.
"""

from __future__ import annotations

from runner.publish.metrics import METRICS
from runner.publish.sql_drafts import DRAFTING

# The runs a page uses: complete ones of the chosen quickness, measured before $as_of
# when given, and for a cell measured more than once in a round, the latest (a
# re-measurement supersedes, it never mixes with the older run).
CHOSEN_RUNS = """
chosen AS (
    SELECT * FROM runs
    WHERE experiment = $experiment AND status = 'complete' AND quick = $quick
      AND ($as_of::TIMESTAMP IS NULL OR started_at < $as_of::TIMESTAMP)
    QUALIFY row_number() OVER (PARTITION BY chip_id, arm, concurrency, rate, round
                               ORDER BY started_at DESC, run_id DESC) = 1
)"""


# $label (NULL: every request) keeps only the requests a scripted workload labelled so:
# the figures of "the short requests" beside the long one.
LABELLED = "($label::VARCHAR IS NULL OR q.label = $label)"
# Each per-request figure, written once: the runs' aggregates and the bootstrap's
# per-request values (REQUEST_VALUES_SQL) read the same expression.
PREFILL_TPS = "q.prompt_tokens * 1e9 / nullif(q.first_token_ns - q.arrival_ns, 0)"
DECODE_TPS = """CASE WHEN q.output_tokens > 1 THEN (q.output_tokens - 1) * 1e9
                 / nullif(q.done_ns - q.first_token_ns, 0) END"""
TTFT_MS = "(q.first_token_ns - q.arrival_ns) / 1e6"
# end-to-end latency: arrival to last token (none for an errored request, requests.error)
E2EL_MS = "CASE WHEN q.error IS NULL THEN (q.done_ns - q.arrival_ns) / 1e6 END"
TPOT_MS = (
    "CASE WHEN q.output_tokens > 1 THEN (q.done_ns - q.first_token_ns) / 1e6 / (q.output_tokens - 1) END"
)

# Inter-token gaps of every labelled request: a token's time minus the previous token's.
GAPS = (
    """
gap AS (
    SELECT c.chip_id, c.arm, c.concurrency, c.round, t.run_id, t.request_id, t.token_index, t.t_ns,
           (t.t_ns - lag(t.t_ns) OVER (PARTITION BY t.run_id, t.request_id ORDER BY t.token_index)) / 1e6
               AS gap_ms
    FROM tokens t JOIN chosen c ON t.run_id = c.run_id
    JOIN requests q ON q.run_id = t.run_id AND q.request_id = t.request_id
    WHERE """
    + LABELLED
    + """
)"""
)

RUN_METRICS = (
    "WITH "
    + CHOSEN_RUNS
    + ""","""
    + GAPS
    + """,
tok AS (
    SELECT run_id,
        quantile_cont(gap_ms, 0.5) AS itl_p50_ms, quantile_cont(gap_ms, 0.9) AS itl_p90_ms,
        quantile_cont(gap_ms, 0.99) AS itl_p99_ms, max(gap_ms) AS stall_max_ms, avg(gap_ms) AS itl_mean_ms
    FROM gap WHERE gap_ms IS NOT NULL
    GROUP BY run_id
),
req AS (
    SELECT q.run_id,
        avg("""
    + PREFILL_TPS
    + """) AS prefill_tps,
        avg("""
    + DECODE_TPS
    + """) AS decode_tps,
        sum(q.output_tokens) * 1e9 / nullif(max(q.done_ns) - min(q.arrival_ns), 0) AS aggregate_tps,
        """
    + ",\n        ".join(
        f"quantile_cont({expr}, {q}) AS {name}_p{p}_ms"
        for name, expr in (("ttft", TTFT_MS), ("tpot", TPOT_MS))
        for q, p in ((0.5, 50), (0.9, 90))
    )
    + """,
        """
    + ",\n        ".join(
        f"quantile_cont({expr}, 0.99) AS {name}_p99_ms"
        for name, expr in (("ttft", TTFT_MS), ("tpot", TPOT_MS))
    )
    + """,
        -- requests meeting both declared limits, per second of the cell (NULL without an SLO)
        CASE WHEN any_value(c.slo_ttft_ms) IS NOT NULL OR any_value(c.slo_tpot_ms) IS NOT NULL THEN
            count(*) FILTER (WHERE """
    + TTFT_MS
    + """ <= coalesce(c.slo_ttft_ms, 'infinity'::DOUBLE)
                             AND coalesce("""
    + TPOT_MS
    + """, 0) <= coalesce(c.slo_tpot_ms, 'infinity'::DOUBLE))
            * 1e9 / nullif(max(q.done_ns) - min(q.arrival_ns), 0) END AS goodput_rps,
        avg("""
    + TTFT_MS
    + """) AS ttft_mean_ms,
        avg("""
    + TPOT_MS
    + """) AS tpot_mean_ms,
        avg("""
    + E2EL_MS
    + """) AS e2el_mean_ms,
        """
    + ",\n        ".join(
        f"quantile_cont({E2EL_MS}, {q}) AS e2el_p{round(q * 100)}_ms" for q in (0.5, 0.9, 0.99)
    )
    + """,
        -- completed requests: errored ones (requests.error) are not
        count(*) FILTER (WHERE q.error IS NULL) * 1e9 / nullif(max(q.done_ns) - min(q.arrival_ns), 0)
            AS request_rps,
        count(*) FILTER (WHERE q.error IS NULL) AS completed,
        -- fewer output tokens than asked (asked_tokens NULL before schema 6: not counted)
        CASE WHEN count(q.asked_tokens) > 0 THEN count(*) FILTER (WHERE q.output_tokens < q.asked_tokens
                                                                  AND q.error IS NULL)
             END AS short_requests
    FROM requests q JOIN chosen c ON q.run_id = c.run_id
    WHERE """
    + LABELLED
    + """
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
),"""
    + DRAFTING
    + """,
per_run AS (
    SELECT c.chip_id, c.arm, c.concurrency, c.round, c.run_id, """
    + ",\n        ".join(f"CAST({m} AS DOUBLE) AS {m}" for m in METRICS)
    + """
    FROM chosen c LEFT JOIN req USING (run_id) LEFT JOIN pas USING (run_id) LEFT JOIN tok USING (run_id)
        LEFT JOIN drafting USING (run_id)
),
long AS (
    UNPIVOT per_run ON """
    + ", ".join(METRICS)
    + """ INTO NAME metric VALUE value
)"""
)

CELLS_SQL = (
    RUN_METRICS
    + """
SELECT chip_id, arm, concurrency, metric,
       avg(value) AS mean, min(value) AS lo, max(value) AS hi, count(*) AS n_rounds
FROM long
GROUP BY chip_id, arm, concurrency, metric
ORDER BY chip_id, arm, concurrency, metric"""
)

# Per-run values (the cells' inputs) and per-request values (the bootstrap's inputs).
RUN_VALUES_SQL = (
    RUN_METRICS
    + """
SELECT chip_id, arm, concurrency, round, """
    + ", ".join(METRICS)
    + """ FROM per_run
ORDER BY chip_id, arm, concurrency, round"""
)

REQUEST_VALUES_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.chip_id, c.arm, c.concurrency, c.round, q.request_id,
       """
    + ",\n       ".join(
        f"CAST({expr} AS DOUBLE) AS {name}"
        for name, expr in (
            ("prefill_tps", PREFILL_TPS),
            ("decode_tps", DECODE_TPS),
            ("ttft_ms", TTFT_MS),
            ("tpot_ms", TPOT_MS),
            ("e2el_ms", E2EL_MS),
        )
    )
    + """
FROM requests q JOIN chosen c ON q.run_id = c.run_id
WHERE """
    + LABELLED
    + """
ORDER BY c.chip_id, c.arm, c.concurrency, c.round, q.request_id"""
)

# Every inter-token gap, by run and request: the bootstrap moves a request's gaps with it.
GAP_VALUES_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + ""","""
    + GAPS
    + """
SELECT chip_id, arm, concurrency, round, request_id, CAST(gap_ms AS DOUBLE) AS gap_ms FROM gap
WHERE gap_ms IS NOT NULL
ORDER BY chip_id, arm, concurrency, round, request_id, gap_ms"""
)

# One run's tokens for the timeline chart: each token's time and the gap before it.
TIMELINE_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + ""","""
    + GAPS
    + """
SELECT g.arm, g.request_id, coalesce(q.label, '') AS label, g.t_ns / 1e9 AS t_s, g.gap_ms
FROM gap g JOIN requests q ON q.run_id = g.run_id AND q.request_id = g.request_id
WHERE g.chip_id = $chip AND g.concurrency = $concurrency AND g.round = $round AND g.gap_ms IS NOT NULL
ORDER BY g.arm, g.request_id, g.token_index"""
)

DRAFTED_BY_WIDTH_RUNS_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.chip_id, c.arm, p.width, c.run_id,
       count(*) AS passes, count(*) FILTER (WHERE p.drafted > 0) AS drafted_passes
FROM passes p JOIN chosen c ON p.run_id = c.run_id
GROUP BY c.chip_id, c.arm, p.width, c.run_id
ORDER BY c.chip_id, c.arm, p.width, c.run_id"""
)

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

# What ran a run besides our code: the runtime's package and the server's own word
# (schema version 6; empty for our engine's runs and for runs from before it).
RUNTIME_VERSIONS = "concat_ws(', ', r.runtime_version, 'server ' || r.server_version)"

PROVENANCE_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT 'code_version' AS what, code_version AS value FROM chosen
UNION SELECT 'model_sha256', model_sha256 FROM chosen
UNION SELECT 'declaration_sha256', declaration_sha256 FROM chosen
UNION SELECT 'run_date', strftime(started_at, '%Y-%m-%d') FROM chosen
UNION SELECT 'runtime_version', arm || ': ' || """
    + RUNTIME_VERSIONS.replace("r.", "")
    + """ FROM chosen WHERE runtime_version IS NOT NULL OR server_version IS NOT NULL
ORDER BY what, value"""
)

# The machine's load while each chip measured (columns added by a store migration; a
# database from before it has none, and pages then say nothing about load).
LOAD_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.chip_id, count(*) AS runs,
       min(least(c.loadavg_start, c.loadavg_end)) AS load_min,
       max(greatest(c.loadavg_start, c.loadavg_end)) AS load_max,
       max(c.steal_fraction) AS steal_max,
       max(c.busy_fraction_other) AS busy_other_max,
       count(*) FILTER (WHERE c.loadavg_start IS NOT NULL) AS with_load
FROM chosen c
GROUP BY c.chip_id ORDER BY c.chip_id"""
)

BUSY_CELLS_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT DISTINCT c.chip_id, c.arm, c.concurrency
FROM chosen c JOIN chips ch USING (chip_id)
WHERE greatest(c.loadavg_start, c.loadavg_end) > ch.cores + $busy_load_margin
   OR c.steal_fraction > $busy_steal OR c.busy_fraction_other > $busy_other
ORDER BY 1, 2, 3"""
)
# A cell is marked busy when, in any of its rounds, the load average exceeded the cores
# by more than one run's own threads could explain, or another tenant took CPU time.
BUSY = {"busy_load_margin": 1.0, "busy_steal": 0.05, "busy_other": 0.25}

# What `make report` needs to decide whether to measure: cells of one declaration's
# complete full runs by chip, and the experiment's run count and newest finish.
DECLARATION_CELLS_SQL = """
SELECT ch.name, r.chip_id, r.arm, r.concurrency, r.round, r.rate FROM runs r JOIN chips ch USING (chip_id)
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
ARM_RUNTIMES_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.arm,
       string_agg(DISTINCT coalesce(c.runtime, 'bothrows'), ', ' ORDER BY coalesce(c.runtime, 'bothrows')),
       bool_or(EXISTS (SELECT 1 FROM passes p WHERE p.run_id = c.run_id))
FROM chosen c GROUP BY c.arm ORDER BY c.arm"""
)

REMEASURED_SQL = (
    """
SELECT r.run_id, r.chip_id, r.arm, r.concurrency, r.round,
       strftime(r.started_at, '%Y-%m-%d') AS day, r.code_version, """
    + RUNTIME_VERSIONS
    + """ AS runtime_versions
FROM runs r
WHERE r.experiment = $experiment AND r.status = 'complete' AND r.quick = $quick
  AND r.started_at >= $since::TIMESTAMP
ORDER BY r.started_at, r.run_id"""
)

RAW_SQL = {
    "runs": "WITH "
    + CHOSEN_RUNS
    + "\nSELECT * FROM chosen ORDER BY chip_id, arm, concurrency, round, run_id",
    "requests": "WITH " + CHOSEN_RUNS + "\nSELECT q.* FROM requests q JOIN chosen c ON q.run_id = c.run_id "
    "ORDER BY c.chip_id, c.arm, c.concurrency, c.round, q.run_id, q.request_id",
    "passes": "WITH " + CHOSEN_RUNS + "\nSELECT p.* FROM passes p JOIN chosen c ON p.run_id = c.run_id "
    "ORDER BY c.chip_id, c.arm, c.concurrency, c.round, p.run_id, p.pass_index",
    "tokens": "WITH " + CHOSEN_RUNS + "\nSELECT t.* FROM tokens t JOIN chosen c ON t.run_id = c.run_id "
    "ORDER BY c.chip_id, c.arm, c.concurrency, c.round, t.run_id, t.request_id, t.token_index",
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
