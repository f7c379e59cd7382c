"""The SQL of drafting figures: accepted length and acceptance by position, per run.

- A pass stores two histograms over its drafting rows (schema 7): `accepted_lengths[m]`,
  the rows that kept m drafts, and `draft_lengths[k]`, the rows that carried k. A pass from
  before them (NULL) had one draft a drafting row: it reads as k = 1 (`drafted` rows
  carried one draft, `accepted` of them kept it, none carried a second).
- `accepted_length` is tau, the mean tokens a drafting row-pass commits: 1 + its mean m.
- `acceptance_at_i` is the share of drafting row-passes that kept at least i drafts among
  those that carried at least i (keeping i implies carrying i, so the two marginal
  histograms give it exactly, whatever mix of k a pass held).
- Sums of list slices a pass, no unnesting: about as fast as the scalar columns on old data.
- Text only: `sql.RUN_METRICS` joins the `drafting` CTE by run, as it does `pas`.
"""

from __future__ import annotations

from runner.publish.metrics import ACCEPTANCE_METRICS, acceptance_position


def _rows_from(position: int, histogram: str, old: str) -> str:
    """A pass's drafting rows at `position` or past it in one of its histograms (list
    index m + 1 holds length m); an old pass's (NULL) at k = 1: `old` at position 1."""
    return f"coalesce(list_sum(p.{histogram}[{position + 1}:]), {old if position == 1 else '0'})"


# Rows that drafted: the kept histogram's sum, an old pass's `drafted` (one draft a row).
# The accepted drafts are `accepted` whatever k was: sum(m x kept[m]) is that column.
DRAFTING = (
    """
drafting AS (
    SELECT p.run_id,
        1 + sum(p.accepted) / nullif(sum(coalesce(list_sum(p.accepted_lengths), p.drafted)), 0)
            AS accepted_length,
        """
    + ",\n        ".join(
        f"sum({_rows_from(i, 'accepted_lengths', 'p.accepted')})\n"
        f"            / nullif(sum({_rows_from(i, 'draft_lengths', 'p.drafted')}), 0) AS {name}"
        for name, i in ((m, acceptance_position(m)) for m in ACCEPTANCE_METRICS)
    )
    + """
    FROM passes p JOIN chosen c ON p.run_id = c.run_id
    WHERE p.drafted > 0
    GROUP BY p.run_id
)"""
)
