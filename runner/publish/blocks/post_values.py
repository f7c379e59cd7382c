"""The values a post body's functions read and the claims judged on them, held by a
`PostData` as its `values`: a metric or a comparison of arms off the judging view, with
the A/A margin a direction must clear and the reason a runtime records no such figure; a
claim judged against it (rounding, interval, shortfall, contention), its verdict recorded
on the post.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from markupsafe import Markup

from runner.publish.blocks.post_state import Failure, caller_line
from runner.publish.metrics import METRICS, PER_PASS
from runner.publish.sql.rows import ArmRuntime
from runner.publish.stats import aa, instance_spread
from runner.publish.stats.claims import Measured, claim_link, judge, stated_shown
from runner.publish.stats.contention import judge_contention
from runner.publish.stats.rate_views import value_rate
from runner.publish.stats.shortfall import judge_short
from runner.publish.stats.verdicts import parse_band


def _of(requests: str | None) -> str:
    return "" if requests is None else f" (its {requests!r} requests)"


def _at(rate: float | None) -> str:
    return "" if rate is None else f" and {rate:g} req/s offered"


class PostValues:
    """A PostData's `values`: reads its reader, views, state, judging view and runtimes."""

    def __init__(self, data):  # the PostData holding it (not imported: it imports this)
        self.data = data
        self._aa: dict | None = None  # chip_id -> [aa.Coverage], read once a post
        self._aa_judged: dict | None = None  # the same over the data the post judges

    def measured(self, value, lo, hi, n, kind, what, metric, cells, span=None) -> Measured:
        """span: the range beyond which an infinite (open) bound lies, e.g. the measured widths."""
        spec = METRICS.get(metric)
        margin = self.aa_margin(metric, {c[0] for c in cells}) if kind in ("change", "ratio") else 0.0
        decimals, unit = (spec.decimals, spec.unit) if spec else (1, "")
        m = Measured(value, lo, hi, n, kind, what, decimals, unit, margin, span, band=self.data.band)
        self.data.state.remember(m, cells={(self.data.experiment, *c) for c in cells})
        return m

    def aa_margin(self, metric: str, chips: set) -> float:
        """The largest A/A margin of the metric on these chips in the data the post judges
        (0 where that data holds no A/A pair): data measured later never moves it."""
        cov = self.aa_judged()
        return max((c.margin for chip in chips for c in cov.get(chip, []) if c.metric == metric), default=0.0)

    def aa_judged(self) -> dict:
        """aa_coverage over the data the post judges (its pin, or as of its date)."""
        if self._aa_judged is None:
            cut = self.data.judging.cutoff()
            self._aa_judged = (
                self.aa_coverage()
                if cut is None or not self.data.aa_pair
                else aa.coverage(
                    self.data.reader, self.data.experiment, self.data.quick, self.data.aa_pair, cut
                )
            )
        return self._aa_judged

    def aa_coverage(self) -> dict:
        """chip_id -> [aa.Coverage] of every metric over all the data ({} without an A/A
        arm): what the provenance shows."""
        if self._aa is None:
            self._aa = (
                aa.coverage(self.data.reader, self.data.experiment, self.data.quick, self.data.aa_pair)
                if self.data.aa_pair
                else {}
            )
        return self._aa

    def missing_reason(self, metric: str, *arms: str) -> str | None:
        """Why a metric has no value for these arms when their runtime records none of it."""
        for arm in arms:
            runtime, has_passes = self.data.runtimes.get(arm, ArmRuntime("", True))
            if metric in PER_PASS and not has_passes:
                return f"not measured by runtime {runtime}"
        return None

    def _absent(self, m: Measured, metric: str, *arms: str) -> Measured:
        reason = self.missing_reason(metric, *arms)
        if m.value is None and reason:
            self.data.state.remember(m, missing=reason)
        return m

    # -- values -------------------------------------------------------------
    def view(self, requests: str | None, now: bool = False, cutoff: datetime | None = None, rate=None):
        """The data up to `cutoff` (for blocks, `now`: the newest), of the requests
        labelled `requests` only when given, of one rate of a sweep when `rate` is."""
        if requests is not None and not isinstance(requests, str):
            self.data.fail(f"requests= names a request label (a string), got {requests!r}")
            requests = None
        return self.data.views.get(
            self.data.experiment, self.data.quick, None if now else cutoff, requests, rate
        )

    def metric(
        self,
        name: str,
        arm: str,
        concurrency: int,
        chip: str | None = None,
        requests: str | None = None,
        as_of: object = None,
        rate=None,
    ) -> Measured:
        chip_id, cutoff = self.data.chip_for(chip), self.data.cutoff(as_of)
        rate_ok, rate = value_rate(self.data, rate, f"metric {name!r}")
        ok = self.data.metric_ok(name) and self.data.arm_ok(arm) and chip_id is not None and rate_ok
        what = (
            f"{name} of {arm}{_of(requests)} at concurrency {concurrency}{_at(rate)} on "
            f"{self.data.label_of(chip_id, chip, cutoff)}"
        )
        key = (chip_id, arm, int(concurrency), name)
        judged = self.view(requests, cutoff=cutoff, rate=rate)
        if not ok or key not in judged.cells:
            return self._absent(self.measured(None, None, None, 0, "value", what, name, set()), name, arm)
        cell = judged.cells[key]
        spread = instance_spread.of_cell(judged, name, chip_id, arm, int(concurrency))
        if spread:  # a level is one instance's figure: pooled, it would hide a 2x difference
            what += f" spans {spread.instances} instances ({instance_spread.texts(spread, 1)['value']})"
            return self._absent(self.measured(None, None, None, 0, "value", what, name, set()), name, arm)
        return self.measured(
            cell.mean,
            cell.lo,
            cell.hi,
            cell.n_rounds,
            "value",
            what,
            name,
            {(chip_id, arm, int(concurrency))},
        )

    def compare(
        self,
        metric: str,
        arm: str,
        base: str | None,
        concurrency: int,
        chip: str | None,
        kind: str,
        requests: str | None = None,
        as_of: object = None,
        rate=None,
    ) -> Measured:
        base = self.data.base if base is None else base
        chip_id, cutoff = self.data.chip_for(chip), self.data.cutoff(as_of)
        rate_ok, rate = value_rate(self.data, rate, f"{metric!r} of {arm} vs {base}")
        what = (
            f"{metric} of {arm} vs {base}{_of(requests)} at concurrency {concurrency}{_at(rate)} on "
            f"{self.data.label_of(chip_id, chip, cutoff)}"
        )
        ok = self.data.metric_ok(metric) and self.data.compared_ok(arm) and self.data.arm_ok(base) and rate_ok
        if not ok or chip_id is None:
            return self.measured(None, None, None, 0, kind, what, metric, set())
        c = int(concurrency)
        e = self.view(requests, cutoff=cutoff, rate=rate).compare(metric, chip_id, arm, base, c, kind)
        return self._absent(
            self.measured(
                e.value, e.lo, e.hi, e.n_rounds, kind, what, metric, {(chip_id, arm, c), (chip_id, base, c)}
            ),
            metric,
            arm,
            base,
        )

    def claim(self, stated: object, measured: object, within: object = None) -> Markup:
        """within: the claim's own band for "level" ("5%"), instead of the experiment's."""
        line = caller_line()
        if not isinstance(measured, Measured):
            self.data.fail(
                f"claim({stated!r}, ...) needs a value from metric(), gain(), ratio(), "
                "traffic_speed(), traffic_gain(), predicted() or crossover()",
                line,
            )
            return Markup.escape(str(stated))
        cells = self.data.state.cells_of.get(id(measured), set())
        missing = self.data.state.missing_of.get(id(measured))
        if within is not None:
            band = parse_band(within)
            if band is None:
                self.data.fail(
                    f"claim({stated!r}, ..., within={within!r}): within= takes a percentage such as '5%'",
                    line,
                )
                return Markup.escape(str(stated))
            measured = replace(measured, band=band)
        self.data.state.claim_cells |= cells
        self.data.state.claim_experiments[len(self.data.state.verdicts) + 1] = frozenset(c[0] for c in cells)
        verdict = judge(
            len(self.data.state.verdicts) + 1,
            str(stated),
            measured,
            None if line is None else line + self.data.line_offset,
            missing,
        )
        short = (
            self.data.reader.sweeps.short_cells(self.data.experiment, self.data.quick, self.data.cutoff(None))
            if self.data.short
            else {}
        )
        verdict = judge_short(verdict, cells, short, self.data.allow_short)
        verdict = judge_contention(
            verdict,
            cells,
            self.data.reader.sweeps.contention(self.data.experiment, self.data.quick, self.data.cutoff(None)),
        )
        self.data.state.verdicts.append(verdict)
        told = (
            measured.value is None and self.data.state.home_problem_told and self.data.judging.chip_id is None
        )
        if not verdict.ok and not told:
            self.data.state.failures.append(Failure(self.data.key, verdict.line, verdict.failure_message()))
        return self.data.token(str(claim_link(verdict)), stated_shown(str(stated), measured), block=False)
