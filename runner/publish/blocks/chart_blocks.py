"""The charts a post places (the tables are in `tables.py`).

- Each turns a PostData's cached cells into a chart block and records the SQL behind it
  for download; argument problems are recorded as failures and the block renders an
  explicit message.
- One chart per chip, as content tabs when there are several (`chiptabs.py`); an arm
  keeps the post's colour for it in every chart.
"""

from __future__ import annotations

from markupsafe import Markup

from runner.publish.blocks import charts
from runner.publish.blocks.chiptabs import ChipPane, chip_tabs
from runner.publish.blocks.postdata import PostData
from runner.publish.blocks.tables import set_id
from runner.publish.blocks.templating import render_block
from runner.publish.metrics import ACCEPTANCE_METRICS, METRICS
from runner.publish.sql import pages, sweeps
from runner.publish.sql.rows import WidthKey, WidthRuns
from runner.publish.stats import instance_spread
from runner.publish.stats.intervals import share_interval
from runner.publish.stats.rate_views import rate_text, rate_view, shown_rates


def _line(chip, arm, pts, x_of, label=None, dash=None) -> charts.Series:
    """One line from (x, cell) pairs, cells without a value left out."""
    pts = [(x, cell) for x, cell in pts if cell is not None and cell.mean is not None]
    return charts.Series(
        chip,
        arm,
        tuple(x_of(x) for x, _ in pts),
        tuple(cell.mean for _, cell in pts),
        tuple(cell.mean if cell.lo is None else cell.lo for _, cell in pts),
        tuple(cell.mean if cell.hi is None else cell.hi for _, cell in pts),
        label,
        dash,
    )


def _series(data: PostData, metric: str, views: dict) -> list[charts.Series]:
    """By concurrency: one line per arm, and per offered rate on a sweep (views: rate -> View)."""
    out = []
    for chip in data.regimes.chips:
        for arm in data.arm_order:
            if len(views) == 1 and (lines := _instance_lines(data, metric, chip, arm, *views.values())):
                out += lines  # a level of several instances: a line each, never their pooled mean
                continue
            for i, (rate, view) in enumerate(views.items()):
                pts = [(c, view.cells.get((chip, arm, c, metric))) for c in data.regimes.concurrencies]
                label = None if len(views) == 1 else f"{arm} at {rate_text(rate)}"
                dash = None if len(views) == 1 else charts.DASHES[i % len(charts.DASHES)]
                out.append(_line(chip, arm, pts, charts.concurrency_x, label, dash))
    return out


def _instance_lines(data: PostData, metric: str, chip: str, arm: str, view) -> list[charts.Series]:
    """One line per instance of the class (None when its cells are one instance's)."""
    concs = data.regimes.concurrencies
    by_conc = {c: instance_spread.instance_levels(view, metric, chip, arm, c) for c in concs}
    instances = sorted({k for levels in by_conc.values() for k in levels})
    if len(instances) < 2:
        return []
    return [
        _line(
            chip,
            arm,
            [(c, by_conc[c].get(k)) for c in concs],
            charts.concurrency_x,
            f"{arm}, instance {k + 1}",
            charts.DASHES[i % len(charts.DASHES)],
        )
        for i, k in enumerate(instances)
    ]


def _rate_series(data: PostData, metric: str, views: dict) -> list[charts.Series]:
    """By offered rate: one line per arm, and per concurrency when there are several."""
    concs = data.regimes.concurrencies
    out = []
    for chip in data.regimes.chips:
        for arm in data.arm_order:
            for i, c in enumerate(concs):
                pts = [(r, v.cells.get((chip, arm, c, metric))) for r, v in views.items()]
                label = None if len(concs) == 1 else f"{arm}, concurrency {c}"
                dash = None if len(concs) == 1 else charts.DASHES[i % len(charts.DASHES)]
                out.append(_line(chip, arm, pts, float, label, dash))
    return out


