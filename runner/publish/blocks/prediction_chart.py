"""`prediction_chart()`: decode per sequence measured and predicted by width, per chip.

- One panel per chip; for the base and each arm: the measured cells with their 95%
  intervals (markers), the pass-cost model's prediction (line) and its 95% band (from
  resampling runs), widths 1 to 16. The widths beyond the measured ceiling are shaded and
  labelled "extrapolated"; each arm's predicted crossover with the base is marked.
- Under the chart, the held-out check (`predict.Models.held_out`): each arm's largest
  error predicting a concurrency left out of the fit (its own runs there; then every
  arm's), and a warning naming any fit whose held-out error exceeds 20%, never silently.
- Arms whose runtime records no passes are left out with the one line other per-pass
  figures give ("not measured by runtime X").
"""

from __future__ import annotations

from markupsafe import Markup

from runner.publish.blocks import charts
from runner.publish.blocks.chart_blocks import figure_div
from runner.publish.blocks.postdata import PostData
from runner.publish.blocks.predicted_values import models_for, no_passes
from runner.publish.blocks.templating import render_block
from runner.publish.sql import pages, passes
from runner.publish.stats.passcost import MAX_WIDTH, interval_of
from runner.publish.stats.predict import WARN_ABOVE, WIDTHS, predicted_crossover


def _band(fit) -> tuple[list, list, list]:
    d = fit.decode_tps()
    mean = [round(float(d[0, w]), 4) for w in WIDTHS]
    lohi = [interval_of(float(d[0, w]), d[1:, w]) for w in WIDTHS]
    lo = [round(a if a is not None else m, 4) for (a, _), m in zip(lohi, mean)]
    hi = [round(b if b is not None else m, 4) for (_, b), m in zip(lohi, mean)]
    return mean, lo, hi


def _traces(data: PostData, view, models, chip: str, arm: str, i: int, xref: str, yref: str) -> list[dict]:
    color = charts.PALETTE[data.arm_order.index(arm) % len(charts.PALETTE)]
    common = {"legendgroup": arm, "xaxis": xref, "yaxis": yref}
    mean, lo, hi = _band(models.fit(chip, arm))
    out = [
        {
            **common,
            "type": "scatter",
            "mode": "lines",
            "x": list(WIDTHS) + list(WIDTHS)[::-1],
            "y": hi + lo[::-1],
            "fill": "toself",
            "fillcolor": color,
            "opacity": 0.15,
            "line": {"width": 0},
            "hoverinfo": "skip",
            "showlegend": False,
            "name": f"{arm} predicted 95% band",
        },
        {
            **common,
            "type": "scatter",
            "mode": "lines",
            "x": list(WIDTHS),
            "y": mean,
            "line": {"color": color, "dash": "dash"},
            "showlegend": i == 0,
            "name": f"{arm} predicted",
        },
    ]
    cells = [(c, view.cells.get((chip, arm, c, "decode_tps"))) for c in data.regimes.concurrencies]
    cells = [(c, cell) for c, cell in cells if cell is not None and cell.mean is not None]
    out.append(
        {
            **common,
            "type": "scatter",
            "mode": "markers",
            "x": [c for c, _ in cells],
            "y": [cell.mean for _, cell in cells],
            "marker": {"color": color},
            "showlegend": i == 0,
            "name": f"{arm} measured",
            "error_y": {
                "type": "data",
                "symmetric": False,
                "array": [max(0.0, (cell.hi or cell.mean) - cell.mean) for _, cell in cells],
                "arrayminus": [max(0.0, cell.mean - (cell.lo or cell.mean)) for _, cell in cells],
            },
        }
    )
    return out


def _held_out_line(data: PostData, view, models, chip: str, arm: str) -> tuple[str, str | None]:
    """The arm's held-out errors, and what a warning adds to its name when one exceeds
    WARN_ABOVE ("" with its own runs left out, a note when only every arm's left out
    does), None when none does."""
    measured = {
        c: view.cells[(chip, arm, c, "decode_tps")].mean
        for c in data.regimes.concurrencies
        if (chip, arm, c, "decode_tps") in view.cells
    }
    held = [h for h in models.held_out(chip, arm, measured) if h.error is not None]
    tested = [h for h in held if h.testable]
    parts = [f"{h.error:+.0%} at {h.concurrency}" for h in tested]
    parts += [
        f"untestable at {h.concurrency} (the rest of the fit has no drafts)" for h in held if not h.testable
    ]
    worst = max((abs(h.error) for h in tested), default=None)
    head = f"{arm}: within {worst:.0%}" if worst is not None else f"{arm}: no held-out prediction"
    strict = [
        h for h in models.held_out(chip, arm, measured, way="width") if h.error is not None and h.testable
    ]
    strictest = max((abs(h.error) for h in strict), default=None)
    also = "" if strictest is None else f"; every arm's runs there left out too, within {strictest:.0%}"
    line = f"{head} ({', '.join(parts)}){also}; pass times fitted to {models.fit(chip, arm).mape:.0%}"
    if worst is not None and worst > WARN_ABOVE:
        return line, ""
    if strictest is not None and strictest > WARN_ABOVE:
        return line, " (every arm's runs at a concurrency left out)"
    return line, None


