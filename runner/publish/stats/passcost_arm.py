"""One arm's predicted decode per sequence at any width, from the chip's pooled pass-cost
fit (`passcost.Fit`).

- Width w (a closed loop of w clients): w rows, of which a share s(w) draft (measured
  where the arm's passes at w are, at least MIN_ROWS rows; else its policy: `solo`
  drafts at width 1 only, `always` at the share of its nearest measured width), plus the
  prefill the other w - 1 clients bring into a row's decode interval (measured per other
  row; clients that start together prefill together, so it is small).
- Decode per sequence: the tokens a row commits per pass, 1 + s x acceptance (s: drafts
  a row carries, acceptance: per draft), over the pooled fit's pass time for that shape
  under the arm's features (with the share of rows carrying drafts, for k > 1).
- Acceptance at width w: of the drafting arms with the same attention (indexer or not) in
  their runs at concurrency w, when they hold at least MIN_ROWS drafts: a closed loop of w
  clients replays the same requests in every arm, and acceptance follows the requests
  (more clients replay more of the stream), not the policy, which decides only where to
  draft. Elsewhere (a width not measured, or left
  out) the arm's own drafts pooled over its runs; an arm whose fitted runs hold fewer
  than MIN_ROWS drafts (`solo` without its width-1 runs) takes those of the drafting arms
  with the same attention, else of every drafting arm.
- Every figure is (draws + 1, ...) like the fit: row 0 the point, then the resamples.
"""

from __future__ import annotations

import numpy as np

from runner.publish.stats.passcost import MAX_WIDTH, MIN_ROWS, Fit


class ArmFit:
    """An arm's predictions from a pooled fit of its chip's passes."""

    def __init__(self, fit: Fit, arm: str):
        self.fit, self.arm, self.policy = fit, arm, fit.policies[arm]
        st = fit.stats
        self.own = st.arm == arm
        self.n_runs, self.mape, self.terms = fit.n_runs[arm], fit.mape, fit.terms
        self.concurrencies = tuple(sorted(set(st.concurrency[self.own].tolist())))
        self._measured_widths = st.rows_by_width[self.own].sum(axis=0) >= MIN_ROWS
        drafted = {a: st.totals[st.arm == a, 0].sum() for a in fit.arms}
        same = [a for a in fit.arms if fit.policies[a].indexed == self.policy.indexed]
        if drafted[arm] >= MIN_ROWS:
            source = [arm]
        elif sum(drafted[a] for a in same) >= MIN_ROWS:
            source = same
        else:
            source = list(fit.arms)
        self.acceptance_from = tuple(a for a in source if drafted[a] > 0)
        self._accept = np.isin(st.arm, self.acceptance_from)
        self._same_attention = np.isin(st.arm, [a for a in same if drafted[a] > 0])

    def coefficient(self, term: str) -> tuple[float, float, float]:
        return self.fit.coefficient(term)

    def drafted_share(self) -> float:
        """The share of the arm's fitted decode rows that drafted."""
        st = self.fit.stats
        rows = st.rows_by_width[self.own].sum()
        return float(st.drafted_by_width[self.own].sum() / rows) if rows else 0.0

    def knows_drafts(self) -> bool:
        """Whether the fit has drafting passes to price a draft and drafts to accept."""
        return "draft_token" in self.terms and bool(self.acceptance_from)

    def draft_share(self) -> np.ndarray:
        """(draws + 1, MAX_WIDTH + 1): drafts a decode row carries at each width (at k = 1
        the share of rows that draft)."""
        return self._per_row(self.fit.stats.drafted_by_width)

    def carrying_share(self) -> np.ndarray:
        """(draws + 1, MAX_WIDTH + 1): the share of decode rows that carry drafts."""
        return self._per_row(self.fit.stats.drafting_by_width)

    def _per_row(self, by_width: np.ndarray) -> np.ndarray:
        """`by_width` (blocks, widths) per decode row of the arm, where its policy drafts:
        measured at a width with its passes, else at its nearest measured width."""
        w, st = self.fit.weights[:, self.own], self.fit.stats
        rows, drafted = w @ st.rows_by_width[self.own], w @ by_width[self.own]
        with np.errstate(invalid="ignore", divide="ignore"):
            measured = np.where(rows > 0, drafted / np.maximum(rows, 1e-12), 0.0)
        share = np.zeros_like(measured)
        allowed = [w for w in range(1, MAX_WIDTH + 1) if self.policy.allows(w)]
        known = [w for w in allowed if self._measured_widths[w]]
        for w in allowed:
            if self._measured_widths[w]:
                share[:, w] = measured[:, w]
            else:  # the policy drafts here: at the level of its nearest measured width
                near = min(known, key=lambda k: (abs(k - w), -k)) if known else None
                share[:, w] = measured[:, near] if near is not None else 1.0
        return share

    def acceptance(self) -> np.ndarray:
        """(draws + 1, MAX_WIDTH + 1): the acceptance a draft meets at each width."""
        weights, st = self.fit.weights, self.fit.stats

        def share(blocks: np.ndarray) -> np.ndarray:
            drafted, accepted = (weights[:, blocks] @ st.totals[blocks, :2]).T
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(drafted > 0, accepted / np.maximum(drafted, 1e-12), 0.0)

        out = np.repeat(share(self._accept)[:, None], MAX_WIDTH + 1, axis=1)
        for c in sorted(set(st.concurrency[self._same_attention].tolist())):
            at = self._same_attention & (st.concurrency == c)
            if c <= MAX_WIDTH and st.totals[at, 0].sum() >= MIN_ROWS:
                out[:, c] = share(at)
        return out

    def decode_tps(self) -> np.ndarray:
        """(draws + 1, MAX_WIDTH + 1): predicted decode tok/s per sequence at each width
        (column 0 unused, NaN)."""
        weights, totals = self.fit.weights, self.fit.stats.totals
        _, _, prefill, others = (weights[:, self.own] @ totals[self.own]).T
        with np.errstate(invalid="ignore", divide="ignore"):
            per_other_row = np.where(others > 0, prefill / np.maximum(others, 1e-12), 0.0)
        acceptance = self.acceptance()
        s, carrying = self.draft_share(), self.carrying_share()
        w = np.arange(MAX_WIDTH + 1, dtype=float)[None, :]
        pass_ns = self.fit.pass_ns(self.policy, s, per_other_row[:, None] * np.maximum(w - 1, 0), carrying)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(pass_ns > 0, (1.0 + s * acceptance) * 1e9 / pass_ns, np.nan)
        out[:, 0] = np.nan
        return out
