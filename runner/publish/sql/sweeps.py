"""The SQL of rate sweeps and fair lengths: one rate's runs (`at_rate`), short and errored
requests, the swept rates, the declared SLO and whether each request met it (an errored
one did not). Text only;
`queries.Reader` runs it.
"""

from __future__ import annotations

from runner.publish.sql.pages import CHOSEN_RUNS, NEWEST_FIRST, TPOT_MS, TTFT_MS, one_declaration


def at_rate(sql: str) -> str:
    """The query over one rate of a rate sweep ($rate): its chosen runs are that rate's."""
    where = "AND status = 'complete' AND quick = $quick"
    assert where in sql, "at_rate: the query has no chosen runs"
    return sql.replace(where, where + " AND rate = $rate")


# Cells holding requests that came back with fewer output tokens than they were asked
# for (requests.asked_tokens, from schema version 6; NULL before it: not counted) or that
# errored (requests.error, from schema version 8).
SHORT_CELLS_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.chip_id, c.arm, c.concurrency,
       count(*) FILTER (WHERE q.output_tokens < q.asked_tokens AND q.error IS NULL) AS short,
       count(*) AS requests, count(*) FILTER (WHERE q.error IS NOT NULL) AS errored
FROM requests q JOIN chosen c ON q.run_id = c.run_id
GROUP BY ALL HAVING short > 0 OR errored > 0
ORDER BY 1, 2, 3"""
)

# The share of the CPU taken from each round of each in-process arm: by other processes,
# plus the hypervisor's steal (a server runtime's own work runs in another process, so its
# share says nothing about contention).
CONTENTION_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.chip_id, c.arm, c.concurrency, c.round,
       avg(c.busy_fraction_other + coalesce(c.steal_fraction, 0))
FROM chosen c
WHERE c.busy_fraction_other IS NOT NULL AND coalesce(c.runtime, 'bothrows') IN ('bothrows', 'mlx-lm')
GROUP BY ALL ORDER BY 1, 2, 3, 4"""
)

SWEEP_RATES_SQL = """
SELECT DISTINCT rate FROM runs
WHERE experiment = $experiment AND status = 'complete' AND quick = $quick AND rate IS NOT NULL
ORDER BY rate"""

# The SLO an experiment's runs declared (the largest, should declarations have differed).
SLO_SQL = """
SELECT max(slo_ttft_ms), max(slo_tpot_ms) FROM runs
WHERE experiment = $experiment AND status = 'complete' AND quick = $quick"""

# A rate sweep's requests and whether each met its run's declared SLO (NULL: none declared),
# by chip, arm, concurrency, rate and round: the newest complete run of each such cell.
SLO_MET_SQL = (
    """
WITH chosen AS (
    SELECT * FROM runs
    WHERE experiment = $experiment AND status = 'complete' AND quick = $quick AND rate IS NOT NULL
      AND ($as_of::TIMESTAMP IS NULL OR started_at < $as_of::TIMESTAMP)
    QUALIFY row_number() OVER (PARTITION BY chip_id, arm, concurrency, rate, round
                               ORDER BY """
    + NEWEST_FIRST
    + """) = 1
        AND """
    + one_declaration(NEWEST_FIRST)
    + """
)
SELECT c.chip_id, c.arm, c.concurrency, c.rate, c.round, q.request_id,
       CASE WHEN c.slo_ttft_ms IS NOT NULL OR c.slo_tpot_ms IS NOT NULL THEN
           q.error IS NULL AND ("""
    + TTFT_MS
    + """ <= coalesce(c.slo_ttft_ms, 'infinity'::DOUBLE)
            AND coalesce("""
    + TPOT_MS
    + """, 0) <= coalesce(c.slo_tpot_ms, 'infinity'::DOUBLE)) END AS met
FROM requests q JOIN chosen c ON q.run_id = c.run_id
ORDER BY 1, 2, 3, 4, 5, 6"""
)
