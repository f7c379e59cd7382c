"""The functions a post body may call: its whole vocabulary.

Closures over the post's PostData (one per experiment), so no object with internals is
reachable from the sandbox. Every function takes `experiment=` (default: the post's
first experiment); comparisons take `base=` (default: the post's base arm, see
`postdata.PostData.base`); values take `chip=` (default: the judging chip, the post's
home unless the claims-on-every-chip table is being filled); values and tables take
`requests=` (a request label of a scripted workload: the figures of those requests only);
tables and charts take `rate=` (on a rate sweep, one swept rate; default: every rate), and
values on a sweep must name one;
values take `as_of=` (a day: a claim in a dated update section is judged on the data as
of its own day, not the post's) and `data=` (measurement folders: pins the data judged,
see home.py).
"""

from __future__ import annotations

from runner.publish.blocks.verdict_marks import bound_mark, measured_mark
from runner.publish.blocks import chart_blocks

from runner.publish.blocks import predicted_values

from runner.publish.blocks import tables

from runner.publish.blocks import timelines
from runner.publish.blocks import capacity_charts as load_charts
from runner.publish.blocks import prediction_chart as prediction
from runner.publish.blocks import traffic as traffic_choice
from runner.publish.blocks.capacity_value import capacity_value
from runner.publish.sql.home import Pinned
from runner.publish.metrics import MAX_POSITION
from runner.publish.metrics import acceptance_at as acceptance_metric
from runner.publish.blocks.postdata import PostData
from runner.publish.stats.quantiles import quantile_metric
from runner.publish.stats.claims import ClaimSyntaxError
from runner.publish.blocks.templating import render_block
from markupsafe import Markup


def when(as_of, data):
    """A value's as_of=, with its data= pin when given (PostData.cutoff reads both)."""
    return as_of if data is None else Pinned(as_of, data)


