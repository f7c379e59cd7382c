"""A post's headline pair: its headline arm's change against the base at batch 1 and at
the ceiling, on its home chip (data as of the post's date), with 95% intervals.

- Front matter `headline: {arm, base, metric}` (optional `experiment`, `requests`, and
  `at_least`, a floor such as "0.97x" whose verdict each regime then shows too, and which
  measuring until decided decides as well) chooses it; by default it is the first
  `headline_table` call (decode_tps when the call shows it, else its first metric).
- The pair is one line of HTML shown on the blog index and the home page, not on the
  post itself (its headline table is there). Problems name the front-matter field.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from runner.publish.metrics import METRICS
from runner.publish.blocks.post_state import Failure
from runner.publish.blocks.postdata import PostData
from runner.publish.blocks.verdict_marks import bound_mark, verdict_mark
from runner.publish.stats.claims import ClaimSyntaxError, Measured, parse_stated
from runner.publish.blocks.tables import change_interval, change_text, pair_concurrencies

FIELDS = ("arm", "base", "metric", "experiment", "requests", "at_least")


@dataclass(frozen=True, slots=True)
class Headline:
    experiment: str
    arm: str
    base: str | None
    metric: str
    requests: str | None = None
    at_least: str | None = None  # a floor on the change ("0.97x", "-3%")


def headline_of(meta: dict, calls: list[tuple], default: str) -> tuple[Headline | None, str | None]:
    """The front matter's headline, else the first headline_table call; and a problem."""
    raw = meta.get("headline")
    if raw is None:
        if not calls:
            return None, None
        experiment, arm, base, metrics = calls[0]
        metric = "decode_tps" if "decode_tps" in metrics else (metrics[0] if metrics else None)
        return (Headline(experiment, arm, base, metric) if metric else None), None
    bad = _headline_problem(raw)
    if bad:
        return None, f"front matter field 'headline' {bad}"
    h = Headline(
        raw.get("experiment", default),
        raw["arm"],
        raw.get("base"),
        raw["metric"],
        raw.get("requests"),
        raw.get("at_least"),
    )
    return h, None


def _headline_problem(raw: object) -> str | None:
    if not isinstance(raw, dict):
        return "must be a mapping {arm, base, metric}"
    for key in raw:
        if key not in FIELDS:
            return f"has unknown key {key!r} (known: {', '.join(FIELDS)})"
    for key in FIELDS:
        value = raw.get(key)
        if isinstance(value, bool):  # YAML reads on/off/yes/no unquoted as booleans
            return f'{key!r} reads as the YAML boolean {value}: quote the name ("on", "off")'
        if key in ("arm", "metric") and not isinstance(value, str):
            return f"needs {key!r} (a string)"
        if value is not None and not isinstance(value, str):
            return f"{key!r} must be a string"
    if raw.get("at_least") is not None:
        try:
            parse_stated(raw["at_least"], "change")
        except ClaimSyntaxError as e:
            return f"'at_least': {e}"
    return None


def _floor_mark(data: PostData, est, headline: Headline, chip: str) -> Markup:
    """The floor's mark after the regime's verdict (nothing without a floor or interval)."""
    if headline.at_least is None:
        return Markup("")
    margin = data.values.aa_margin(headline.metric, {chip})
    measured = Measured(est.value, est.lo, est.hi, est.n_rounds, "change", headline.metric, margin=margin)
    mark = bound_mark(measured, headline.at_least, at_least=True)
    return Markup(" ") + mark if mark else mark


def _front_matter_problem(data: PostData, message: str) -> None:
    data.state.failures.append(Failure(data.key, 1, message))


def pair_line(datas: dict[str, PostData], meta: dict, default: str) -> Markup:
    """A token for the headline pair: nothing on the post, the line on other pages."""
    first = datas[default]
    headline, problem = headline_of(meta, first.state.headline_calls, default)
    if problem:
        _front_matter_problem(first, problem)
    data = datas.get(headline.experiment) if headline else None
    if headline is None or data is None:
        if headline is not None:
            _front_matter_problem(
                first, f"front matter field 'headline': unknown experiment {headline.experiment!r}"
            )
        return Markup("")
    base = data.base if headline.base is None else headline.base
    chip = data.judging.chip_id
    if headline.metric not in METRICS:
        _front_matter_problem(first, f"front matter field 'headline': unknown metric {headline.metric!r}")
        return Markup("")
    if chip is None or not (data.arm_ok(headline.arm) and data.arm_ok(base)):
        return Markup("")
    view = data.values.view(headline.requests, cutoff=data.cutoff())
    regimes = []
    for conc in pair_concurrencies(data):
        est = view.compare(headline.metric, chip, headline.arm, base, conc, "change")
        regimes.append(
            {
                "label": data.regimes.regime_of(conc) or f"concurrency {conc}",
                "concurrency": conc,
                "change": change_text(est.value) or "not measured",
                "interval": change_interval(est.lo, est.hi),
                "verdict": verdict_mark(data, est, headline.metric, chip)
                + _floor_mark(data, est, headline, chip),
            }
        )
    spec = METRICS[headline.metric]
    html = Markup(
        '<p class="bothrows-pair-line" data-arm="{arm}" data-base="{base}" data-metric="{metric}">'
        "<code>{arm}</code> against <code>{base}</code>, {label}{of} on {chip} (home): {pairs}</p>"
    ).format(
        arm=headline.arm,
        base=base,
        metric=headline.metric,
        label=spec.label,
        of="" if headline.requests is None else f" of the {headline.requests} requests",
        chip=data.chip_names.get(chip, chip),
        pairs=Markup("; ").join(
            Markup('<span data-concurrency="{c}">{label}{n} <strong>{change}</strong>{iv}{v}</span>').format(
                c=r["concurrency"],
                label=r["label"],
                n=f" ({r['concurrency']})" if r["label"] == "ceiling" else "",
                change=r["change"],
                iv=f" ({r['interval']})" if r["interval"] else "",
                v=Markup(" ") + r["verdict"] if r["verdict"] else "",
            )
            for r in regimes
        ),
    )
    first.state.headline_html = str(html)
    return first.token("", str(html))
