"""A pass-cost model per chip, model and arm, and the decode speed it predicts at any width.

- The fit: least squares of a pass's duration on named terms. `pass`: a fixed cost per
  pass (the weights every pass reads, whatever it holds); `row`: per row (a row's
  attention over its own context, its share of the routed experts); `query_token`: per
  token computed (prefill chunks, and the second token a drafting row verifies);
  `drafted_row`: per row that drafts (the MTP layer's forward for its next draft);
  `drafting_pass`: the MTP layer running at all in a pass (its weights read once). These
  are the parts a pass's rows hold (`passes`: width, prefill and decode tokens, drafted);
  a term that does not vary within an arm's passes (no drafts under `off`, one drafted
  row per drafting pass under `solo`) is dropped rather than guessed.
- Fit quality: the median absolute percentage error of the fitted pass times.
- Prediction at width w (a closed loop of w clients): w rows, of which a share s(w)
  draft (measured where the arm's passes at w are, else its policy: `solo` drafts at
  width 1 only, `always` at the share of its widest measured width), query tokens
  w (1 + s) plus the prefill the other w - 1 clients bring into a row's decode interval
  (measured per other row; clients that start together prefill together, so it is small).
  Decode per sequence is the tokens a row commits per pass, 1 + s x acceptance, over the
  predicted pass time.
- Intervals: DRAWS bootstrap resamples (a fit's coefficients have no per-round values
  for `intervals.py`'s t interval to read): the runs with replacement within each
  concurrency, then inside each drawn run its passes in BLOCKS stretches with
  replacement (stretches keep neighbouring passes, which share a context length,
  together). Seeded by sha256 of (key, chip,
  concurrency): arms of one chip draw the same rounds, so gains and crossovers are
  paired draw by draw.
This module computes; the query layer hands it `queries_passes.RunPasses` and `ArmPolicy`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from runner.publish.intervals import LEVEL

DRAWS = 2000

TERMS = ("pass", "row", "query_token", "drafted_row", "drafting_pass")
MAX_WIDTH = 16  # predictions reach this far; beyond the measured ceiling they are extrapolated
MIN_ROWS = 30  # decode rows at a width before its measured draft share is used


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "little")


MIN_OWN_VARIATION = 0.1  # share of a term's variation its own for the fit to keep it
BLOCKS = 8  # stretches of consecutive passes a run is cut into for resampling inside it


def design(width, query_tokens, drafted) -> np.ndarray:
    """One row per pass, one column per term in TERMS (durations in ns)."""
    width, q, d = (np.asarray(v, dtype=float) for v in (width, query_tokens, drafted))
    return np.column_stack([np.ones_like(width), width, q, d, (d > 0).astype(float)])


@dataclass(frozen=True, slots=True)
class Stats:
    """Sufficient statistics of runs cut into BLOCKS stretches of consecutive passes,
    stacked (one entry a block), so a resample is a weighted sum: X'X and X'y of the fit,
    decode rows and drafted rows by width, and the drafted, accepted and decode-interval
    prefill totals (the run's, on its first block)."""

    concurrency: np.ndarray  # (N,) of the block's run
    round: np.ndarray  # (N,)
    xtx: np.ndarray  # (N, T, T)
    xty: np.ndarray  # (N, T)
    rows_by_width: np.ndarray  # (N, MAX_WIDTH + 1)
    drafted_by_width: np.ndarray  # (N, MAX_WIDTH + 1)
    totals: np.ndarray  # (N, 4): drafted, accepted, prefill in decode intervals, other-row passes


def run_stats(runs, loads: dict) -> Stats:
    """loads: (concurrency, round) -> queries_passes.DecodeLoad of the same run."""
    keys, xtx, xty, rows, drafted, totals = [], [], [], [], [], []
    for r in runs:
        load = loads.get((r.concurrency, r.round))
        others = 0.0 if load is None else load.decode_passes * max(r.concurrency - 1, 0)
        for b, part in enumerate(np.array_split(np.arange(len(r.width)), BLOCKS)):
            x = design(r.width[part], r.prefill_tokens[part] + r.decode_tokens[part], r.drafted[part])
            keys.append((r.concurrency, r.round))
            xtx.append(x.T @ x)
            xty.append(x.T @ r.duration_ns[part])
            w = np.clip(r.width[part].astype(int), 0, MAX_WIDTH)
            rows.append(np.bincount(w, weights=(r.decode_tokens - r.drafted)[part], minlength=MAX_WIDTH + 1))
            drafted.append(np.bincount(w, weights=r.drafted[part], minlength=MAX_WIDTH + 1))
            pre = load.prefill_tokens if others and b == 0 else 0.0
            totals.append([r.drafted[part].sum(), r.accepted[part].sum(), pre, others if b == 0 else 0.0])
    n = len(TERMS)
    return Stats(
        np.array([k[0] for k in keys], dtype=int),
        np.array([k[1] for k in keys], dtype=int),
        np.array(xtx).reshape(-1, n, n),
        np.array(xty).reshape(-1, n),
        np.array(rows).reshape(-1, MAX_WIDTH + 1),
        np.array(drafted).reshape(-1, MAX_WIDTH + 1),
        np.array(totals, dtype=float).reshape(-1, 4),
    )


def draw_weights(key: tuple, stats: Stats) -> np.ndarray:
    """(DRAWS + 1, N): row 0 is the point fit (every block once), then the resamples:
    the runs of each concurrency drawn with replacement, then inside each drawn copy of
    a run its blocks with replacement (a run drawn m times: m x BLOCKS blocks)."""
    w = np.zeros((DRAWS + 1, len(stats.concurrency)))
    w[0] = 1.0
    for c in sorted(set(stats.concurrency.tolist())):
        rounds = sorted(set(stats.round[stats.concurrency == c].tolist()))
        rng = np.random.default_rng(_seed(*key, c, len(rounds)))
        copies = rng.multinomial(len(rounds), [1 / len(rounds)] * len(rounds), size=DRAWS)
        for j, r in enumerate(rounds):
            idx = np.nonzero((stats.concurrency == c) & (stats.round == r))[0]
            w[1:, idx] = rng.multinomial(copies[:, j] * len(idx), [1 / len(idx)] * len(idx))
    return w


def kept_terms(runs) -> list[int]:
    """The terms that vary on their own within these passes: in TERMS order, a term is
    kept when at least MIN_OWN_VARIATION of its variation is not a combination of the
    terms kept before it. `always` drafts on nearly every row of nearly every pass, so
    its drafted rows follow its rows: fitting both would trade one against the other
    (large opposite coefficients) and extrapolate wildly; dropped, its drafting cost is
    part of its per-row and per-pass cost, which is what that policy pays at every width."""
    x = np.concatenate([design(r.width, r.prefill_tokens + r.decode_tokens, r.drafted) for r in runs])
    keep: list[int] = []
    for j in range(x.shape[1]):
        col = x[:, j]
        norm = np.linalg.norm(col)
        if norm == 0:
            continue
        if keep:
            a = x[:, keep]
            col = col - a @ np.linalg.lstsq(a, col, rcond=None)[0]
        if np.linalg.norm(col) >= MIN_OWN_VARIATION * norm:
            keep.append(j)
    return keep


@dataclass(frozen=True, slots=True)
class Policy:
    mtp: bool
    draft_policy: str

    def allows(self, width: int) -> bool:
        p = self.draft_policy
        if not self.mtp or p == "never":
            return False
        if p == "solo":
            return width == 1
        if p.startswith("max_width:"):
            return width <= int(p.split(":", 1)[1])
        return True  # always, adaptive


class Fit:
    """One arm's pass-cost model on one chip, with DRAWS resampled refits (row 0: the point)."""

    def __init__(self, key: tuple, runs: list, policy: Policy, loads: dict):
        if not runs:
            raise ValueError("a pass-cost fit needs runs with per-pass rows")
        self.policy, self.concurrencies = policy, tuple(sorted({r.concurrency for r in runs}))
        self.n_passes, self.n_runs = int(sum(len(r.width) for r in runs)), len(runs)
        self.keep = kept_terms(runs)
        self.stats = run_stats(runs, loads)
        self.weights = draw_weights(key, self.stats)
        k = np.ix_(self.keep, self.keep)
        xtx = np.einsum("br,rij->bij", self.weights, self.stats.xtx)[:, k[0], k[1]]
        xty = np.einsum("br,ri->bi", self.weights, self.stats.xty)[:, self.keep]
        coef = np.zeros((DRAWS + 1, len(TERMS)))
        coef[:, self.keep] = np.einsum("bij,bj->bi", np.linalg.pinv(xtx), xty)
        self.coef = coef  # (DRAWS + 1, T), ns per unit of each term
        x = np.concatenate([design(r.width, r.prefill_tokens + r.decode_tokens, r.drafted) for r in runs])
        y = np.concatenate([r.duration_ns for r in runs])
        fitted = x @ coef[0]
        self.mape = float(np.median(np.abs(fitted - y) / np.where(y > 0, y, np.nan)))
        self._measured_widths = self.stats.rows_by_width.sum(axis=0) >= MIN_ROWS

    def drafted_share(self) -> float:
        """The share of the fitted decode rows that drafted."""
        rows = self.stats.rows_by_width.sum()
        return float(self.stats.drafted_by_width.sum() / rows) if rows else 0.0

    @property
    def terms(self) -> tuple[str, ...]:
        return tuple(TERMS[j] for j in self.keep)

    def coefficient(self, term: str) -> tuple[float, float, float]:
        """(point, lo, hi) in ns per unit of the term; a dropped term is (0, 0, 0)."""
        draws = self.coef[1:, TERMS.index(term)]
        tail = (1 - LEVEL) / 2 * 100
        lo, hi = np.nanpercentile(draws, [tail, 100 - tail])
        v = float(self.coef[0, TERMS.index(term)])
        return v, min(float(lo), v), max(float(hi), v)

    def draft_share(self) -> np.ndarray:
        """(DRAWS + 1, MAX_WIDTH + 1): the share of decode rows that draft at each width."""
        rows = self.weights @ self.stats.rows_by_width
        drafted = self.weights @ self.stats.drafted_by_width
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

    def decode_tps(self) -> np.ndarray:
        """(DRAWS + 1, MAX_WIDTH + 1): predicted decode tok/s per sequence at each width
        (column 0 unused, NaN)."""
        drafted, accepted, prefill, others = (self.weights @ self.stats.totals).T
        with np.errstate(invalid="ignore", divide="ignore"):
            acceptance = np.where(drafted > 0, accepted / np.maximum(drafted, 1e-12), 0.0)
            per_other_row = np.where(others > 0, prefill / np.maximum(others, 1e-12), 0.0)
        s = self.draft_share()
        w = np.arange(MAX_WIDTH + 1, dtype=float)[None, :]
        per_row = 1.0 + s * acceptance[:, None]  # tokens a row commits per pass
        query = w * (1.0 + s) + per_other_row[:, None] * np.maximum(w - 1, 0)
        c = self.coef
        pass_ns = (
            c[:, [0]] + c[:, [1]] * w + c[:, [2]] * query + c[:, [3]] * w * s + c[:, [4]] * np.minimum(s, 1)
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(pass_ns > 0, per_row * 1e9 / pass_ns, np.nan)
        out[:, 0] = np.nan
        return out


def crossing(gain: np.ndarray, xs) -> np.ndarray:
    """gain: (N, len(xs)) at widths xs (ascending). The first width at which the gain
    changes sign from its sign at xs[0], linearly interpolated between the widths around
    it; NaN where it never does (or where a width's gain is missing before it does)."""
    out = np.full(gain.shape[0], np.nan)
    start = np.sign(gain[:, 0])
    for i in range(len(xs) - 1):
        a, b = gain[:, i], gain[:, i + 1]
        hit = np.isnan(out) & (start != 0) & (np.sign(b) != start) & np.isfinite(a) & np.isfinite(b)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(hit, xs[i] + (xs[i + 1] - xs[i]) * a / (a - b), out)
    return out


def interval_of(point: float, draws: np.ndarray) -> tuple[float | None, float | None]:
    """The 95% interval of finite draws, widened to the point; None when fewer than
    LEVEL of the draws are finite (a crossover most resamples never reach)."""
    finite = draws[np.isfinite(draws)]
    if not math.isfinite(point) or len(finite) < LEVEL * len(draws):
        return None, None
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(finite, [tail, 100 - tail])
    return min(float(f"{lo:.12g}"), point), max(float(f"{hi:.12g}"), point)