def chip_figures(data: PostData, name: str, series: list[charts.Series], decorate=None, **axes) -> Markup:
    """One figure per chip (its series only), as chip tabs when there are several; axes:
    panel_figure's arguments after the chips and arms; decorate(fig): what a chart adds to
    each chip's figure (a declared limit, say)."""
    panes = []
    for chip in data.regimes.chips:
        fig = charts.panel_figure(
            [s for s in series if s.chip_id == chip],
            [(chip, data.chip_names[chip])],
            list(data.arm_order),
            colors=data.state.arm_colors,
            **axes,
        )
        if decorate is not None:
            decorate(fig)
        div_id = charts.chart_id(data.key, name, chip, len(data.state.blocks))
        panes.append(ChipPane(chip, data.chip_names[chip], figure_div(div_id, fig)))
    return chip_tabs(panes, data.judging.chip_id, set_id(data, name))


def figure_div(div_id: str, fig: dict) -> str:
    return render_block("chart_div.html", div_id=div_id, figure=charts.figure_json(fig))


def chart(
    data: PostData, metric: str, x: str | None = None, requests: str | None = None, rate=None
) -> Markup:
    """metric by concurrency (one line per arm), or on a rate sweep by offered rate (the
    default there: one line per arm and concurrency); by concurrency on a sweep, one line
    per arm and rate unless `rate=` names one."""
    x = x or ("rate" if data.rates else "concurrency")
    if metric not in METRICS or x not in ("concurrency", "rate") or (x == "rate" and not data.rates):
        data.fail(
            f"chart: unknown metric {metric!r}"
            if metric not in METRICS
            else f"chart: x must be 'concurrency' or, on a rate sweep, 'rate'; got {x!r}"
        )
        return data.token(render_block("block_error.html", message="chart not drawn"), "")
    spec, reg = METRICS[metric], data.regimes
    views = {r: rate_view(data, requests, r) for r in shown_rates(data, rate, "chart")}
    if x == "rate":
        axes = {
            "series": _rate_series(data, metric, views),
            "regime_x": {},
            "x_title": "offered rate (req/s)",
            "x_ticks": [(r, f"{r:g}") for r in views],
        }
    else:
        axes = {
            "series": _series(data, metric, views),
            "regime_x": {"batch 1": charts.concurrency_x(1), "ceiling": charts.concurrency_x(reg.ceiling)},
            "x_title": "concurrency",
            "x_ticks": [(charts.concurrency_x(c), str(c)) for c in reg.concurrencies],
        }
    series = axes.pop("series")
    body = chip_figures(
        data,
        f"chart-{metric}" if x == "concurrency" else f"chart-{metric}-{x}",
        series,
        y_title=f"{spec.label} ({spec.unit})" if spec.unit else spec.label,
        **axes,
    )
    query = pages.RUN_VALUES_SQL if None in views else sweeps.at_rate(pages.RUN_VALUES_SQL)
    sql_href = data.register_sql("chart", pages.inline_sql(query, data.params))
    swept = "" if None in views else f" at {', '.join(rate_text(r) for r in views)}" if x != "rate" else ""
    html = render_block(
        "chart.html",
        body=body,
        caption=f"{spec.label}{'' if requests is None else f' of the {requests} requests'} "
        f"by {'offered rate' if x == 'rate' else 'concurrency'}{swept}; bars show the 95% interval "
        "(a t interval over the rounds)",
        sql_href=sql_href,
    )
    return data.token(html, "")


def _not_measured(data: PostData, metric: str) -> tuple[list[str], str]:
    """The arms whose runtime records none of a per-pass metric, and the one line the page
    says about them instead of drawing them as empty or zero."""
    absent = [a for a in data.arm_order if data.values.missing_reason(metric, a)]
    by_reason: dict[str, list[str]] = {}
    for arm in absent:
        by_reason.setdefault(data.values.missing_reason(metric, arm), []).append(arm)
    label = METRICS[metric].label
    return absent, "; ".join(
        f"{label[0].upper() + label[1:]} {reason} (arm{'s' if len(arms) > 1 else ''} {', '.join(arms)})"
        for reason, arms in by_reason.items()
    )


def _drafted_share(runs: dict[WidthKey, WidthRuns], key: WidthKey):
    """The share of passes that drafted at one width, with its interval over runs."""
    return share_interval(runs[key].passes, runs[key].drafted)


