"""The functions a post body may call: its whole vocabulary.

Closures over the post's PostData (one per experiment), so no object with internals is
reachable from the sandbox. Every function takes `experiment=` (default: the post's
first experiment); comparisons take `base=` (default: the post's base arm, see
`postdata.PostData.base`); values take `chip=` (default: the judging chip, the post's
home unless the claims-on-every-chip table is being filled); values and tables take
`requests=` (a request label of a scripted workload: the figures of those requests only);
values take `as_of=` (a day: a claim in a dated update section is judged on the data as
of its own day, not the post's).
"""

from __future__ import annotations

from runner.publish import blocks, tables, timelines
from runner.publish import traffic as traffic_choice
from runner.publish.postdata import PostData
from runner.publish.templating import render_block


def post_api(datas: dict[str, PostData], default: str) -> dict:
    first = datas[default]

    def data(experiment) -> PostData | None:
        if experiment is None or experiment in datas:
            return datas[default if experiment is None else experiment]
        first.fail(
            f"unknown experiment {experiment!r}; this post draws on " + ", ".join(repr(e) for e in datas)
        )
        return None

    def value(experiment, kind, read):
        d = data(experiment)
        if d is None:
            return first.measured(
                None, None, None, 0, kind, f"a value of experiment {experiment!r}", "", set()
            )
        return read(d)

    def block(experiment, draw):
        d = data(experiment)
        return (
            first.token(render_block("block_error.html", message="block not drawn"), "")
            if d is None
            else draw(d)
        )

    def regime_table(metrics, base=None, experiment=None, requests=None, folded=True):
        return block(experiment, lambda d: tables.regime_table(d, metrics, base, requests, bool(folded)))

    def chart(metric, x="concurrency", experiment=None, requests=None):
        return block(experiment, lambda d: blocks.chart(d, metric, x, requests))

    def timeline_chart(concurrency=None, round=0, chip=None, experiment=None):
        return block(experiment, lambda d: timelines.timeline_chart(d, concurrency, round, chip))

    def drafted_by_width_chart(experiment=None):
        return block(experiment, blocks.drafted_by_width_chart)

    def metric(name, arm, concurrency, chip=None, experiment=None, requests=None, as_of=None):
        return value(experiment, "value", lambda d: d.metric(name, arm, concurrency, chip, requests, as_of))

    def gain(metric, arm, base=None, concurrency=1, chip=None, experiment=None, requests=None, as_of=None):
        return value(
            experiment,
            "change",
            lambda d: d.compare(metric, arm, base, concurrency, chip, "change", requests, as_of),
        )

    def ratio(metric, arm, base=None, concurrency=1, chip=None, experiment=None, requests=None, as_of=None):
        return value(
            experiment,
            "ratio",
            lambda d: d.compare(metric, arm, base, concurrency, chip, "ratio", requests, as_of),
        )

    def headline_table(arm, base=None, metrics=("prefill_tps", "decode_tps"), experiments=None):
        chosen = [data(e) for e in (experiments or list(datas))]
        chosen = [d for d in chosen if d is not None]
        return tables.headline_table(chosen or [first], arm, base, list(metrics))

    def claim(stated, measured):
        return first.claim(stated, measured)

    def traffic(profile, label="traffic", base=None, experiment=None):
        return block(experiment, lambda d: traffic_choice.traffic(d, profile, label, base))

    def traffic_speed(profile, arm, chip=None, experiment=None, as_of=None):
        return value(experiment, "value", lambda d: traffic_choice.speed(d, profile, arm, chip, as_of))

    def traffic_gain(profile, arm, base=None, chip=None, experiment=None, as_of=None):
        return value(experiment, "change", lambda d: traffic_choice.gain(d, profile, arm, base, chip, as_of))

    def traffic_best(profile, chip=None, experiment=None, as_of=None):
        d = data(experiment)
        return "" if d is None else traffic_choice.best_arm(d, profile, chip, as_of)

    return {
        "regime_table": regime_table,
        "headline_table": headline_table,
        "chart": chart,
        "timeline_chart": timeline_chart,
        "metric": metric,
        "gain": gain,
        "ratio": ratio,
        "claim": claim,
        "drafted_by_width_chart": drafted_by_width_chart,
        "traffic": traffic,
        "traffic_speed": traffic_speed,
        "traffic_gain": traffic_gain,
        "traffic_best": traffic_best,
        "experiment": default,
        "experiments": list(datas),
    }
