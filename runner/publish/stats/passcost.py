"""A pass-cost model per chip and experiment, pooled over its arms, and the decode speed it
predicts for each arm at any width.

- Pooled: what a pass costs follows its shape and the engine features it runs, not the
  policy that chose it, so one fit takes every arm's passes on the chip; an arm enters
  only through the passes it runs, its acceptance and its draft decisions. (Fitted per
  arm, a `solo` arm without its width-1 runs had no drafting pass to learn from.)
- Terms, by least squares on a pass's duration: `pass` (the weights every pass reads),
  `row` (a row's attention over its context, its routed experts), `draft_token` (a draft
  a row verifies: one more query token; at k = 1 a drafting row), `prefill_token`
  (prompt tokens a mixed pass computes), `mtp_row` (row-steps of the MTP layer: every row
  each pass under eager sync, every row of a drafting pass under lazy, plus k - 1 chained
  steps a row drafting k), `indexed_pass` and `indexed_token` (the indexer, index_topk > 0:
  its fixed cost, and per query token, a row's own plus its drafts, each scored against
  the row's keys), `block_pass` and `block_token` (the block drafter's pass, in passes
  that draft: its fixed cost, and its k + 1 block positions a drafting row). Only passes
  with decode rows are fitted: a prefill-only pass costs tens of decode passes and would
  steer a least-squares fit that exists to predict decode. Checked on the residuals by width,
  kind and arm: a width-1 discount and a per-drafting-pass cost changed sign between
  chips, so neither is a term. A term that does not vary on its own is dropped.
- Fit quality: the median absolute percentage error of the fitted pass times.
- Each arm's prediction from the pooled fit (draft share, acceptance, decode per
  sequence by width) is `passcost_arm.py`.
- Intervals: DRAWS bootstrap resamples (a fit has no per-round values for `intervals.py`'s
  t interval): the rounds with replacement within each concurrency, every arm's run of a
  drawn round together, then inside each drawn run its passes in BLOCKS stretches with
  replacement (neighbouring passes share a context length). Seeded by sha256 of (key,
  chip, concurrency); one fit serves every arm, so gains and crossovers pair draw by draw.
This module computes; the query layer hands it `queries_passes.RunPasses` and `ArmPolicy`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from runner.publish.stats.intervals import LEVEL

DRAWS = 2000
TERMS = (
    "pass",
    "row",
    "draft_token",
    "prefill_token",
    "mtp_row",
    "indexed_pass",
    "indexed_token",
    "block_pass",
    "block_token",
)
MAX_WIDTH = 16  # predictions reach this far; beyond the measured ceiling they are extrapolated
MIN_ROWS = 30  # decode rows at a width before its measured draft share is used (drafts: acceptance)
MIN_OWN_VARIATION = 0.1  # share of a term's variation its own for the fit to keep it
BLOCKS = 8  # stretches of consecutive passes a run is cut into for resampling inside it


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "little")


@dataclass(frozen=True, slots=True)
class Policy:
    """An arm's draft decisions and the features that change what a pass costs."""

    mtp: bool
    draft_policy: str
    mtp_sync: str = "eager"
    indexed: bool = False
    drafter: str = "mtp"  # or "block": the block-diffusion drafter, not the MTP layer

    @property
    def mtp_layer(self) -> bool:
        return self.mtp and self.drafter == "mtp"

    @property
    def block(self) -> bool:
        return self.mtp and self.drafter == "block"

    @property
    def eager(self) -> bool:
        return self.mtp_layer and self.mtp_sync == "eager"

    def allows(self, width: int) -> bool:
        p = self.draft_policy
        if not self.mtp or p == "never":
            return False
        if p == "solo":
            return width == 1
        if p.startswith("max_width:"):
            return width <= int(p.split(":", 1)[1])
        return True  # always, adaptive


def columns(policy: Policy, w, pre, d, rows, drafting) -> list:
    """The terms' values of passes of width w, prefill tokens pre, d drafts verified over
    `rows` drafting rows, `drafting` whether the pass drafts (a prediction: the share of
    passes that do), all arrays of one shape, in TERMS order."""
    ix, one = float(policy.indexed), np.ones_like(w)
    mtp = 0 * w
    if policy.mtp_layer:  # lazy: every row of a drafting pass; a row drafting k chains k - 1 more
        mtp = (w if policy.eager else w * drafting) + (d - rows)
    blk = float(policy.block)
    return [one, w, d, pre, mtp, ix * one, ix * (w + d), blk * drafting, blk * (d + rows)]