def drafted_by_width_chart(data: PostData) -> Markup:
    absent, line = _not_measured(data, "drafted_passes")
    note = str(Markup('<p class="bothrows-absent">{}.</p>').format(line)) if line else ""
    if absent and len(absent) == len(data.arm_order):
        return data.token(note, "")
    runs = data.reader.drafted_by_width_runs(data.experiment, data.quick)
    reg = data.regimes
    widths = sorted({k.width for k in runs} | {1, reg.ceiling})
    series = []
    for chip in reg.chips:
        for arm in [a for a in data.arm_order if a not in absent]:
            pts = [
                (w, _drafted_share(runs, WidthKey(chip, arm, w))) for w in widths if (chip, arm, w) in runs
            ]
            pct = lambda v: None if v is None else round(v * 100, 4)  # noqa: E731
            series.append(
                charts.Series(
                    chip,
                    arm,
                    tuple(float(w) for w, _ in pts),
                    tuple(pct(e.value) for _, e in pts),
                    tuple(pct(e.value if e.lo is None else e.lo) for _, e in pts),
                    tuple(pct(e.value if e.hi is None else e.hi) for _, e in pts),
                )
            )
    body = chip_figures(
        data,
        "drafted-by-width",
        series,
        regime_x={"batch 1": 1.0, "ceiling": float(reg.ceiling)},
        x_title="batch width",
        y_title="passes that drafted (%)",
        x_ticks=[(float(w), str(w)) for w in widths],
        kind="bars",
    )
    sql_href = data.register_sql("chart", pages.inline_sql(pages.DRAFTED_BY_WIDTH_RUNS_SQL, data.params))
    html = render_block(
        "chart.html",
        body=body,
        caption="share of passes at each batch width that carried drafts; bars show the 95% "
        "interval from resampling the runs",
        sql_href=sql_href,
    )
    return data.token(note + html, "")


def acceptance_by_position_chart(data: PostData, concurrency: object = 1) -> Markup:
    """Acceptance at draft positions 1..k of each drafting arm at one concurrency, one line
    an arm and chip, with the t interval over rounds of each position's figure."""
    if isinstance(concurrency, bool) or concurrency not in data.regimes.concurrencies:
        data.fail(
            f"acceptance_by_position_chart: concurrency {concurrency!r} is not one of "
            f"{list(data.regimes.concurrencies)}"
        )
        return data.token(render_block("block_error.html", message="chart not drawn"), "")
    absent, line = _not_measured(data, "accepted_length")
    note = str(Markup('<p class="bothrows-absent">{}.</p>').format(line)) if line else ""
    if absent and len(absent) == len(data.arm_order):
        return data.token(note, "")
    view, series = data.values.view(None, now=True), []
    pct = lambda v: round(v * 100, 4)  # noqa: E731
    for chip in data.regimes.chips:
        for arm in [a for a in data.arm_order if a not in absent]:
            cells = [view.cells.get((chip, arm, concurrency, m)) for m in ACCEPTANCE_METRICS]
            pts = [(i, c) for i, c in enumerate(cells, 1) if c is not None and c.mean is not None]
            if pts:  # an arm that never drafted has no line
                series.append(
                    charts.Series(
                        chip,
                        arm,
                        tuple(float(i) for i, _ in pts),
                        tuple(pct(c.mean) for _, c in pts),
                        tuple(pct(c.mean if c.lo is None else c.lo) for _, c in pts),
                        # a share: Intervals.estimate already stops its interval at 100%
                        tuple(pct(c.mean if c.hi is None else c.hi) for _, c in pts),
                    )
                )
    if not series:
        data.fail(f"acceptance_by_position_chart: no arm drafted at concurrency {concurrency}")
        return data.token(note + render_block("block_error.html", message="chart not drawn"), "")
    positions = sorted({int(x) for s in series for x in s.x})
    body = chip_figures(
        data,
        f"acceptance-by-position-{concurrency}",
        series,
        regime_x={},
        x_title="draft position",
        y_title="acceptance (%)",
        x_ticks=[(float(i), str(i)) for i in positions],
    )
    sql_href = data.register_sql("chart", pages.inline_sql(pages.RUN_VALUES_SQL, data.params))
    html = render_block(
        "chart.html",
        body=body,
        caption=f"share of drafting rows' passes at concurrency {concurrency} that kept at least i "
        "drafts, among those that carried at least i, by draft position i; bars show the 95% "
        "interval (a t interval over the rounds)",
        sql_href=sql_href,
    )
    return data.token(note + html, "")
