"""The data blocks a post places: the regime table and the charts. Each turns a
PostData's cached cells into a block template and records the SQL behind it for download.
Argument problems are recorded as failures and the block renders an explicit message.
"""
from __future__ import annotations

from markupsafe import Markup

from runner.publish import charts, queries
from runner.publish.functions import PostData
from runner.publish.metrics import METRICS
from runner.publish.templating import render_block


def _fmt(value: float | None, decimals: int) -> str:
    return "" if value is None else f"{value:,.{decimals}f}"


def _arm_order(data: PostData, base: str) -> list[str]:
    return sorted(data.regimes.arms, key=lambda a: (a != base, a))


def regime_table(data: PostData, metrics: list, base: str = "off") -> Markup:
    metrics = [metrics] if isinstance(metrics, str) else list(metrics or [])
    bad = [m for m in metrics if m not in METRICS]
    if bad or not metrics:
        data.fail(f"regime_table: unknown metrics {bad}; known: {', '.join(METRICS)}" if bad
                  else "regime_table needs at least one metric")
        metrics = [m for m in metrics if m in METRICS]
    if base not in data.regimes.arms:
        data.fail(f"regime_table: base arm {base!r} is not an arm of {data.experiment!r} "
                  f"(arms: {', '.join(data.regimes.arms)})")
    number = len(data.sql) + 1
    sql_name = f"table-{number}.sql"
    data.sql[sql_name] = queries.inline_sql(queries.CELLS_SQL, data.params)
    rows = []
    for chip in data.regimes.chips:
        for arm in _arm_order(data, base):
            for conc in data.regimes.concurrencies:
                cells = []
                for m in metrics:
                    spec, cell = METRICS[m], data.cells.get((chip, arm, conc, m))
                    base_cell = data.cells.get((chip, base, conc, m))
                    ratio = (cell.mean / base_cell.mean if cell and base_cell and arm != base
                             and cell.mean is not None and base_cell.mean else None)
                    spread = (_fmt(cell.lo, spec.decimals), _fmt(cell.hi, spec.decimals)) if cell else ("", "")
                    cells.append({
                        "value": _fmt(cell.mean, spec.decimals) if cell else None,
                        "spread": f"{spread[0]}\u2013{spread[1]}" if spread[0] != spread[1] else "",
                        "ratio": f"\u00d7{ratio:.2f}" if ratio is not None else ""})
                measured = any((chip, arm, conc, m) in data.cells for m in METRICS)
                rows.append({"chip": data.chip_names.get(chip, chip), "arm": arm,
                             "concurrency": conc, "regime": data.regimes.regime_of(conc),
                             "measured": measured, "cells": cells})
    html = render_block("regime_table.html", metrics=[METRICS[m] for m in metrics], rows=rows,
                        base=base, sql_href=data.href(sql_name), number=number)
    return data.token(html, "")


def _series(data: PostData, metric: str) -> list[charts.Series]:
    out = []
    for chip in data.regimes.chips:
        for arm in data.regimes.arms:
            pts = [(c, data.cells.get((chip, arm, c, metric))) for c in data.regimes.concurrencies]
            pts = [(c, cell) for c, cell in pts if cell is not None and cell.mean is not None]
            out.append(charts.Series(chip, arm, tuple(charts.concurrency_x(c) for c, _ in pts),
                                     tuple(cell.mean for _, cell in pts),
                                     tuple(cell.lo for _, cell in pts),
                                     tuple(cell.hi for _, cell in pts)))
    return out


def chart(data: PostData, metric: str, x: str = "concurrency") -> Markup:
    if metric not in METRICS or x != "concurrency":
        data.fail(f"chart: unknown metric {metric!r}" if metric not in METRICS else
                  f"chart: x must be 'concurrency', got {x!r}")
        return data.token(render_block("block_error.html", message="chart not drawn"), "")
    spec, reg = METRICS[metric], data.regimes
    fig = charts.panel_figure(
        _series(data, metric), [(c, data.chip_names[c]) for c in reg.chips], list(reg.arms),
        {"batch 1": charts.concurrency_x(1), "ceiling": charts.concurrency_x(reg.ceiling)},
        "concurrency", f"{spec.label} ({spec.unit})" if spec.unit else spec.label,
        [(charts.concurrency_x(c), str(c)) for c in reg.concurrencies])
    div_id = charts.chart_id(data.key, "chart", metric, x, len(data.blocks))
    sql_name = f"chart-{len(data.sql) + 1}.sql"
    data.sql[sql_name] = queries.inline_sql(queries.CELLS_SQL, data.params)
    html = render_block("chart.html", div_id=div_id, figure=charts.figure_json(fig),
                        caption=f"{spec.label} by concurrency, one panel per chip; bars show "
                                "the round-to-round spread", sql_href=data.href(sql_name))
    return data.token(html, "")


def drafted_by_width_chart(data: PostData) -> Markup:
    rows = data.reader.drafted_by_width(data.experiment, data.quick, data.as_of)
    reg = data.regimes
    widths = sorted({w for _, _, w, _, _, _ in rows} | {1, reg.ceiling})
    series = []
    for chip in reg.chips:
        for arm in reg.arms:
            pts = [(w, s) for c, a, w, _, _, s in rows if (c, a) == (chip, arm)]
            ys = tuple(round(s * 100, 4) for _, s in pts)
            series.append(charts.Series(chip, arm, tuple(float(w) for w, _ in pts), ys, ys, ys))
    fig = charts.panel_figure(series, [(c, data.chip_names[c]) for c in reg.chips], list(reg.arms),
                              {"batch 1": 1.0, "ceiling": float(reg.ceiling)}, "batch width",
                              "passes that drafted (%)", [(float(w), str(w)) for w in widths],
                              kind="bars")
    div_id = charts.chart_id(data.key, "drafted_by_width", len(data.blocks))
    sql_name = f"chart-{len(data.sql) + 1}.sql"
    data.sql[sql_name] = queries.inline_sql(queries.DRAFTED_BY_WIDTH_SQL, data.params)
    html = render_block("chart.html", div_id=div_id, figure=charts.figure_json(fig),
                        caption="share of passes at each batch width that carried drafts, "
                                "one panel per chip", sql_href=data.href(sql_name))
    return data.token(html, "")
