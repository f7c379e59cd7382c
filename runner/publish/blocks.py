"""The data blocks a post places: the regime table and the charts. Each turns a
PostData's cached cells into a block template and records the SQL behind it for download.
Argument problems are recorded as failures and the block renders an explicit message.
"""

from __future__ import annotations

from markupsafe import Markup

from runner.publish import charts, sql
from runner.publish.intervals import share_interval
from runner.publish.metrics import METRICS
from runner.publish.postdata import PostData
from runner.publish.rows import WidthKey, WidthRuns
from runner.publish.templating import render_block

GROUP = 4


def _fmt(value: float | None, decimals: int) -> str:
    return "" if value is None else f"{value:,.{decimals}f}"


def _interval(lo: float | None, hi: float | None, decimals: int) -> str:
    if lo is None or hi is None:
        return ""
    return f"{_fmt(lo, decimals)}\u2013{_fmt(hi, decimals)}"


def _metrics(data: PostData, metrics, block: str) -> list[str]:
    """The known metrics of a block's argument; unknown ones (or none) are a failure."""
    metrics = [metrics] if isinstance(metrics, str) else list(metrics or [])
    bad = [m for m in metrics if m not in METRICS]
    if bad or not metrics:
        data.fail(
            f"{block}: unknown metrics {bad}; known: {', '.join(METRICS)}"
            if bad
            else f"{block} needs at least one metric"
        )
    return [m for m in metrics if m in METRICS]


def _arm_order(data: PostData, base: str) -> list[str]:
    return sorted(data.arm_order, key=lambda a: a != base)


def regime_table(
    data: PostData, metrics: list, base: str | None = None, requests: str | None = None
) -> Markup:
    base = data.base if base is None else base
    view = data.view(requests, now=True)
    metrics = _metrics(data, metrics, "regime_table")
    if base not in data.regimes.arms:
        data.fail(
            f"regime_table: base arm {base!r} is not an arm of {data.experiment!r} "
            f"(arms: {', '.join(data.arm_order)})"
        )
    number = len(data.state.sql) + 1
    sql_href = data.register_sql("table", sql.inline_sql(sql.RUN_VALUES_SQL, data.params))
    rows = []
    for chip in data.regimes.chips:
        for arm in _arm_order(data, base):
            for conc in data.regimes.concurrencies:
                cells = [_cell(data, view, m, chip, arm, base, conc) for m in metrics]
                measured = (chip, arm, conc) in data.now.measured
                rows.append(
                    {
                        "chip": data.chip_names.get(chip, chip),
                        "arm": arm,
                        "concurrency": conc,
                        "regime": data.regimes.regime_of(conc),
                        "measured": measured,
                        "cells": cells,
                        "busy": (chip, arm, conc) in data.busy,
                        "short": data.short.get((chip, arm, conc)),
                    }
                )
    # At most GROUP metric columns a table, so a table fits the page's content column.
    groups = [list(range(i, min(i + GROUP, len(metrics)))) for i in range(0, len(metrics), GROUP)] or [[]]
    html = render_block(
        "regime_table.html",
        groups=[
            {
                "metrics": [METRICS[metrics[i]] for i in g],
                "rows": [{**r, "cells": [r["cells"][i] for i in g]} for r in rows],
            }
            for g in groups
        ],
        base=base,
        sql_href=sql_href,
        number=number,
        requests=requests,
    )
    return data.token(html, "")


def _cell(data: PostData, view, m: str, chip: str, arm: str, base: str, conc: int) -> dict:
    spec, cell = METRICS[m], view.cells.get((chip, arm, conc, m))
    ratio = (
        view.compare(m, chip, arm, base, conc, "ratio")
        if cell is not None and arm != base and base in data.regimes.arms
        else None
    )
    return {
        "value": _fmt(cell.mean, spec.decimals) if cell else None,
        "interval": _interval(cell.lo, cell.hi, spec.decimals) if cell else "",
        "ratio": f"\u00d7{ratio.value:.2f}" if ratio and ratio.value is not None else "",
        "ratio_interval": _interval(ratio.lo, ratio.hi, 2) if ratio else "",
    }


