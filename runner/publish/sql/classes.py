"""Pages see machine classes as their chips: the reader's connection shadows `runs` and
`chips` with views keyed by class (store/machine_class.py says what a class is).

- `runs`: every stored run with `chip_id` its machine class's id, and `round` a *block*:
  the instance's index among the class's instances that measured the experiment with the
  same declaration and code version (in order of their first run, then chip id) times
  BLOCK_STRIDE, plus its round. Instances pool only within one declaration and code
  version, a measurement of the same thing; a later code version's blocks supersede an
  earlier one's as a re-measured round always has (the newest run of a cell and block),
  and a cell's blocks all come from one declaration (`pages.one_declaration`). A gain is paired
  within a round, so each (instance, round) is one block of the t interval over per-block
  log ratios (`stats/intervals.py` is unchanged: it sees more rounds), and every page
  query groups by class without knowing instances exist. The first instance keeps its
  round numbers, so a class of one instance reads exactly as its chip did. The raw
  `chip_id` and `round` stay as `instance_id` and `instance_round`, last.
- Why blocks, not a two-level model: an instance's speed multiplies both arms of its
  rounds (two "same chip" Xeon VMs here measured prefill-sized products 2.07x apart), and
  a gain paired within a block cancels it, so the pooled interval covers the class's gain
  as one instance's covers its own (tests/test_pooled_coverage.py: 94.7% to 95.6% at 1 to
  3 instances). It assumes instances do not change which arm wins: with a 2% instance x
  arm interaction it covers 88% to 92%, with 5% 68% to 81%. A t interval over instances'
  mean ratios would be honest there, but has no interval on one instance and t(1) = 12.7
  on two. Absolute figures (tok/s) are not comparisons: pooled, their interval covers
  the class's mean 26% to 63% of the time, so pages show them per instance.
- `chips`: one row per class, its id and label in `chip_id` and `name`; the instances'
  differing fields joined (their OS builds, exact memory) so nothing is hidden.

Created once per connection by `reader.Reader`; text only here. The downloads' SQL reads
these same names: `VIEWS_SQL` is shipped beside it so it runs on a raw database too.
"""

from __future__ import annotations

BLOCK_STRIDE = 1000  # a round number past it is a later instance's: rounds are fewer than this

_RUNS = """
CREATE OR REPLACE TEMP VIEW runs AS
WITH stored AS (
    SELECT r.*, ch.class_id,
           min(r.started_at) OVER (PARTITION BY r.experiment, r.chip_id) AS instance_first
    FROM {db}.main.runs r JOIN {db}.main.chips ch USING (chip_id)
), indexed AS (
    SELECT *, dense_rank() OVER (PARTITION BY experiment, class_id, declaration_sha256, code_version
                                 ORDER BY instance_first, chip_id) - 1 AS instance_index
    FROM stored
)
SELECT * EXCLUDE (class_id, instance_first, instance_index)
         REPLACE (class_id AS chip_id, instance_index * {stride} + round AS round),
       chip_id AS instance_id, round AS instance_round
FROM indexed"""

_CHIPS = """
CREATE OR REPLACE TEMP VIEW chips AS
SELECT class_id AS chip_id, any_value(class_label ORDER BY chip_id) AS name,
       any_value(device ORDER BY chip_id) AS device, max(cores) AS cores,
       min(memory_bytes) AS memory_bytes,
       string_agg(DISTINCT os, '; ' ORDER BY os) AS os,
       string_agg(DISTINCT mlx_version, '; ' ORDER BY mlx_version) AS mlx_version,
       any_value(fingerprint ORDER BY chip_id) AS fingerprint,
       count(*) AS instances, list_sort(list_distinct(list(name) || list(chip_id))) AS aliases
FROM {db}.main.chips GROUP BY class_id"""

# The instances of each class, by the raw tables (provenance lists them with their hashes).
INSTANCES_SQL = """
SELECT ch.class_id, ch.chip_id, ch.name, ch.memory_bytes, ch.os FROM {db}.main.chips ch ORDER BY 1, 2"""


# What a class's newest data pools, per class: its instances and blocks (rounds).
POOLED_SQL = (
    "\nSELECT chip_id, count(DISTINCT instance_id), count(DISTINCT round) FROM chosen GROUP BY chip_id"
)


def views_sql(db: str) -> list[str]:
    """The statements that make a connection to database `db` see classes."""
    quoted = '"' + db.replace('"', '""') + '"'
    return [_RUNS.format(db=quoted, stride=BLOCK_STRIDE), _CHIPS.format(db=quoted)]


def download_text() -> str:
    """The views as a download: run first in `duckdb reports/data/runs.duckdb` (catalog
    `runs`), and the other SQL downloads read what the page read."""
    head = (
        "-- Pages read runs and chips by machine class (runner/publish/sql/classes.py).\n"
        "-- Run this first in `duckdb reports/data/runs.duckdb`; the other .sql files then read\n"
        "-- what the page read.\n"
    )
    return head + "".join(s.strip() + ";\n" for s in views_sql("runs"))


def shadow(con) -> None:
    """Make `runs` and `chips` on this connection the class-keyed views above."""
    db = con.execute("SELECT current_database()").fetchone()[0]
    for statement in views_sql(db):
        con.execute(statement)
