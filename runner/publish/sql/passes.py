"""The SQL behind the pass-cost model (`passcost.py`, `predict.py`): every pass of the chosen
runs, each arm's draft policy, the prefill that lands inside decode intervals, and each
(chip, arm)'s runtime. Text only; `queries.Reader` runs it.
"""

from __future__ import annotations

from runner.publish.sql.pages import CHOSEN_RUNS

# Every pass of the chosen runs, for the pass-cost model (`passcost.py`): what it held
# and what it took. Runs without per-pass rows (a server runtime) have none here.
PASS_ROWS_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.chip_id, c.arm, c.concurrency, c.round,
       p.width, p.prefill_tokens, p.decode_tokens, p.drafted, p.accepted, p.emitted,
       CAST(p.duration_ns AS DOUBLE) AS duration_ns,
       -- rows that carried drafts (draft_lengths[k + 1]: rows that carried k); before
       -- block drafting (no histogram) a drafting row carried one
       coalesce(list_sum(list_slice(p.draft_lengths, 2, len(p.draft_lengths))), p.drafted) AS drafting_rows
FROM passes p JOIN chosen c ON p.run_id = c.run_id
ORDER BY c.chip_id, c.arm, c.concurrency, c.round, p.pass_index"""
)

# Each arm's draft decisions as declared, and the engine features that change what a pass
# of a given shape costs: whether it runs the MTP head, its policy, how the MTP keeps up
# when a pass does not draft (eager: every pass), the indexer (index_topk > 0), and which
# drafter drafts (the drafts a row carries come from the passes themselves).
ARM_POLICIES_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.arm,
       bool_or(coalesce(TRY_CAST(json_extract_string(c.knobs, '$.mtp') AS BOOLEAN), FALSE)) AS mtp,
       min(coalesce(json_extract_string(c.knobs, '$.draft_policy'), 'never')) AS draft_policy,
       min(coalesce(json_extract_string(c.knobs, '$.mtp_sync'), 'eager')) AS mtp_sync,
       max(coalesce(TRY_CAST(json_extract_string(c.knobs, '$.index_topk') AS INTEGER), 0)) AS index_topk,
       min(coalesce(json_extract_string(c.knobs, '$.drafter'), 'mtp')) AS drafter
FROM chosen c GROUP BY c.arm ORDER BY c.arm"""
)

# The prefill work that lands inside requests' decode intervals (between a request's first
# and last token), per run: how much other clients' prompts slow a decoding row. Clients
# that start together prefill together, so this is far less than the run's prefill total.
DECODE_LOAD_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """,
q AS (
    SELECT c.chip_id, c.arm, c.concurrency, c.round, q.run_id, q.first_token_ns, q.done_ns
    FROM requests q JOIN chosen c ON q.run_id = c.run_id WHERE q.output_tokens > 1
)
SELECT q.chip_id, q.arm, q.concurrency, q.round,
       count(*) AS decode_passes, CAST(coalesce(sum(p.prefill_tokens), 0) AS DOUBLE) AS prefill_tokens
FROM q JOIN passes p ON p.run_id = q.run_id AND p.start_ns >= q.first_token_ns AND p.start_ns < q.done_ns
GROUP BY q.chip_id, q.arm, q.concurrency, q.round
ORDER BY q.chip_id, q.arm, q.concurrency, q.round"""
)

# Each (chip, arm)'s runtime: a chip may have measured an arm on a server runtime (no
# per-pass rows) that another chip measured on ours.
CHIP_ARM_RUNTIMES_SQL = (
    "WITH "
    + CHOSEN_RUNS
    + """
SELECT c.chip_id, c.arm, string_agg(DISTINCT coalesce(c.runtime, 'bothrows'), ', ')
FROM chosen c GROUP BY c.chip_id, c.arm ORDER BY c.chip_id, c.arm"""
)
