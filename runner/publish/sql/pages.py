"""The SQL behind every page question, by name.

- The runs a page uses, per-run and per-request values, per-pass summaries, layout and
  provenance; each per-request figure's expression is written once (`PREFILL_TPS`,
  `DECODE_TPS`, `TTFT_MS`, `TPOT_MS`).
- `queries.Reader` runs them; a block's "SQL behind this table" download is one of them
  with its parameters written in (`inline_sql`).
- Text only: nothing here connects to a database. The pass-cost model's SQL is
  `sql_passes.py`'s, a rate sweep's `sql_sweeps.py`'s, the judging views' (earliest
  runs, pins, machine probes) `sql_views.py`'s, accepted length and acceptance by
  position `sql_drafts.py`'s, the layout, provenance, machine load and re-measurements'
  `sql_provenance.py`'s.
"""

from __future__ import annotations

from runner.publish.metrics import METRICS
from runner.publish.sql.drafts import DRAFTING


def one_declaration(order: str) -> str:
    """A QUALIFY condition keeping a cell's runs of one declaration: the declaration of the
    run `order` puts first in the cell. An edited declaration measures something else, so
    its rounds supersede a cell's earlier version's rounds as a whole, never mixing with
    those it did not re-measure (in one interval, rounds of two designs)."""
    return (
        "declaration_sha256 = first_value(declaration_sha256) OVER "
        f"(PARTITION BY chip_id, arm, concurrency, rate ORDER BY {order})"
    )


NEWEST_FIRST = "started_at DESC, run_id DESC"
# The runs a page uses: complete ones of the chosen quickness, measured before $as_of
# when given, each cell's of its newest run's declaration, and for a cell measured more
# than once in a round, the latest (a re-measurement supersedes, it never mixes with the
# older run).
CHOSEN_RUNS = f"""
chosen AS (
    SELECT * FROM runs
    WHERE experiment = $experiment AND status = 'complete' AND quick = $quick
      AND ($as_of::TIMESTAMP IS NULL OR started_at < $as_of::TIMESTAMP)
    QUALIFY row_number() OVER (PARTITION BY chip_id, arm, concurrency, rate, round
                               ORDER BY {NEWEST_FIRST}) = 1
        AND {one_declaration(NEWEST_FIRST)}
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
