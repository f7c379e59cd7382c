"""The SQL of drafting figures: accepted length and acceptance by position, per run.

- A pass stores two histograms over its drafting rows (schema 7): `accepted_lengths[m]`,
  the rows that kept m drafts, and `draft_lengths[k]`, the rows that carried k. A pass from
  before them (NULL) had one draft a drafting row: it reads as k = 1, `[drafted -
  accepted, accepted]` and `[0, drafted]`.
- `accepted_length` is tau, the mean tokens a drafting row-pass commits: 1 + its mean m.
- `acceptance_at_i` is the share of drafting row-passes that kept at least i drafts among
  those that carried at least i (keeping i implies carrying i, so the two marginal
  histograms give it exactly, whatever mix of k a pass held).
- Text only: `sql.RUN_METRICS` joins the `drafting` CTE by run, as it does `pas`.
"""

from __future__ import annotations

from runner.publish.metrics import ACCEPTANCE_METRICS, acceptance_position

# A pass's histograms, an old pass's read as k = 1.
KEPT = "coalesce(p.accepted_lengths, [p.drafted - p.accepted, p.accepted])"
CARRIED = "coalesce(p.draft_lengths, [0, p.drafted])"

DRAFTING = (
    """
hist AS (  -- one row a (drafting pass, length n): the rows that kept n drafts, and that carried n
    SELECT run_id, generate_subscripts(kept, 1) - 1 AS n, unnest(kept) AS kept, unnest(carried) AS carried
    FROM (
        SELECT p.run_id, """
    + KEPT
    + """ AS kept, """
    + CARRIED
    + """ AS carried
        FROM passes p JOIN chosen c ON p.run_id = c.run_id
        WHERE p.drafted > 0
    )
),
drafting AS (
    SELECT run_id,
        1 + sum(n * kept) / nullif(sum(kept), 0) AS accepted_length,
        """
    + ",\n        ".join(
        f"sum(kept) FILTER (WHERE n >= {i}) / nullif(sum(carried) FILTER (WHERE n >= {i}), 0) AS {name}"
        for name, i in ((m, acceptance_position(m)) for m in ACCEPTANCE_METRICS)
    )
    + """
    FROM hist
    GROUP BY run_id
)"""
)