def post_api(datas: dict[str, PostData], default: str) -> dict:
    first = datas[default]

    def data_of(experiment) -> PostData | None:
        if experiment is None or experiment in datas:
            return datas[default if experiment is None else experiment]
        first.fail(
            f"unknown experiment {experiment!r}; this post draws on " + ", ".join(repr(e) for e in datas)
        )
        return None

    def value(experiment, kind, read):
        d = data_of(experiment)
        if d is None:
            return first.values.measured(
                None, None, None, 0, kind, f"a value of experiment {experiment!r}", "", set()
            )
        return read(d)

    def block(experiment, draw):
        d = data_of(experiment)
        return (
            first.token(render_block("block_error.html", message="block not drawn"), "")
            if d is None
            else draw(d)
        )

    def regime_table(metrics, base=None, experiment=None, requests=None, folded=True, rate=None):
        return block(
            experiment, lambda d: tables.regime_table(d, metrics, base, requests, bool(folded), rate)
        )

    def chart(metric, x=None, experiment=None, requests=None, rate=None):
        return block(experiment, lambda d: chart_blocks.chart(d, metric, x, requests, rate))

    def timeline_chart(concurrency=None, round=0, chip=None, experiment=None):
        return block(experiment, lambda d: timelines.timeline_chart(d, concurrency, round, chip))

    def drafted_by_width_chart(experiment=None):
        return block(experiment, chart_blocks.drafted_by_width_chart)

    def acceptance_by_position_chart(concurrency=1, experiment=None):
        return block(experiment, lambda d: chart_blocks.acceptance_by_position_chart(d, concurrency))

    def acceptance_at(position):  # the metric's name, for metric(), gain(), tables and charts
        name = acceptance_metric(position)
        if name is None:
            first.fail(
                f"acceptance_at(): a draft position is a whole number 1 to {MAX_POSITION}, got {position!r}"
            )
        return name or f"acceptance_at({position!r})"

    def metric(
        name,
        arm,
        concurrency,
        chip=None,
        experiment=None,
        requests=None,
        as_of=None,
        data=None,
        q=None,
        rate=None,
    ):
        if q is not None:  # any percentile of a latency metric (quantiles.py)
            return value(
                experiment,
                "value",
                lambda d: quantile_metric(
                    d, name, arm, concurrency, q, chip, requests, when(as_of, data), rate
                ),
            )
        return value(
            experiment,
            "value",
            lambda d: d.values.metric(name, arm, concurrency, chip, requests, when(as_of, data), rate),
        )

    def comparison(kind):  # gain() and ratio(): arm against base, as a change or a ratio
        def read(
            metric,
            arm,
            base=None,
            concurrency=1,
            chip=None,
            experiment=None,
            requests=None,
            as_of=None,
            data=None,
            rate=None,
        ):
            return value(
                experiment,
                kind,
                lambda d: d.values.compare(
                    metric, arm, base, concurrency, chip, kind, requests, when(as_of, data), rate
                ),
            )

        return read

    gain, ratio = comparison("change"), comparison("ratio")

    def headline_table(arm, base=None, metrics=("prefill_tps", "decode_tps"), experiments=None):
        chosen = [data_of(e) for e in (experiments or list(datas))]
        chosen = [d for d in chosen if d is not None]
        return tables.headline_table(chosen or [first], arm, base, list(metrics))

    def predicted(metric, arm, concurrency, base=None, chip=None, experiment=None, as_of=None, data=None):
        kind = "value" if base is None else "change"
        return value(
            experiment,
            kind,
            lambda d: predicted_values.predicted(d, metric, arm, concurrency, base, chip, when(as_of, data)),
        )

    def crossover(arm, base=None, measured=False, chip=None, experiment=None, as_of=None, data=None):
        return value(
            experiment,
            "value",
            lambda d: predicted_values.crossover(d, arm, base, measured, chip, when(as_of, data)),
        )

    def prediction_chart(arms=None, base=None, experiment=None):
        return block(experiment, lambda d: prediction.prediction_chart(d, arms, base))

    def claim(stated, measured, within=None):
        return first.values.claim(stated, measured, within)

    def verdict(measured, at_least=None, at_most=None):
        """The value's verdict mark: faster, slower, level within ±δ, undecided; with
        at_least= or at_most= (a figure such as "-3%" or "0.97x"), the bound's."""
        if at_least is None and at_most is None:
            return measured_mark(measured)
        if at_least is not None and at_most is not None:
            first.fail("verdict(...) takes at_least= or at_most=, not both")
            return Markup("")
        try:
            return bound_mark(measured, str(at_most if at_least is None else at_least), at_least is not None)
        except ClaimSyntaxError as e:
            first.fail(str(e))
            return Markup("")

    def traffic(profile, label="traffic", base=None, experiment=None):
        return block(experiment, lambda d: traffic_choice.traffic(d, profile, label, base))

    def traffic_speed(profile, arm, chip=None, experiment=None, as_of=None, data=None):
        return value(
            experiment, "value", lambda d: traffic_choice.speed(d, profile, arm, chip, when(as_of, data))
        )

    def traffic_gain(profile, arm, base=None, chip=None, experiment=None, as_of=None, data=None):
        return value(
            experiment,
            "change",
            lambda d: traffic_choice.gain(d, profile, arm, base, chip, when(as_of, data)),
        )

    def traffic_best(profile, chip=None, experiment=None, as_of=None, data=None):
        d = data_of(experiment)
        return "" if d is None else traffic_choice.best_arm(d, profile, chip, when(as_of, data))

    def capacity(arm, attainment=0.9, concurrency=None, chip=None, experiment=None, as_of=None):
        return value(
            experiment, "value", lambda d: capacity_value(d, arm, attainment, concurrency, chip, as_of)
        )

    def capacity_chart(metrics=load_charts.DEFAULT_METRICS, concurrency=None, rates=None, experiment=None):
        return block(experiment, lambda d: load_charts.capacity_chart(d, metrics, concurrency, rates))

    def pareto_chart(rates=None, experiment=None):
        return block(experiment, lambda d: load_charts.pareto_chart(d, rates))

    return {
        "capacity": capacity,
        "capacity_chart": capacity_chart,
        "pareto_chart": pareto_chart,
        "regime_table": regime_table,
        "headline_table": headline_table,
        "chart": chart,
        "timeline_chart": timeline_chart,
        "metric": metric,
        "gain": gain,
        "ratio": ratio,
        "claim": claim,
        "verdict": verdict,
        "predicted": predicted,
        "crossover": crossover,
        "prediction_chart": prediction_chart,
        "drafted_by_width_chart": drafted_by_width_chart,
        "acceptance_by_position_chart": acceptance_by_position_chart,
        "acceptance_at": acceptance_at,
        "traffic": traffic,
        "traffic_speed": traffic_speed,
        "traffic_gain": traffic_gain,
        "traffic_best": traffic_best,
        "experiment": default,
        "experiments": list(datas),
    }
