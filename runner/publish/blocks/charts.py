"""Rows -> plotly figures: one panel per chip, one trace per arm, batch 1 and the
ceiling marked. Returns figure JSON and a deterministic div id; the HTML around it lives
in `templates/blocks/chart.html`. No querying here, and no plotly Python objects (their
JSON carries a large theme template); figures are plain dicts dumped with sorted keys.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
from dataclasses import dataclass

from markupsafe import Markup

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")  # lines of one arm, in turn
PANEL_GAP = 0.08


@dataclass(frozen=True, slots=True)
class Series:
    """One arm on one chip: x positions with mean, lo and hi (lo/hi may equal mean); `label`
    names the line when an arm has several (one per rate of a sweep, say), each in its
    arm's colour with its own `dash`."""

    chip_id: str
    arm: str
    x: tuple[float, ...]
    mean: tuple[float | None, ...]
    lo: tuple[float | None, ...]
    hi: tuple[float | None, ...]
    label: str | None = None
    dash: str | None = None


def chart_id(*parts: object) -> str:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:12]
    return f"bothrows-chart-{digest}"


def figure_json(figure: dict) -> Markup:
    """JSON that is safe inside a <script> element whatever the names contain."""
    text = json.dumps(figure, sort_keys=True, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)


def _plotly_text(s: str) -> str:
    # plotly reads a small HTML subset in labels; escaping makes names plain text
    return html.escape(str(s), quote=False)


def _panel_axes(i: int, n: int) -> tuple[str, str, dict, dict]:
    width = (1 - PANEL_GAP * (n - 1)) / n
    start = i * (width + PANEL_GAP)
    suffix = "" if i == 0 else str(i + 1)
    xaxis = {"domain": [round(start, 6), round(start + width, 6)], "anchor": f"y{suffix}"}
    yaxis = {"anchor": f"x{suffix}", "rangemode": "tozero"}
    return f"x{suffix}", f"y{suffix}", xaxis, yaxis


def panel_figure(
    series: list[Series],
    chips: list[tuple[str, str]],
    arms: list[str],
    regime_x: dict[str, float],
    x_title: str,
    y_title: str,
    x_ticks: list[tuple[float, str]],
    kind: str = "lines",
    colors: dict[str, str] | None = None,
) -> dict:
    """chips: (chip_id, name) in page order; regime_x: label -> x position to mark;
    colors: arm -> colour, the same in every chart of a post (default: by position)."""
    data, layout = (
        [],
        {
            "showlegend": True,
            "margin": {"l": 50, "r": 10, "t": 40, "b": 50},
            "legend": {"orientation": "h", "y": -0.2},
            "shapes": [],
            "annotations": [],
            "height": 360,
            "paper_bgcolor": "rgba(0,0,0,0)",
            "plot_bgcolor": "rgba(0,0,0,0)",
        },
    )
    for i, (chip_id, chip_name) in enumerate(chips):
        xref, yref, xaxis, yaxis = _panel_axes(i, len(chips))
        xaxis.update(
            {
                "title": {"text": x_title},
                "tickvals": [t for t, _ in x_ticks],
                "ticktext": [label for _, label in x_ticks],
            }
        )
        yaxis["title"] = {"text": y_title if i == 0 else ""}
        layout["xaxis" + xref[1:]] = xaxis
        layout["yaxis" + yref[1:]] = yaxis
        layout["annotations"].append(
            {
                "text": _plotly_text(chip_name),
                "showarrow": False,
                "xref": f"{xref} domain",
                "yref": "paper",
                "x": 0.5,
                "y": 1.08,
                "xanchor": "center",
            }
        )
        for label, x in sorted(regime_x.items(), key=lambda kv: kv[1]):
            layout["shapes"].append(
                {
                    "type": "line",
                    "xref": xref,
                    "yref": f"{yref} domain",
                    "x0": x,
                    "x1": x,
                    "y0": 0,
                    "y1": 1,
                    "line": {"dash": "dot", "width": 1, "color": "#888"},
                }
            )
            layout["annotations"].append(
                {
                    "text": label,
                    "showarrow": False,
                    "xref": xref,
                    "yref": f"{yref} domain",
                    "x": x,
                    "y": 1.0,
                    "yanchor": "bottom",
                    "font": {"size": 10},
                }
            )
        for s in series:
            if s.chip_id != chip_id:
                continue
            color = (colors or {}).get(s.arm) or PALETTE[arms.index(s.arm) % len(PALETTE)]
            trace = {
                "type": "bar" if kind == "bars" else "scatter",
                "name": _plotly_text(s.label or s.arm),
                "legendgroup": _plotly_text(s.label or s.arm),
                "showlegend": i == 0,
                "x": list(s.x),
                "y": list(s.mean),
                "xaxis": xref,
                "yaxis": yref,
                "marker": {"color": color},
            }
            if kind != "bars":
                trace["mode"] = "lines+markers"
            if s.dash:
                trace["line"] = {"dash": s.dash}
            trace["error_y"] = {
                "type": "data",
                "symmetric": False,
                "array": [_nonneg(h, m) for h, m in zip(s.hi, s.mean)],
                "arrayminus": [_nonneg(m, lo) for lo, m in zip(s.lo, s.mean)],
            }
            data.append(trace)
    return {"data": data, "layout": layout}


def _nonneg(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, a - b)


def concurrency_x(concurrency: int) -> float:
    """Concurrencies double, so they are placed on a log2 scale (linear axis, labelled)."""
    return round(math.log2(concurrency), 6)
