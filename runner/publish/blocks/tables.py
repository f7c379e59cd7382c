"""The data tables a post places: the regime table and the headline table.

- The regime table shows the pair first: each arm at batch 1 and at the ceiling, with its
  change against the base arm and the change's 95% interval. The concurrencies between
  and every metric group sit in a closed fold right under it (still in the page and in
  the downloads); `folded=False` shows the full grid instead.
- More than one chip: one content tab per chip, home first (`chiptabs.py`).
- A rate sweep: one row per arm, concurrency and offered rate, every swept rate unless
  `rate=` names one (`rate_views.py`); each rate's change is against the base arm at the
  same rate.
- Argument problems are recorded as failures; the SQL behind each table is offered for
  download.
"""

from __future__ import annotations

from markupsafe import Markup

from runner.publish.blocks.chiptabs import ChipPane, chip_tabs
from runner.publish.blocks.postdata import PostData
from runner.publish.blocks.templating import render_block
from runner.publish.blocks.verdict_marks import verdict_mark
from runner.publish.metrics import METRICS
from runner.publish.sql import pages, sweeps
from runner.publish.stats import instance_spread
from runner.publish.stats.rate_views import rate_text, rate_view, shown_rates

GROUP = 4


def fmt(value: float | None, decimals: int) -> str:
    return "" if value is None else f"{value:,.{decimals}f}"


def interval_text(lo: float | None, hi: float | None, decimals: int) -> str:
    if lo is None or hi is None:
        return ""
    return f"{fmt(lo, decimals)}\u2013{fmt(hi, decimals)}"


def change_text(value: float | None) -> str:
    return "" if value is None else f"{value:+.0%}"


