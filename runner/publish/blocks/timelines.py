"""The per-token timeline: for one round of one cell, every request's inter-token gap
against the time its token arrived, one line per request and one panel per arm, so a
stall (one long prefill holding every decoding request) shows as a spike shared by all
the lines at once, and its cure as its absence.

Reads one run per arm through `queries.Reader.timeline` (tokens table); renders the
chart block. The points are raw observations, not estimates: they carry no interval.
"""

from __future__ import annotations

from markupsafe import Markup

from runner.publish.blocks import charts
from runner.publish.blocks.postdata import PostData
from runner.publish.blocks.templating import render_block
from runner.publish.sql import pages


def timeline_chart(data: PostData, concurrency: int | None, round_: int, chip: str | None) -> Markup:
    reg = data.regimes
    conc = reg.ceiling if concurrency is None else concurrency
    chip_id = (
        data.chip_for(chip)
        if chip is not None
        else (data.judging.chip_id or (reg.chips[0] if reg.chips else None))
    )
    if chip_id is None or not isinstance(round_, int) or conc not in reg.concurrencies:
        if chip_id is not None:
            data.fail(
                f"timeline_chart: concurrency {conc!r} and round {round_!r} must be a measured "
                f"concurrency ({', '.join(map(str, reg.concurrencies))}) and a round number"
            )
        return data.token(render_block("block_error.html", message="timeline not drawn"), "")
    rows = data.reader.timeline(data.experiment, data.quick, chip_id, int(conc), round_)
    arms = [a for a in data.arm_order if any(r.arm == a for r in rows)]
    if not arms:
        data.fail(
            f"timeline_chart: no per-token times for concurrency {conc}, round {round_} on "
            f"{data.chip_names.get(chip_id, chip_id)} (a runtime without token times, or no tokens table)"
        )
        return data.token(render_block("block_error.html", message="timeline not drawn"), "")
    names, series = [], []
    for arm in arms:
        for rid in sorted({r.request_id for r in rows if r.arm == arm}):
            pts = [r for r in rows if r.arm == arm and r.request_id == rid]
            name = f"{pts[0].label or 'request'} {rid}"
            if name not in names:
                names.append(name)
            ys = tuple(round(p.gap_ms, 4) for p in pts)
            series.append(charts.Series(arm, name, tuple(round(p.t_s, 6) for p in pts), ys, ys, ys))
    fig = charts.panel_figure(
        series, [(a, a) for a in arms], names, {}, "time (s)", "gap before the token (ms)", [], kind="lines"
    )
    for trace in fig["data"]:
        trace.pop("error_y", None)
        trace["mode"] = "lines"
    for key, axis in fig["layout"].items():
        if key.startswith("xaxis"):
            axis.pop("tickvals", None)
            axis.pop("ticktext", None)
    div_id = charts.chart_id(data.key, "timeline", conc, round_, len(data.state.blocks))
    params = {**data.params, "chip": chip_id, "concurrency": int(conc), "round": round_}
    sql_href = data.register_sql("timeline", pages.inline_sql(pages.TIMELINE_SQL, params))
    html = render_block(
        "chart.html",
        body=Markup(render_block("chart_div.html", div_id=div_id, figure=charts.figure_json(fig))),
        caption=f"inter-token gap of every request against its token's time, concurrency "
        f"{conc}, round {round_}, on {data.chip_names.get(chip_id, chip_id)}; "
        "one panel per arm, one line per request",
        sql_href=sql_href,
    )
    return data.token(html, "")
