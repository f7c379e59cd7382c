"""The SQL of an experiment's layout and provenance: which cells and chips it has, what
ran each run besides our code, the machine's load and busy cells, declaration cells for
`make report`, repetitions (the A/A check), each arm's runtime and re-measurements.

Text only, run by `queries.Reader`; the runs a page uses (`CHOSEN_RUNS`) are `sql.py`'s.
"""

from __future__ import annotations

from runner.publish.sql.pages import CHOSEN_RUNS

# Which cells the experiment has, from runs of any status: a cell whose runs all failed
# is a gap, not silently absent.
LAYOUT_SQL = """
SELECT DISTINCT chip_id, arm, concurrency FROM runs
WHERE experiment = $experiment AND quick = $quick
ORDER BY chip_id, arm, concurrency"""

CHIPS_SQL = """
SELECT DISTINCT ch.chip_id, ch.name, ch.device,
       coalesce(json_extract_string(ch.fingerprint, '$.blas'), 'unknown') AS blas, ch.aliases
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
       count(*) FILTER (WHERE c.loadavg_start IS NOT NULL) AS with_load,
       count(c.contention_reruns) AS ruled,
       coalesce(sum(c.contention_reruns), 0) AS reruns,
       count(*) FILTER (WHERE c.contention_reruns > 0) AS rerun_cells
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

# Each arm's runtime and full knobs over its chosen runs: two arms measured with one and
# the same setup are an A/A pair (aa.py), whatever their names.
ARM_SETUPS_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.arm, coalesce(c.runtime, 'bothrows') AS runtime, c.knobs
FROM chosen c GROUP BY ALL ORDER BY c.arm, runtime, c.knobs"""
)

# A later run as a dated note reads it (REMEASURED_SQL here, sql_views.UNSEEN_SQL).
LATER_RUN_COLUMNS = (
    """
SELECT r.run_id, r.chip_id, r.arm, r.concurrency, r.round,
       strftime(r.started_at, '%Y-%m-%d') AS day, r.code_version, """
    + RUNTIME_VERSIONS
    + """ AS runtime_versions,
       strftime(r.started_at, '%Y-%m-%dT%H:%M:%S.%f') AS started
FROM runs r
"""
)

REMEASURED_SQL = (
    LATER_RUN_COLUMNS
    + """WHERE r.experiment = $experiment AND r.status = 'complete' AND r.quick = $quick
  AND r.started_at >= $since::TIMESTAMP
ORDER BY r.started_at, r.run_id"""
)