def change_interval(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f"{lo:+.0%}\u2026{hi:+.0%}"


def known_metrics(data: PostData, metrics, block: str) -> list[str]:
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


def pair_concurrencies(data: PostData) -> list[int]:
    return sorted({1, data.regimes.ceiling})


def set_id(data: PostData, kind: str) -> str:
    return f"bothrows-{kind}-{data.state.token_prefix[-8:].lower()}-{len(data.state.blocks)}"


def regime_table(
    data: PostData,
    metrics: list,
    base: str | None = None,
    requests: str | None = None,
    folded: bool = True,
    rate=None,
) -> Markup:
    base = data.base if base is None else base
    rates = shown_rates(data, rate, "regime_table")
    views = {r: rate_view(data, requests, r) for r in rates}
    metrics = known_metrics(data, metrics, "regime_table")
    if base not in data.regimes.arms:
        data.fail(
            f"regime_table: base arm {base!r} is not an arm of {data.experiment!r} "
            f"(arms: {', '.join(data.arm_order)})"
        )
    number = len(data.state.sql) + 1
    query = pages.RUN_VALUES_SQL if rates == [None] else sweeps.at_rate(pages.RUN_VALUES_SQL)
    sql_href = data.register_sql("table", pages.inline_sql(query, data.params))
    arms = sorted(data.arm_order, key=lambda a: a != base)
    # At most GROUP metric columns a table, so a table fits the page's content column.
    groups = [metrics[i : i + GROUP] for i in range(0, len(metrics), GROUP)] or [[]]
    panes = []
    for chip in data.regimes.chips:
        name = data.chip_names.get(chip, chip)
        rows = [
            _row(data, views[r], metrics, chip, arm, base, conc, r)
            for arm in arms
            for conc in data.regimes.concurrencies
            for r in rates
        ]
        pair = [r for r in rows if r["concurrency"] in pair_concurrencies(data)]
        html = render_block(
            "regime_chip.html",
            chip=name,
            alone=len(data.regimes.chips) == 1,
            swept=rates != [None],
            folded=folded,
            pair={"metrics": [METRICS[m] for m in groups[0]], "rows": pair},
            between=[c for c in data.regimes.concurrencies if c not in pair_concurrencies(data)],
            groups=[
                {
                    "metrics": [METRICS[m] for m in g],
                    "rows": [{**r, "cells": [r["cells"][metrics.index(m)] for m in g]} for r in rows],
                }
                for g in groups
            ],
            more_metrics=len(groups) > 1,
        )
        panes.append(ChipPane(chip, name, html))
    html = render_block(
        "regime_table.html",
        body=chip_tabs(panes, data.judging.chip_id, set_id(data, "regime")),
        base=base,
        sql_href=sql_href,
        number=number,
        requests=requests,
        groups=len(groups),
        folded=folded,
        swept=rates != [None],
        swept_rates=", ".join(f"{r:g}" for r in rates if r is not None),
    )
    return data.token(html, "")


def _row(data: PostData, view, metrics: list[str], chip: str, arm: str, base: str, conc: int, rate) -> dict:
    return {
        "chip": data.chip_names.get(chip, chip),
        "arm": arm,
        "concurrency": conc,
        "rate": "" if rate is None else f"{rate:g}",
        "rate_text": "" if rate is None else rate_text(rate),
        "regime": data.regimes.regime_of(conc),
        "measured": (chip, arm, conc) in (data.now if rate is None else view).measured,
        "cells": [_cell(data, view, m, chip, arm, base, conc) for m in metrics],
        "busy": (chip, arm, conc) in data.busy,
        "short": data.short.get((chip, arm, conc)),
    }


def _cell(data: PostData, view, m: str, chip: str, arm: str, base: str, conc: int) -> dict:
    spec, cell = METRICS[m], view.cells.get((chip, arm, conc, m))
    compared = cell is not None and arm != base and base in data.regimes.arms
    ratio = view.compare(m, chip, arm, base, conc, "ratio") if compared else None
    change = view.compare(m, chip, arm, base, conc, "change") if compared else None
    spread = instance_spread.of_cell(view, m, chip, arm, conc) if cell else None  # levels: never pooled
    return {
        "value": fmt(cell.mean, spec.decimals) if cell else None,
        "interval": interval_text(cell.lo, cell.hi, spec.decimals) if cell else "",
        "ratio": f"\u00d7{ratio.value:.2f}" if ratio and ratio.value is not None else "",
        "ratio_interval": interval_text(ratio.lo, ratio.hi, 2) if ratio else "",
        "change": change_text(change.value) if change else "",
        "change_interval": change_interval(change.lo, change.hi) if change else "",
        "verdict": verdict_mark(data, change, m, chip) if change else "",
    } | (instance_spread.texts(spread, spec.decimals) if spread else {})


def judged_or_newest(data: PostData, chip: str):
    """The view a first-screen figure reads on `chip`: the data the post judges on its home
    chip (as its short answer and index line do), each other chip's newest."""
    if chip == data.judging.chip_id:
        return data.values.view(None, cutoff=data.cutoff())
    return data.now


def headline_table(datas: list[PostData], arm: str, base: str | None, metrics: list) -> Markup:
    """arm vs base at one sequence and at the ceiling: one row pair per model (experiment),
    one tab per chip, each metric as base -> arm and the change with its 95% interval."""
    first = datas[0]
    metrics = known_metrics(first, metrics, "headline_table")
    first.state.headline_calls.append((first.experiment, arm, base, tuple(metrics)))
    by_chip: dict[str, list[dict]] = {}
    names: dict[str, str] = {}
    for data in datas:
        b = data.base if base is None else base
        if not (data.arm_ok(arm) and data.arm_ok(b)):
            continue
        for chip in data.regimes.chips:
            names[chip] = data.chip_names.get(chip, chip)
            view = judged_or_newest(data, chip)
            for conc in pair_concurrencies(data):
                cells = []
                for m in metrics:
                    spec = METRICS[m]
                    on, off = view.cells.get((chip, arm, conc, m)), view.cells.get((chip, b, conc, m))
                    ch = view.compare(m, chip, arm, b, conc, "change")
                    cells.append(
                        {
                            "base": fmt(off.mean, spec.decimals) if off else "not measured",
                            "arm": fmt(on.mean, spec.decimals) if on else "not measured",
                            "change": change_text(ch.value),
                            "interval": change_interval(ch.lo, ch.hi),
                            "verdict": verdict_mark(data, ch, m, chip),
                        }
                    )
                by_chip.setdefault(chip, []).append(
                    {
                        "model": data.model,
                        "chip": names[chip],
                        "regime": data.regimes.regime_of(conc) or f"concurrency {conc}",
                        "concurrency": conc,
                        "base": b,
                        "cells": cells,
                    }
                )
    sql_href = first.register_sql(
        "headline", "".join(pages.inline_sql(pages.RUN_VALUES_SQL, d.params) for d in datas)
    )
    panes = [
        ChipPane(
            chip,
            names[chip],
            render_block(
                "headline_rows.html",
                metrics=[METRICS[m] for m in metrics],
                rows=rows,
                arm=arm,
                chip=names[chip] if len(by_chip) == 1 else "",
            ),
        )
        for chip, rows in by_chip.items()
    ]
    body = chip_tabs(panes, first.judging.chip_id, set_id(first, "headline")) if panes else ""
    html = render_block("headline_table.html", body=body, arm=arm, sql_href=sql_href)
    return first.token(html, "")
