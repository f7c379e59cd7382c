"""The load charts of a post: `capacity_chart()` and `pareto_chart()`.

- capacity_chart(metrics=..., concurrency=None, rates=None): each metric (goodput and the
  SLO metrics' p90/p99 by default) against the offered rate of a rate sweep, one figure per
  chip (chip tabs, as every chart), one line per arm with its 95% intervals, the
  declared SLO a dashed line on the TTFT and TPOT charts. At the sweep's largest
  concurrency unless one is named.
- rates= (both charts): only these swept rates. A sweep re-declared with other rates keeps
  its old rates' runs in the record, and a chart draws the newest run of every rate ever
  swept: naming the new declaration's rates keeps one sitting's sweep on one chart.
- pareto_chart(rates=None): per-user decode speed (decode_tps) against aggregate throughput
  (aggregate_tps), one point per concurrency (and per rate in a sweep), per arm and chip:
  how much speed each user gives up for how much throughput.
Figures come from blocks.chip_figures; values from views.View, per rate through
queries.RateReader. Nothing here queries SQL itself.
"""

from __future__ import annotations

from markupsafe import Markup

from runner.publish.blocks import charts
from runner.publish.blocks.chart_blocks import chip_figures
from runner.publish.blocks.templating import render_block
from runner.publish.metrics import METRICS
from runner.publish.sql import pages, sweep_queries, sweeps
from runner.publish.stats.views import View

DEFAULT_METRICS = ("goodput_rps", "ttft_p90_ms", "ttft_p99_ms", "tpot_p90_ms", "tpot_p99_ms")


def _rate_views(data, only=None, block: str = "capacity_chart") -> tuple[dict[float, View], str | None]:
    """A view per swept rate (all, or `only` those), or the problem when `only` names a
    rate that was not swept."""
    rates = data.reader.sweeps.sweep_rates(data.experiment, data.quick)
    if only is not None:
        wanted = [float(r) for r in (only if isinstance(only, (list, tuple)) else [only])]
        missing = [r for r in wanted if r not in rates]
        if missing:
            swept = ", ".join(f"{r:g}" for r in rates) or "none"
            return {}, f"{block}: rate {missing[0]:g} was not swept (swept rates: {swept})"
        rates = sorted(set(wanted))
    views = {
        r: View(sweep_queries.RateReader(data.reader, r), data.experiment, data.quick, None) for r in rates
    }
    return views, None


def _not_drawn(data, why: str) -> Markup:
    data.fail(why)
    return data.token(render_block("block_error.html", message="chart not drawn"), "")


def _point(cell) -> tuple:
    return cell.mean, cell.mean if cell.lo is None else cell.lo, cell.mean if cell.hi is None else cell.hi


def _series(chip: str, arm: str, pts: list[tuple]) -> charts.Series:
    """One arm's line on one chip from (x, _point(...)) pairs."""
    return charts.Series(
        chip,
        arm,
        tuple(x for x, _ in pts),
        tuple(p[0] for _, p in pts),
        tuple(p[1] for _, p in pts),
        tuple(p[2] for _, p in pts),
    )


def _log_rates(fig: dict) -> None:
    """Swept rates usually double: on a log axis they are evenly spaced, and the low ones
    (0.25, 0.5) do not crowd their tick labels together."""
    for key, axis in fig["layout"].items():
        if key.startswith("xaxis"):
            axis["type"] = "log"


def _decorate(limit):
    def decorate(fig: dict) -> None:
        _log_rates(fig)
        if limit is not None:
            _slo_line(fig, 1, limit)

    return decorate


def _slo_line(fig: dict, n_panels: int, y: float) -> None:
    for i in range(n_panels):
        suffix = "" if i == 0 else str(i + 1)
        fig["layout"]["shapes"].append(
            {
                "type": "line",
                "xref": f"x{suffix} domain",
                "yref": f"y{suffix}",
                "x0": 0,
                "x1": 1,
                "y0": y,
                "y1": y,
                "line": {"dash": "dash", "width": 1, "color": "#d62728"},
            }
        )