def design(policy: Policy, width, prefill_tokens, drafted, drafting_rows) -> np.ndarray:
    """One row per pass, one column per term in TERMS (durations in ns); drafting_rows:
    the rows that carried drafts (at k = 1, the drafts)."""
    w, pre, d, rows = (np.asarray(v, dtype=float) for v in (width, prefill_tokens, drafted, drafting_rows))
    return np.column_stack(columns(policy, w, pre, d, rows, (d > 0).astype(float)))


def _decoding(r) -> np.ndarray:
    return r.decode_tokens > 0


@dataclass(frozen=True, slots=True)
class Stats:
    """Sufficient statistics of runs cut into BLOCKS stretches of consecutive passes,
    stacked (one entry a block), so a resample is a weighted sum: X'X and X'y of the fit,
    decode rows, drafts and drafting rows by width, and the drafted, accepted and
    decode-interval prefill totals (the run's, on its first block)."""

    arm: np.ndarray  # (N,) of the block's run
    concurrency: np.ndarray  # (N,)
    round: np.ndarray  # (N,)
    xtx: np.ndarray  # (N, T, T)
    xty: np.ndarray  # (N, T)
    rows_by_width: np.ndarray  # (N, MAX_WIDTH + 1)
    drafted_by_width: np.ndarray  # (N, MAX_WIDTH + 1): drafts (tokens)
    drafting_by_width: np.ndarray  # (N, MAX_WIDTH + 1): rows that carried them
    totals: np.ndarray  # (N, 4): drafted, accepted, prefill in decode intervals, other-row passes


def _design_of(policy: Policy, r, passes) -> np.ndarray:
    return design(
        policy, r.width[passes], r.prefill_tokens[passes], r.drafted[passes], r.drafting_rows[passes]
    )


def run_stats(runs, policies: dict, loads: dict) -> Stats:
    """loads: (arm, concurrency, round) -> queries_passes.DecodeLoad of the same run."""
    keys, xtx, xty, rows, drafted, drafting, totals = [], [], [], [], [], [], []
    for r in runs:
        load = loads.get((r.arm, r.concurrency, r.round))
        others = 0.0 if load is None else load.decode_passes * max(r.concurrency - 1, 0)
        for b, part in enumerate(np.array_split(np.arange(len(r.width)), BLOCKS)):
            fitted = part[_decoding(r)[part]]
            x = _design_of(policies[r.arm], r, fitted)
            keys.append((r.arm, r.concurrency, r.round))
            xtx.append(x.T @ x)
            xty.append(x.T @ r.duration_ns[fitted])
            w = np.clip(r.width[part].astype(int), 0, MAX_WIDTH)
            rows.append(np.bincount(w, weights=(r.decode_tokens - r.drafted)[part], minlength=MAX_WIDTH + 1))
            drafted.append(np.bincount(w, weights=r.drafted[part], minlength=MAX_WIDTH + 1))
            drafting.append(np.bincount(w, weights=r.drafting_rows[part], minlength=MAX_WIDTH + 1))
            pre = load.prefill_tokens if others and b == 0 else 0.0
            totals.append([r.drafted[part].sum(), r.accepted[part].sum(), pre, others if b == 0 else 0.0])
    n = len(TERMS)
    return Stats(
        np.array([k[0] for k in keys], dtype=str),
        np.array([k[1] for k in keys], dtype=int),
        np.array([k[2] for k in keys], dtype=int),
        np.array(xtx).reshape(-1, n, n),
        np.array(xty).reshape(-1, n),
        np.array(rows).reshape(-1, MAX_WIDTH + 1),
        np.array(drafted).reshape(-1, MAX_WIDTH + 1),
        np.array(drafting).reshape(-1, MAX_WIDTH + 1),
        np.array(totals, dtype=float).reshape(-1, 4),
    )


def draw_weights(key: tuple, stats: Stats, draws: int = DRAWS) -> np.ndarray:
    """(draws + 1, N): row 0 is the point fit (every block once), then the resamples: the
    rounds of each concurrency drawn with replacement (a drawn round brings every arm's run
    of it), then inside each drawn copy of a run its blocks with replacement."""
    w = np.zeros((draws + 1, len(stats.concurrency)))
    w[0] = 1.0
    for c in sorted(set(stats.concurrency.tolist())) if draws else ():
        at = stats.concurrency == c
        rounds = sorted(set(stats.round[at].tolist()))
        rng = np.random.default_rng(_seed(*key, c, len(rounds)))
        copies = rng.multinomial(len(rounds), [1 / len(rounds)] * len(rounds), size=draws)
        for j, r in enumerate(rounds):
            for arm in sorted(set(stats.arm[at & (stats.round == r)].tolist())):
                idx = np.nonzero(at & (stats.round == r) & (stats.arm == arm))[0]
                w[1:, idx] = rng.multinomial(copies[:, j] * len(idx), [1 / len(idx)] * len(idx))
    return w


