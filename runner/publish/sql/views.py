"""The SQL of judging views (`home.py`'s Cutoff): the earliest runs up to a date or a
pin's folders in place of the newest, the runs a view passed over, the folders a pin
names, and the machine probes. Text only; `queries.Reader` runs it.
"""

from __future__ import annotations

from runner.publish.sql.pages import CHOSEN_RUNS, one_declaration
from runner.publish.sql.provenance import LATER_RUN_COLUMNS

# A judging view's runs (runner.publish.sql.home.Cutoff), in place of CHOSEN_RUNS: what the
# author could have seen, not the newest. Before $as_of, each cell's earliest run started
# at or after $first_from (the post's: any time; an update section's: its day), else the
# newest before it (none before it when $fresh); a re-measurement the same day never
# displaces what was judged. With $declaration, that declaration's runs only (measuring
# until decided judges what it measures, not an edited declaration's earlier rounds).
PICKED_FIRST = """started_at >= $first_from::TIMESTAMP DESC,
                                        CASE WHEN started_at >= $first_from::TIMESTAMP
                                             THEN epoch_us(started_at) ELSE -epoch_us(started_at) END,
                                        run_id"""
PICKED_RUNS = f"""
chosen AS (
    SELECT * FROM runs
    WHERE experiment = $experiment AND status = 'complete' AND quick = $quick
      AND ($as_of::TIMESTAMP IS NULL OR started_at < $as_of::TIMESTAMP)
      AND (NOT $fresh OR started_at >= $first_from::TIMESTAMP)
      AND ($declaration::VARCHAR IS NULL OR declaration_sha256 = $declaration::VARCHAR)
    QUALIFY row_number() OVER (PARTITION BY chip_id, arm, concurrency, rate, round
                               ORDER BY {PICKED_FIRST}) = 1
        AND {one_declaration(PICKED_FIRST)}
)"""
# ... or the runs of the measurement folders a `data:` pin names (their earliest per cell).
PINNED_FIRST = "started_at, run_id"
PINNED_RUNS = f"""
chosen AS (
    SELECT * FROM runs
    WHERE experiment = $experiment AND status = 'complete' AND quick = $quick
      AND run_id IN (SELECT run_id FROM measurement_runs WHERE list_contains($data::VARCHAR[], folder))
    QUALIFY row_number() OVER (PARTITION BY chip_id, arm, concurrency, rate, round
                               ORDER BY {PINNED_FIRST}) = 1
        AND {one_declaration(PINNED_FIRST)}
)"""


def picked(sql: str, pinned: bool) -> str:
    """One of the page queries above over a judging view's runs instead of the newest."""
    return sql.replace(CHOSEN_RUNS, PINNED_RUNS if pinned else PICKED_RUNS)


# The home chip's runs a judging view passed over: measured after its earliest run and
# before its cutoff (a re-measurement the same day), shaped as REMEASURED_SQL's rows.
UNSEEN_SQL = (
    LATER_RUN_COLUMNS
    + """WHERE r.experiment = $experiment AND r.status = 'complete' AND r.quick = $quick AND r.chip_id = $chip
  AND ($as_of::TIMESTAMP IS NULL OR r.started_at < $as_of::TIMESTAMP)
  AND r.run_id NOT IN (SELECT run_id FROM chosen)
  AND r.started_at > (SELECT min(started_at) FROM chosen WHERE chip_id = $chip)
ORDER BY r.started_at, r.run_id"""
)

# The measurement folders of a view's runs on the given chips (what `runner pin` writes).
FOLDERS_OF_CHIPS_SQL = """
SELECT DISTINCT m.folder FROM chosen c JOIN measurement_runs m ON m.run_id = c.run_id
WHERE list_contains($chips::VARCHAR[], c.chip_id)
ORDER BY m.folder"""

RUNS_OF_FOLDERS_SQL = """
SELECT run_id FROM measurement_runs WHERE list_contains($folders::VARCHAR[], folder) ORDER BY run_id"""

MEASUREMENT_FOLDERS_SQL = """
SELECT DISTINCT m.folder FROM measurement_runs m JOIN runs r USING (run_id)
WHERE r.experiment = $experiment ORDER BY m.folder"""

# The machine probe (runner/experiments/probe.py) of a set of runs: medians, NULL when
# none was probed (data from before migration 5).
PROBE_FIGURES = "median(probe_prefill_gflops), median(probe_decode_gflops), median(probe_read_gbps)"
PROBE_OF_RUNS_SQL = f"SELECT {PROBE_FIGURES} FROM runs WHERE list_contains($run_ids::VARCHAR[], run_id)"
PROBE_OF_VIEW_SQL = f"\nSELECT {PROBE_FIGURES} FROM chosen WHERE chip_id = $chip"
# Each chip's (machine class's) instances in the newest data: one row per instance and
# distinct probe, NULL figures for an instance measured before the probe (sql/classes.py).
PROBES_BY_CHIP_SQL = """
SELECT chip_id, instance_id, probe_prefill_gflops, probe_decode_gflops, probe_read_gbps, count(*) AS runs,
       strftime(min(started_at), '%Y-%m-%d') AS first_day
FROM chosen
GROUP BY ALL ORDER BY chip_id, first_day, instance_id, probe_prefill_gflops NULLS FIRST"""

# The sequential designs of a view's runs per chip (runs.looks, "3,6,12"; none: fixed).
DESIGNS_SQL = """
SELECT DISTINCT chip_id, looks FROM chosen WHERE looks IS NOT NULL ORDER BY chip_id, looks"""