def _free_x(fig: dict) -> None:
    """The Pareto chart's x axis is a measured throughput: no ticks fixed, from zero."""
    for name, axis in fig["layout"].items():
        if name.startswith("xaxis"):
            axis.pop("tickvals", None)
            axis.pop("ticktext", None)
            axis["rangemode"] = "tozero"


def capacity_chart(data, metrics=DEFAULT_METRICS, concurrency=None, rates=None) -> Markup:
    views, problem = _rate_views(data, rates)
    if problem:
        return _not_drawn(data, problem)
    if not views:
        return _not_drawn(
            data, "capacity_chart: the experiment has no rate sweep (arrivals.rate must be a list)"
        )
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        return _not_drawn(data, f"capacity_chart: unknown metric {unknown[0]!r}")
    rates = sorted(views)
    concs = sorted({k for v in views.values() for (_, _, k) in v.measured})
    conc = int(concurrency) if concurrency is not None else concs[-1]
    chips = sorted({c for v in views.values() for (c, _, _) in v.measured})
    slo = data.reader.sweeps.slo(data.experiment, data.quick)
    html = []
    for metric in metrics:
        spec = METRICS[metric]
        series = []
        for chip in chips:
            for arm in data.arm_order:
                pts = [(r, views[r].cells.get((chip, arm, conc, metric))) for r in rates]
                pts = [(r, _point(c)) for r, c in pts if c is not None and c.mean is not None]
                series.append(_series(chip, arm, pts))
        limit = (
            slo.get("ttft_ms")
            if metric.startswith("ttft")
            else slo.get("tpot_ms")
            if metric.startswith("tpot")
            else None
        )
        body = chip_figures(
            data,
            f"capacity-{metric}-{conc}",
            series,
            decorate=_decorate(limit),
            regime_x={},
            x_title="offered rate (req/s)",
            y_title=f"{spec.label} ({spec.unit})" if spec.unit else spec.label,
            x_ticks=[(r, f"{r:g}") for r in rates],
        )
        html.append(
            render_block(
                "chart.html",
                body=body,
                caption=f"{spec.label} by offered rate at concurrency {conc}; bars show "
                "the 95% interval" + ("; the dashed line is the declared SLO" if limit is not None else ""),
                sql_href=data.register_sql(
                    "capacity", pages.inline_sql(sweeps.at_rate(pages.RUN_VALUES_SQL), data.params)
                ),
            )
        )
    return data.token("".join(html), "")


def pareto_chart(data, rates=None) -> Markup:
    views, problem = _rate_views(data, rates, "pareto_chart")
    if problem:
        return _not_drawn(data, problem)
    views = views or {None: data.now}
    chips = sorted({c for v in views.values() for (c, _, _) in v.measured})
    series = []
    for chip in chips:
        for arm in data.arm_order:
            pts = []
            for view in views.values():
                for c, a, k in sorted(view.measured):
                    agg, dec = (
                        view.cells.get((c, a, k, "aggregate_tps")),
                        view.cells.get((c, a, k, "decode_tps")),
                    )
                    if (
                        c == chip
                        and a == arm
                        and agg is not None
                        and dec is not None
                        and dec.mean is not None
                    ):
                        pts.append((agg.mean, _point(dec)))
            pts.sort()
            series.append(_series(chip, arm, [(round(x, 6), p) for x, p in pts]))
    body = chip_figures(
        data,
        "pareto",
        series,
        decorate=_free_x,
        regime_x={},
        x_title="aggregate throughput (tok/s)",
        y_title="decode / user (tok/s)",
        x_ticks=[],
    )
    what = "concurrency and offered rate" if None not in views else "concurrency"
    html = render_block(
        "chart.html",
        body=body,
        caption=f"Per-user decode speed against aggregate throughput, one point per {what}; "
        "bars show the 95% interval of the decode speed",
        sql_href=data.register_sql("pareto", pages.inline_sql(pages.RUN_VALUES_SQL, data.params)),
    )
    return data.token(html, "")