def kept_terms(x: np.ndarray) -> list[int]:
    """The terms that vary on their own within these passes: in TERMS order, a term is
    kept when at least MIN_OWN_VARIATION of its variation is not a combination of the
    terms kept before it (an arm alone drafting on every row makes drafted rows follow
    rows: fitting both would trade one against the other and extrapolate wildly)."""
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


class Fit:
    """The pass-cost model of one chip's passes pooled over its arms, with `draws`
    resampled refits (row 0: the point; a held-out check needs only the point)."""

    def __init__(self, key: tuple, runs: list, policies: dict, loads: dict, draws: int = DRAWS):
        if not runs:
            raise ValueError("a pass-cost fit needs runs with per-pass rows")
        self.policies = policies  # arm -> Policy
        self.arms = tuple(sorted({r.arm for r in runs}))
        self.n_runs = {a: sum(r.arm == a for r in runs) for a in self.arms}
        self.n_passes = int(sum(len(r.width) for r in runs))
        m = [_decoding(r) for r in runs]
        x = np.concatenate([_design_of(policies[r.arm], r, d) for r, d in zip(runs, m)])
        y = np.concatenate([r.duration_ns[d] for r, d in zip(runs, m)])
        self.keep = kept_terms(x)
        self.stats = run_stats(runs, policies, loads)
        self.weights = draw_weights(key, self.stats, draws)
        k = np.ix_(self.keep, self.keep)
        xtx = np.einsum("br,rij->bij", self.weights, self.stats.xtx)[:, k[0], k[1]]
        xty = np.einsum("br,ri->bi", self.weights, self.stats.xty)[:, self.keep]
        coef = np.zeros((draws + 1, len(TERMS)))
        coef[:, self.keep] = np.einsum("bij,bj->bi", np.linalg.pinv(xtx), xty)
        self.coef = coef  # (draws + 1, T), ns per unit of each term
        self.mape = float(np.median(np.abs(x @ coef[0] - y) / np.where(y > 0, y, np.nan)))

    @property
    def terms(self) -> tuple[str, ...]:
        return tuple(TERMS[j] for j in self.keep)

    def coefficient(self, term: str) -> tuple[float, float, float]:
        """(point, lo, hi) in ns per unit of the term; a dropped term is (0, 0, 0)."""
        draws = self.coef[1:, TERMS.index(term)]
        v = float(self.coef[0, TERMS.index(term)])
        if not len(draws):
            return v, v, v
        tail = (1 - LEVEL) / 2 * 100
        lo, hi = np.nanpercentile(draws, [tail, 100 - tail])
        return v, min(float(lo), v), max(float(hi), v)

    def pass_ns(
        self, policy: Policy, share: np.ndarray, prefill: np.ndarray, carrying: np.ndarray
    ) -> np.ndarray:
        """(draws + 1, W): the predicted time of a pass at widths 0 .. W - 1 under the
        features of `policy`, `share` (draws + 1, W) drafts a row in it (at k = 1 the
        share of rows drafting), `carrying` (draws + 1, W) the share of rows carrying them
        (at k = 1, `share`) and `prefill` (draws + 1, W) prompt tokens in it."""
        w = np.broadcast_to(np.arange(share.shape[1], dtype=float)[None, :], share.shape)
        x = columns(policy, w, prefill, w * share, w * carrying, np.minimum(carrying, 1.0))
        return sum(self.coef[:, [j]] * col for j, col in enumerate(x))


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


def interval_of(
    point: float, draws: np.ndarray, open_above: bool = False
) -> tuple[float | None, float | None]:
    """The 95% interval of finite draws, widened to the point; None when fewer than
    LEVEL of the draws are finite. open_above (a crossover): a draw that is not finite
    never crossed inside the widths, so it counts as beyond them (+inf), and the upper
    bound is +inf when more than the upper tail of the draws never crossed."""
    if not math.isfinite(point) or not len(draws):
        return None, None
    if open_above:
        ranked = np.sort(np.where(np.isfinite(draws), draws, np.inf))
        tail = (1 - LEVEL) / 2 * (len(ranked) - 1)
        lo, hi = ranked[int(math.floor(tail))], ranked[int(math.ceil(len(ranked) - 1 - tail))]
        if not math.isfinite(lo):
            return None, None
        return min(float(f"{lo:.12g}"), point), max(
            float(f"{hi:.12g}") if math.isfinite(hi) else math.inf, point
        )
    finite = draws[np.isfinite(draws)]
    if len(finite) < LEVEL * len(draws):
        return None, None
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(finite, [tail, 100 - tail])
    return min(float(f"{lo:.12g}"), point), max(float(f"{hi:.12g}"), point)