def prediction_chart(data: PostData, arms=None, base: str | None = None) -> Markup:
    base = data.base if base is None else base
    arms = [a for a in (data.arm_order if arms is None else arms) if a != base]
    if not all(data.arm_ok(a) for a in [base, *arms]):
        return data.token(render_block("block_error.html", message="prediction chart not drawn"), "")
    absent = [a for a in [base, *arms] if data.values.missing_reason("passes", a)]
    notes = [f"Predicted decode {data.values.missing_reason('passes', a)} (arm {a})" for a in absent]
    shown = [a for a in [base, *arms] if a not in absent]
    view, models = data.values.view(None, now=True), models_for(data, None)
    reg, ceiling = data.regimes, float(data.regimes.ceiling)
    fig = charts.panel_figure(
        [],
        [(c, data.chip_names[c]) for c in reg.chips],
        list(data.arm_order),
        {"batch 1": 1.0, "ceiling": ceiling},
        "batch width (concurrency)",
        "decode / seq (tok/s)",
        [(float(w), str(w)) for w in (1, 2, 4, 8, 12, 16) if w <= MAX_WIDTH],
    )
    held, warn = [], []
    for i, chip in enumerate(reg.chips):
        xref = "x" if i == 0 else f"x{i + 1}"
        yref = "y" if i == 0 else f"y{i + 1}"
        fits = [a for a in shown if models.fit(chip, a) is not None]
        notes += [
            f"Predicted decode on {data.chip_names[chip]} {no_passes(data, models, chip, a)} (arm {a})"
            for a in shown
            if a not in fits
        ]
        fig["layout"]["shapes"].append(
            {
                "type": "rect",
                "xref": xref,
                "yref": f"{yref} domain",
                "x0": ceiling,
                "x1": float(MAX_WIDTH),
                "y0": 0,
                "y1": 1,
                "fillcolor": "#888",
                "opacity": 0.12,
                "line": {"width": 0},
            }
        )
        fig["layout"]["annotations"].append(
            {
                "text": "extrapolated",
                "showarrow": False,
                "xref": xref,
                "yref": f"{yref} domain",
                "x": (ceiling + MAX_WIDTH) / 2,
                "y": 0.02,
                "yanchor": "bottom",
                "font": {"size": 10},
            }
        )
        for arm in fits:
            fig["data"] += _traces(data, view, models, chip, arm, i, xref, yref)
            line, over = _held_out_line(data, view, models, chip, arm)
            held.append(f"{data.chip_names[chip]}, {line}")
            if over is not None:
                warn.append(f"{data.chip_names[chip]}, {arm}{over}")
        for arm in [a for a in fits if a != base and base in fits]:
            x = predicted_crossover(models, chip, arm, base)
            if x.value is None:
                continue
            color = charts.PALETTE[data.arm_order.index(arm) % len(charts.PALETTE)]
            fig["layout"]["shapes"].append(
                {
                    "type": "line",
                    "xref": xref,
                    "yref": f"{yref} domain",
                    "x0": round(x.value, 4),
                    "x1": round(x.value, 4),
                    "y0": 0,
                    "y1": 0.9,
                    "line": {"dash": "dashdot", "width": 1.5, "color": color},
                }
            )
            fig["layout"]["annotations"].append(
                {
                    "text": f"{arm} = {base} at {x.value:.1f}",
                    "showarrow": False,
                    "xref": xref,
                    "yref": f"{yref} domain",
                    "x": round(x.value, 4),
                    "y": 0.92,
                    "xanchor": "left",
                    "font": {"size": 10, "color": color},
                }
            )
    for key in [k for k in fig["layout"] if k.startswith("xaxis")]:
        fig["layout"][key]["range"] = [0.5, MAX_WIDTH + 0.5]
    html = render_block(
        "chart.html",
        body=Markup(
            figure_div(charts.chart_id(data.key, "prediction", base, *arms, len(data.state.blocks)), fig)
        ),
        caption="decode per sequence by batch width: measured (markers, 95% interval) and predicted "
        "by the pass-cost model fitted to every arm's decode passes on the chip (dashed, 95% band "
        "from resampling runs); "
        f"widths beyond the measured ceiling ({reg.ceiling}) are extrapolated",
        sql_href=data.register_sql("chart", pages.inline_sql(passes.PASS_ROWS_SQL, data.params)),
    )
    out = "".join(str(Markup('<p class="bothrows-absent">{}.</p>').format(n)) for n in notes)
    if warn:
        out += str(
            Markup(
                '<div class="admonition warning bothrows-prediction-warning"><p class="admonition-title">'
                "Held-out error above {:.0%}: {}</p><p>These predictions miss a measured "
                "concurrency they were not fitted to by more than that; read them as a sketch.</p></div>"
            ).format(WARN_ABOVE, "; ".join(warn))
        )
    out += html
    out += str(
        Markup(
            '<details class="bothrows-held-out"><summary>Held-out errors: each arm\'s concurrency '
            "predicted from a fit without its runs there</summary><p>Decode per sequence: {}.</p></details>"
        ).format("; ".join(held))
    )
    return data.token(out, "")
