"""The schema's history: the DDL that brings a database from each version to the next,
and the columns later versions added (an export made before them lacks them, and an
import fills them with NULL). Add, never edit: a database records the versions it ran.
This module only declares; store.py runs the migrations.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

SCHEMA_SQL = Path(__file__).with_name("schema.sql")
# version -> DDL that brings the database from version-1 to version. Add, never edit.
MIGRATIONS: dict[int, str] = {
    1: SCHEMA_SQL.read_text(),
    # How busy the machine was while the run's cell ran (runner/experiments/load.py says how
    # each is measured). Nullable: older runs, and platforms that do not report a figure.
    2: """
    ALTER TABLE runs ADD COLUMN loadavg_start DOUBLE;        -- 1-minute load average, cell start
    ALTER TABLE runs ADD COLUMN loadavg_end DOUBLE;          -- ... and cell end
    ALTER TABLE runs ADD COLUMN steal_fraction DOUBLE;       -- stolen CPU time / all CPU time
    ALTER TABLE runs ADD COLUMN busy_fraction_other DOUBLE;  -- other processes' CPU time / all
    """,
    # Runs on other runtimes (runner/runtimes/): which one measured the run (NULL: a run from
    # before this column, all of which are our engine's), and request figures a server does
    # not report are NULL rather than 0: cached_tokens when its usage figures lack them, and
    # output_sha256 when it streams text, not token ids.
    3: """
    ALTER TABLE runs ADD COLUMN runtime VARCHAR;
    ALTER TABLE requests ALTER COLUMN cached_tokens DROP NOT NULL;
    ALTER TABLE requests ALTER COLUMN output_sha256 DROP NOT NULL;
    """,
    # Open-loop arrivals and per-token latency (issue 18): one row per generated token with
    # its arrival time, relative to the cell's start like the requests' times (token_index
    # 0 is the first output token; a request whose runtime cannot time its tokens has no
    # rows, never rows of zeros); a script entry's label on its requests (NULL otherwise);
    # the declared service-level objective on each run (NULL: none declared).
    4: """
    CREATE TABLE tokens (
        run_id      VARCHAR NOT NULL,
        request_id  INTEGER NOT NULL,
        token_index INTEGER NOT NULL,
        t_ns        BIGINT NOT NULL
    );
    ALTER TABLE requests ADD COLUMN label VARCHAR;
    ALTER TABLE runs ADD COLUMN slo_ttft_ms DOUBLE;
    ALTER TABLE runs ADD COLUMN slo_tpot_ms DOUBLE;
    """,
    # The machine probe (runner/experiments/probe.py, issue 22), taken once per `runner run`
    # before its first cell and stored with each of its runs: what a chip fingerprint cannot
    # tell apart. Nullable: older runs, and runs made without a probe.
    5: """
    ALTER TABLE runs ADD COLUMN probe_prefill_gflops DOUBLE;  -- a prefill-sized matmul
    ALTER TABLE runs ADD COLUMN probe_decode_gflops DOUBLE;   -- decode-sized small-row products
    ALTER TABLE runs ADD COLUMN probe_read_gbps DOUBLE;       -- a memory read
    """,
    # Fair lengths and runtime versions (issue 28): how many output tokens each request was
    # asked for (a request with fewer came back short: NULL for requests from before this
    # column, whose count was not kept), and the runtime's version as it ran the run (the
    # package it runs on, e.g. "mlx-lm 0.32.2"; NULL for our engine, whose version is
    # code_version) and the version a server reported (NULL: not reported or no server).
    6: """
    ALTER TABLE requests ADD COLUMN asked_tokens INTEGER;
    ALTER TABLE runs ADD COLUMN runtime_version VARCHAR;
    ALTER TABLE runs ADD COLUMN server_version VARCHAR;
    ALTER TABLE runs ADD COLUMN rate DOUBLE;  -- a rate sweep's cell: its offered rate (NULL: none)
    """,
    # Block drafting (issue 23): each pass's histograms over its drafting rows, [m] the rows
    # that kept m drafts and [k] the rows that carried k (empty: no row drafted). Accepted
    # length and acceptance by position are read from them. NULL: a pass from before this
    # column, when a drafting row carried one draft; it reads as k = 1
    # ([drafted - accepted, accepted] and [0, drafted], publish/sql_drafts.py).
    7: """
    ALTER TABLE passes ADD COLUMN accepted_lengths INTEGER[];
    ALTER TABLE passes ADD COLUMN draft_lengths INTEGER[];
    """,
    # Errored requests (issue 28): a request that failed while its server answered (an HTTP
    # error, a stalled or broken stream) is stored with what happened, no first token and
    # done_ns when it failed; NULL: the request completed (every request before this column).
    8: """
    ALTER TABLE requests ADD COLUMN error VARCHAR;
    ALTER TABLE requests ALTER COLUMN first_token_ns DROP NOT NULL;
    """,
    # Machine classes (issue 38): a chip row is one instance (a VM: its fingerprint holds the
    # kernel build and exact memory); its class is what the pages' columns are ("Intel Xeon,
    # 2 cores", store/machine_class.py), computed from the chip's fields or declared by hand
    # (`runner run --machine-class`). The store fills them for chips stored before this
    # column (from their own fields), so they are NULL only between a load and that fill.
    9: """
    ALTER TABLE chips ADD COLUMN class_id VARCHAR;
    ALTER TABLE chips ADD COLUMN class_label VARCHAR;
    ALTER TABLE chips ADD COLUMN class_declared BOOLEAN;
    """,
    # Decided claims (issue 37): the sequential design a run was measured under, as the
    # round counts of its looks ("3,6,12"; NULL: a fixed design, every run before this
    # column), which sets how wide its intervals are (publish/stats/sequential.py); and how
    # many times the cell was measured again before this run was kept because other
    # processes or the hypervisor took too much of its CPU (NULL: no rule applied).
    10: """
    ALTER TABLE runs ADD COLUMN looks VARCHAR;
    ALTER TABLE runs ADD COLUMN contention_reruns INTEGER;
    """,
    # Drafting that pays (issue 39): why a pass's rows carried the drafts they did, when the
    # adaptive policy cut them row by row from the drafter's confidence ("k 4 of 8: 2.61
    # tokens per unit vs ..."); NULL or empty: no cut (every pass before this column).
    11: """
    ALTER TABLE passes ADD COLUMN draft_reason VARCHAR;
    """,
}
SCHEMA_VERSION = max(MIGRATIONS)
# The migration that added chips' machine classes: after it runs, the store fills the class
# of every chip stored before it (store.py; the number is the issue's, renumbered at merge).
CLASS_MIGRATION = 9
# Columns later migrations added, with their Arrow types: rows exported before a migration
# lack them, and an import fills them with NULL (runner.store.exchange).
ADDED_COLUMNS: dict[str, dict[str, pa.DataType]] = {
    "chips": {"class_id": pa.string(), "class_label": pa.string(), "class_declared": pa.bool_()},
    "runs": {
        "loadavg_start": pa.float64(),
        "loadavg_end": pa.float64(),
        "steal_fraction": pa.float64(),
        "busy_fraction_other": pa.float64(),
        "runtime": pa.string(),
        "slo_ttft_ms": pa.float64(),
        "slo_tpot_ms": pa.float64(),
        "probe_prefill_gflops": pa.float64(),
        "probe_decode_gflops": pa.float64(),
        "probe_read_gbps": pa.float64(),
        "runtime_version": pa.string(),
        "server_version": pa.string(),
        "rate": pa.float64(),
        "looks": pa.string(),
        "contention_reruns": pa.int32(),
    },
    "requests": {"label": pa.string(), "asked_tokens": pa.int32(), "error": pa.string()},
    "passes": {
        "accepted_lengths": pa.list_(pa.int32()),
        "draft_lengths": pa.list_(pa.int32()),
        "draft_reason": pa.string(),
    },
}
