"""The values a post body's functions read and the claims judged on them (a mixin of
`PostData`): a metric or a comparison of arms off the judging view, with the A/A margin
a direction must clear and the reason a runtime records no such figure; a claim judged
against it (rounding, interval, shortfall, contention), its verdict recorded on the post.
"""

from __future__ import annotations

from datetime import datetime

from markupsafe import Markup

from runner.publish import aa
from runner.publish.claims import Measured, claim_link, judge
from runner.publish.contention import judge_contention
from runner.publish.metrics import METRICS, PER_PASS
from runner.publish.post_state import Failure, caller_line
from runner.publish.rate_views import value_rate
from runner.publish.rows import ArmRuntime
from runner.publish.shortfall import judge_short


def _of(requests: str | None) -> str:
    return "" if requests is None else f" (its {requests!r} requests)"


def _at(rate: float | None) -> str:
    return "" if rate is None else f" and {rate:g} req/s offered"


class PostValues:
    """Needs the PostData attributes it reads (reader, views, state, judging, runtimes, ...)."""

    def measured(self, value, lo, hi, n, kind, what, metric, cells, span=None) -> Measured:
        """span: the range beyond which an infinite (open) bound lies, e.g. the measured widths."""
        spec = METRICS.get(metric)
        margin = self.aa_margin(metric, {c[0] for c in cells}) if kind in ("change", "ratio") else 0.0
        decimals, unit = (spec.decimals, spec.unit) if spec else (1, "")
        m = Measured(value, lo, hi, n, kind, what, decimals, unit, margin, span)
        self.state.remember(m, cells={(self.experiment, *c) for c in cells})
        return m

    def aa_margin(self, metric: str, chips: set) -> float:
        """The largest A/A margin of the metric on these chips (0 without an A/A pair)."""
        cov = self.aa_coverage()
        return max((c.margin for chip in chips for c in cov.get(chip, []) if c.metric == metric), default=0.0)

    def aa_coverage(self) -> dict:
        """chip_id -> [aa.Coverage] of every metric ({} without an A/A arm)."""
        if self._aa is None:
            self._aa = (
                aa.coverage(self.reader, self.experiment, self.quick, self.aa_pair) if self.aa_pair else {}
            )
        return self._aa

    def missing_reason(self, metric: str, *arms: str) -> str | None:
        """Why a metric has no value for these arms when their runtime records none of it."""
        for arm in arms:
            runtime, has_passes = self.runtimes.get(arm, ArmRuntime("", True))
            if metric in PER_PASS and not has_passes:
                return f"not measured by runtime {runtime}"
        return None

    def _absent(self, m: Measured, metric: str, *arms: str) -> Measured:
        reason = self.missing_reason(metric, *arms)
        if m.value is None and reason:
            self.state.remember(m, missing=reason)
        return m

    # -- values -------------------------------------------------------------
    def view(self, requests: str | None, now: bool = False, cutoff: datetime | None = None, rate=None):
        """The data up to `cutoff` (for blocks, `now`: the newest), of the requests
        labelled `requests` only when given, of one rate of a sweep when `rate` is."""
        if requests is not None and not isinstance(requests, str):
            self.fail(f"requests= names a request label (a string), got {requests!r}")
            requests = None
        return self.views.get(self.experiment, self.quick, None if now else cutoff, requests, rate)

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
        chip_id, cutoff = self.chip_for(chip), self.cutoff(as_of)
        rate_ok, rate = value_rate(self, rate, f"metric {name!r}")
        ok = self.metric_ok(name) and self.arm_ok(arm) and chip_id is not None and rate_ok
        what = (
            f"{name} of {arm}{_of(requests)} at concurrency {concurrency}{_at(rate)} on "
            f"{self.label_of(chip_id, chip, cutoff)}"
        )
        key = (chip_id, arm, int(concurrency), name)
        judged = self.view(requests, cutoff=cutoff, rate=rate)
        if not ok or key not in judged.cells:
            return self._absent(self.measured(None, None, None, 0, "value", what, name, set()), name, arm)
        cell = judged.cells[key]
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
        base = self.base if base is None else base
        chip_id, cutoff = self.chip_for(chip), self.cutoff(as_of)
        rate_ok, rate = value_rate(self, rate, f"{metric!r} of {arm} vs {base}")
        what = (
            f"{metric} of {arm} vs {base}{_of(requests)} at concurrency {concurrency}{_at(rate)} on "
            f"{self.label_of(chip_id, chip, cutoff)}"
        )
        ok = self.metric_ok(metric) and self.arm_ok(arm) and self.arm_ok(base) and rate_ok
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

    def claim(self, stated: object, measured: object) -> Markup:
        line = caller_line()
        if not isinstance(measured, Measured):
            self.fail(
                f"claim({stated!r}, ...) needs a value from metric(), gain(), ratio(), "
                "traffic_speed(), traffic_gain(), predicted() or crossover()",
                line,
            )
            return Markup.escape(str(stated))
        cells = self.state.cells_of.get(id(measured), set())
        self.state.claim_cells |= cells
        self.state.claim_experiments[len(self.state.verdicts) + 1] = frozenset(c[0] for c in cells)
        verdict = judge(
            len(self.state.verdicts) + 1,
            str(stated),
            measured,
            None if line is None else line + self.line_offset,
            self.state.missing_of.get(id(measured)),
        )
        short = self.reader.short_cells(self.experiment, self.quick, self.cutoff(None)) if self.short else {}
        verdict = judge_short(verdict, cells, short, self.allow_short)
        verdict = judge_contention(
            verdict, cells, self.reader.contention(self.experiment, self.quick, self.cutoff(None))
        )
        self.state.verdicts.append(verdict)
        told = measured.value is None and self.state.home_problem_told and self.judging.chip_id is None
        if not verdict.ok and not told:
            self.state.failures.append(Failure(self.key, verdict.line, verdict.failure_message()))
        return self.token(str(claim_link(verdict)), str(stated), block=False)