def headline_table(datas: list[PostData], arm: str, base: str | None, metrics: list) -> Markup:
    """arm vs base at one sequence and at the ceiling: one row pair per model (experiment)
    and chip, each metric as base -> arm and the change with its 95% interval."""
    first = datas[0]
    metrics = _metrics(first, metrics, "headline_table")
    rows = []
    for data in datas:
        b = data.base if base is None else base
        if not (data.arm_ok(arm) and data.arm_ok(b)):
            continue
        for chip in data.regimes.chips:
            for conc in sorted({1, data.regimes.ceiling}):
                cells = []
                for m in metrics:
                    spec = METRICS[m]
                    on, off = data.cells.get((chip, arm, conc, m)), data.cells.get((chip, b, conc, m))
                    ch = data.now.compare(m, chip, arm, b, conc, "change")
                    cells.append(
                        {
                            "base": _fmt(off.mean, spec.decimals) if off else "not measured",
                            "arm": _fmt(on.mean, spec.decimals) if on else "not measured",
                            "change": "" if ch.value is None else f"{ch.value:+.0%}",
                            "interval": "" if ch.lo is None else f"{ch.lo:+.0%}\u2026{ch.hi:+.0%}",
                        }
                    )
                rows.append(
                    {
                        "model": data.model,
                        "chip": data.chip_names.get(chip, chip),
                        "regime": data.regimes.regime_of(conc) or f"concurrency {conc}",
                        "concurrency": conc,
                        "base": b,
                        "cells": cells,
                    }
                )
    sql_href = first.register_sql(
        "headline", "".join(sql.inline_sql(sql.RUN_VALUES_SQL, d.params) for d in datas)
    )
    html = render_block(
        "headline_table.html", metrics=[METRICS[m] for m in metrics], rows=rows, arm=arm, sql_href=sql_href
    )
    return first.token(html, "")


def _series(data: PostData, metric: str, view) -> list[charts.Series]:
    out = []
    for chip in data.regimes.chips:
        for arm in data.arm_order:
            pts = [(c, view.cells.get((chip, arm, c, metric))) for c in data.regimes.concurrencies]
            pts = [(c, cell) for c, cell in pts if cell is not None and cell.mean is not None]
            out.append(
                charts.Series(
                    chip,
                    arm,
                    tuple(charts.concurrency_x(c) for c, _ in pts),
                    tuple(cell.mean for _, cell in pts),
                    tuple(cell.mean if cell.lo is None else cell.lo for _, cell in pts),
                    tuple(cell.mean if cell.hi is None else cell.hi for _, cell in pts),
                )
            )
    return out


def chart(data: PostData, metric: str, x: str = "concurrency", requests: str | None = None) -> Markup:
    if metric not in METRICS or x != "concurrency":
        data.fail(
            f"chart: unknown metric {metric!r}"
            if metric not in METRICS
            else f"chart: x must be 'concurrency', got {x!r}"
        )
        return data.token(render_block("block_error.html", message="chart not drawn"), "")
    spec, reg = METRICS[metric], data.regimes
    fig = charts.panel_figure(
        _series(data, metric, data.view(requests, now=True)),
        [(c, data.chip_names[c]) for c in reg.chips],
        list(data.arm_order),
        {"batch 1": charts.concurrency_x(1), "ceiling": charts.concurrency_x(reg.ceiling)},
        "concurrency",
        f"{spec.label} ({spec.unit})" if spec.unit else spec.label,
        [(charts.concurrency_x(c), str(c)) for c in reg.concurrencies],
    )
    div_id = charts.chart_id(data.key, "chart", metric, x, len(data.state.blocks))
    sql_href = data.register_sql("chart", sql.inline_sql(sql.RUN_VALUES_SQL, data.params))
    html = render_block(
        "chart.html",
        div_id=div_id,
        figure=charts.figure_json(fig),
        caption=f"{spec.label}{'' if requests is None else f' of the {requests} requests'} "
        "by concurrency, one panel per chip; bars show the 95% interval "
        "(a t interval over the rounds)",
        sql_href=sql_href,
    )
    return data.token(html, "")


def _not_measured(data: PostData, metric: str) -> tuple[list[str], str]:
    """The arms whose runtime records none of a per-pass metric, and the one line the page
    says about them instead of drawing them as empty or zero."""
    absent = [a for a in data.arm_order if data.missing_reason(metric, a)]
    by_reason: dict[str, list[str]] = {}
    for arm in absent:
        by_reason.setdefault(data.missing_reason(metric, arm), []).append(arm)
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
    fig = charts.panel_figure(
        series,
        [(c, data.chip_names[c]) for c in reg.chips],
        list(data.arm_order),
        {"batch 1": 1.0, "ceiling": float(reg.ceiling)},
        "batch width",
        "passes that drafted (%)",
        [(float(w), str(w)) for w in widths],
        kind="bars",
    )
    div_id = charts.chart_id(data.key, "drafted_by_width", len(data.state.blocks))
    sql_href = data.register_sql("chart", sql.inline_sql(sql.DRAFTED_BY_WIDTH_RUNS_SQL, data.params))
    html = render_block(
        "chart.html",
        div_id=div_id,
        figure=charts.figure_json(fig),
        caption="share of passes at each batch width that carried drafts, one "
        "panel per chip; bars show the 95% interval from resampling the runs",
        sql_href=sql_href,
    )
    return data.token(note + html, "")
