"""Renders one data-bearing post: the sandboxed body, the update notes and quick-data
banner at the top, and the provenance and audit sections at the end.

Input is the post's Markdown body and front matter; output is Markdown holding
placeholder tokens, the HTML for each token, every failure, the claims' verdicts and the
post's downloads. It knows nothing about mkdocs (the plugin and `runner audit` share it).
"""
from __future__ import annotations

import hashlib
import re
import traceback
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta

from runner.publish import blocks, queries, traffic as traffic_choice
from runner.publish.claims import Verdict
from runner.publish.functions import Failure, PostData
from runner.publish.notes import Move, Note, as_day, declared_notes, remeasurement_note
from runner.publish.provenance import Downloads
from runner.publish.templating import render_block, render_post_body

_H1 = re.compile(r"^# .*$", re.MULTILINE)


@dataclass
class RenderedPost:
    markdown: str
    blocks: dict[str, str] = field(default_factory=dict)
    inline_text: dict[str, str] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    downloads: Downloads | None = None


def downloads_folder(src_uri: str) -> str:
    stem = src_uri[:-3] if src_uri.endswith(".md") else src_uri
    return "downloads/" + re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-")


def _api(data: PostData) -> dict:
    """The post's whole vocabulary; closures, so no object with internals is reachable."""
    def regime_table(metrics, base="off"):
        return blocks.regime_table(data, metrics, base)

    def chart(metric, x="concurrency"):
        return blocks.chart(data, metric, x)

    def drafted_by_width_chart():
        return blocks.drafted_by_width_chart(data)

    def metric(name, arm, concurrency, chip=None):
        return data.metric(name, arm, concurrency, chip)

    def gain(metric, arm, base="off", concurrency=1, chip=None):
        return data.compare(metric, arm, base, concurrency, chip, "change")

    def ratio(metric, arm, base="off", concurrency=1, chip=None):
        return data.compare(metric, arm, base, concurrency, chip, "ratio")

    def claim(stated, measured):
        return data.claim(stated, measured)

    def traffic(profile, label="traffic", base="off"):
        return traffic_choice.traffic(data, profile, label, base)

    def traffic_speed(profile, arm, chip=None):
        return traffic_choice.speed(data, profile, arm, chip)

    def traffic_gain(profile, arm, base="off", chip=None):
        return traffic_choice.gain(data, profile, arm, base, chip)

    def traffic_best(profile, chip=None):
        return traffic_choice.best_arm(data, profile, chip)

    return {"regime_table": regime_table, "chart": chart, "metric": metric, "gain": gain,
            "ratio": ratio, "claim": claim, "drafted_by_width_chart": drafted_by_width_chart,
            "traffic": traffic, "traffic_speed": traffic_speed, "traffic_gain": traffic_gain,
            "traffic_best": traffic_best, "experiment": data.experiment}


def _render_body(body: str, data: PostData) -> str:
    try:
        return render_post_body(body, _api(data))
    except Exception as e:  # any problem in the author's template is reported, not raised
        line = getattr(e, "lineno", None)
        if line is None:
            for fs in reversed(traceback.extract_tb(e.__traceback__)):
                if fs.filename == "<template>":
                    line = fs.lineno
                    break
        kind = "refused by the sandbox" if "unsafe" in str(e) else type(e).__name__
        data.fail(f"template {kind}: {e}", line)
        return body


def _token_prefix(key: str) -> str:
    return "BOTHROWS" + hashlib.sha256(key.encode()).hexdigest()[:8].upper()


def render_post(body: str, meta: dict, *, key: str, db_path, page_url: str = "",
                line_offset: int = 0) -> RenderedPost:
    """key: the post's path relative to the docs dir (names failures and seeds ids)."""
    experiment = meta.get("experiment")
    out = RenderedPost(body)
    notes, problems = declared_notes(meta)
    out.failures += [Failure(key, 1, p) for p in problems]
    if not isinstance(experiment, str) or not experiment:
        out.failures.append(Failure(key, 1, "front matter field 'experiment' must name an experiment"))
        return out
    try:
        reader = queries.Reader(db_path)
    except queries.QueryError as e:
        out.failures.append(Failure(key, 1, f"experiment {experiment!r}: {e}"))
        return out
    with reader:
        quick = reader.quick_choice(experiment)
        if quick is None:
            out.failures.append(Failure(key, 1, f"experiment {experiment!r} has no complete runs "
                                                f"in database {db_path}"))
            return out
        folder = downloads_folder(key)
        data = PostData(reader, experiment, quick, key=key, token_prefix=_token_prefix(key),
                        line_offset=line_offset, page_url=page_url, downloads_folder=folder)
        rendered = str(_render_body(body, data))  # plain str: Markup would escape what is added
        out.failures += [Failure(key, 1, "regime gap: " + g.describe()) for g in data.regimes.gaps]
        auto = _remeasurement(reader, data, body, meta, key)
        notes = sorted(notes + ([auto] if auto else []), key=lambda n: (n.day, n.automatic))
        top = str(data.token(render_block("notes.html", notes=notes, quick=quick), ""))
        m = _H1.search(rendered)
        rendered = (rendered[:m.end()] + top + rendered[m.end():]) if m else top + rendered
        out.downloads = Downloads(folder, reader.raw_tables(experiment, quick), dict(data.sql))
        links = [(n, data.href(n)) for n in out.downloads.file_names()]
        prov = str(data.token(render_block("provenance.html", experiment=experiment, quick=quick,
                                       chips=data.chips, facts=reader.provenance(experiment, quick),
                                       downloads=links), ""))
        audit = str(data.token(render_block("audit.html", verdicts=data.verdicts), ""))
        out.markdown = rendered.rstrip() + f"\n\n## Provenance\n{prov}## Audit\n{audit}"
        out.blocks, out.inline_text = data.blocks, data.inline_text
        out.failures += data.failures
        out.verdicts, out.notes = data.verdicts, notes
    return out


def _remeasurement(reader: queries.Reader, data: PostData, body: str, meta: dict,
                   key: str) -> Note | None:
    """The automatic note: runs behind a claim re-measured after the post's date, and how
    each claim's value moved (the body re-rendered on the data as of that date)."""
    day = as_day(meta.get("date"))
    if day is None or not data.verdicts:
        return None
    since = datetime.combine(day + timedelta(days=1), time())
    runs = [r for r in reader.remeasured(data.experiment, data.quick, since)
            if (r[1], r[2], r[3]) in data.claim_cells]
    if not runs:
        return None
    before = PostData(reader, data.experiment, data.quick, key=key, token_prefix="OLD",
                      as_of=since)
    _render_body(body, before)
    old = {v.number: v.measured.text() for v in before.verdicts}
    moves = [Move(v.stated, old.get(v.number, "not measured"), v.measured.text())
             for v in data.verdicts]
    return remeasurement_note(runs, data.chip_names, moves)
