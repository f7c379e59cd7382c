"""Renders one data-bearing post: the sandboxed body, the update notes and quick-data
banner at the top, and the provenance and audit sections at the end.

Input is the post's Markdown body and front matter; output is Markdown holding
placeholder tokens, the HTML for each token, every failure, the claims' verdicts and the
post's downloads. Front matter: `experiment:` or `experiments: [a, b]` (the first is the
default of every call's `experiment=`), `chip:` (the home chip, `home.py`), `base:` (the
default base arm; otherwise each declaration's first arm), `date:`, `updates:` and
`headline:` (`headline.py`).
It knows nothing about mkdocs (the plugin and `runner audit` share it).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
import traceback
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from pathlib import Path

from runner.publish import across, queries
from runner.publish.api import post_api
from runner.publish.claims import Verdict
from runner.publish.headline import pair_line
from runner.publish.home import Judging, match_chip, resolve_home
from runner.publish.notes import Note, as_day, declared_notes, notes_html
from runner.publish.postdata import Failure, PostData, PostState, chip_labels
from runner.publish.provenance import Downloads
from runner.publish.templating import render_block, render_post_body
from runner.publish.views import ViewCache

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
    columns: list[across.Column] = field(default_factory=list)  # claims on every chip
    home_label: str = ""
    headline: str = ""  # the headline pair's line (headline.py), for the index pages


def downloads_folder(src_uri: str) -> str:
    stem = src_uri[:-3] if src_uri.endswith(".md") else src_uri
    return "downloads/" + re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-")


def experiments_of(meta: dict) -> tuple[list[str], list[str]]:
    """The post's experiments (front matter `experiments:` or `experiment:`) and problems."""
    many, one = meta.get("experiments"), meta.get("experiment")
    if many is not None:
        if not isinstance(many, list) or not many or not all(isinstance(e, str) and e for e in many):
            return [], ["front matter field 'experiments' must be a non-empty list of experiment names"]
        return list(dict.fromkeys(many)), []
    if not isinstance(one, str) or not one:
        return [], ["front matter field 'experiment' must name an experiment"]
    return [one], []


def is_data_post(meta: dict) -> bool:
    return "experiment" in meta or "experiments" in meta


def declared(declarations: Path | None, experiment: str) -> tuple[tuple[str, ...], str]:
    """The arms of the experiment's declaration in file order (the default base is the
    first) and its model; ((), experiment) when the declaration is not readable here."""
    path = declarations / f"{experiment}.toml" if declarations else None
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, tomllib.TOMLDecodeError):
        return (), experiment
    arms, model = doc.get("arms", {}), doc.get("model", experiment)
    return (tuple(arms) if isinstance(arms, dict) else ()), str(model)


def _render_body(body: str, datas: dict[str, PostData], default: str) -> str:
    try:
        return render_post_body(body, post_api(datas, default))
    except Exception as e:  # any problem in the author's template is reported, not raised
        line = getattr(e, "lineno", None)
        if line is None:
            for fs in reversed(traceback.extract_tb(e.__traceback__)):
                if fs.filename == "<template>":
                    line = fs.lineno
                    break
        kind = "refused by the sandbox" if "unsafe" in str(e) else type(e).__name__
        datas[default].fail(f"template {kind}: {e}", line)
        return body


def _token_prefix(key: str) -> str:
    return "BOTHROWS" + hashlib.sha256(key.encode()).hexdigest()[:8].upper()


class _Post:
    """Everything one post's renderings share: reader, views, experiments, chips."""

    def __init__(self, reader, body, meta, key, declarations, line_offset, page_url):
        self.reader, self.body, self.meta, self.key = reader, body, meta, key
        self.views = ViewCache(reader)
        self.declarations, self.line_offset, self.page_url = declarations, line_offset, page_url
        self.quick: dict[str, bool] = {}
        self.chips = []
        self._later: dict[tuple, list[tuple]] = {}

    def later(self, experiment: str, quick: bool, since) -> list[tuple]:
        """The experiment's complete runs started on or after `since` (read once a post)."""
        key = (experiment, quick, since)
        if key not in self._later:
            self._later[key] = self.reader.remeasured(experiment, quick, since)
        return self._later[key]

    def datas(self, state: PostState, judging: Judging) -> dict[str, PostData]:
        labels = chip_labels(self.chips)
        base = self.meta.get("base") if isinstance(self.meta.get("base"), str) else None
        out = {}
        for e, q in self.quick.items():
            arms, model = declared(self.declarations, e)
            out[e] = PostData(
                state, self.views, e, q, base=base, judging=judging, labels=labels, declared_arms=arms
            )
            out[e].model = Path(model).name
        return out

    def render(self, judging: Judging, prefix: str, folder: str = "downloads") -> tuple[str, PostState, dict]:
        state = PostState(self.key, prefix, self.line_offset, self.page_url, folder)
        datas = self.datas(state, judging)
        return str(_render_body(self.body, datas, next(iter(datas)))), state, datas


def _judging(post: _Post, as_of: datetime | None, judge_chip: str | None) -> Judging:
    labels = chip_labels(post.chips)
    names = {c.chip_id: c.name for c in post.chips}
    now = tuple(labels)
    if judge_chip is not None:
        hits = match_chip(judge_chip, list(now), labels, names)
        return (
            Judging(hits[0], None, labels[hits[0]], every_value=True)
            if len(hits) == 1
            else Judging(
                None,
                None,
                judge_chip,
                f"--chip {judge_chip!r} names {len(hits)} chips; the data "
                f"has {', '.join(repr(l) for l in labels.values())}",
            )
        )
    then = tuple(
        sorted(
            {c for e, q in post.quick.items() for c in post.views.get(e, q, as_of).chip_ids},
            key=lambda c: list(now).index(c),
        )
    )
    return resolve_home(post.meta.get("chip"), as_of, then, now, labels, names)


def render_post(
    body: str,
    meta: dict,
    *,
    key: str,
    db_path,
    page_url: str = "",
    line_offset: int = 0,
    declarations: Path | None = None,
    judge_chip: str | None = None,
) -> RenderedPost:
    """key: the post's path relative to the docs dir (names failures and seeds ids);
    declarations: the folder of experiment declarations (for the default base arm);
    judge_chip: judge claims on that chip's newest data instead of the home data."""
    out = RenderedPost(body)
    notes, problems = declared_notes(meta)
    experiments, more = experiments_of(meta)
    out.failures += [Failure(key, 1, p) for p in problems + more]
    if not experiments:
        return out
    try:
        reader = queries.Reader(db_path)
    except queries.QueryError as e:
        out.failures.append(Failure(key, 1, f"experiment {experiments[0]!r}: {e}"))
        return out
    with reader:
        post = _Post(reader, body, meta, key, declarations, line_offset, page_url)
        for e in experiments:
            quick = reader.quick_choice(e)
            if quick is None:
                out.failures.append(
                    Failure(key, 1, f"experiment {e!r} has no complete runs in database {db_path}")
                )
            else:
                post.quick[e] = quick
        if not post.quick:
            return out
        post.chips = sorted(
            {c.chip_id: c for e, q in post.quick.items() for c in reader.chips(e, q)}.values(),
            key=lambda c: (c.name, c.chip_id),
        )
        day = as_day(meta.get("date"))
        as_of = datetime.combine(day + timedelta(days=1), time()) if day else None
        judging = _judging(post, as_of, judge_chip)
        folder = downloads_folder(key)
        rendered, state, datas = post.render(judging, _token_prefix(key), folder)
        for d in datas.values():
            where = "" if len(datas) == 1 else f" ({d.experiment})"
            out.failures += [Failure(key, 1, f"regime gap{where}: " + g.describe()) for g in d.regimes.gaps]
        out.columns = _columns(post, judging, as_of, state.verdicts) if judge_chip is None else []
        auto = _later_notes(post, datas, judging, as_of, state.verdicts, out.columns)
        notes = sorted(notes + auto, key=lambda n: (n.day, n.automatic))
        first = datas[next(iter(datas))]
        top = str(first.token(notes_html(notes, any(post.quick.values())), ""))
        top = str(pair_line(datas, meta, first.experiment)) + top
        m = _H1.search(rendered)
        rendered = (rendered[: m.end()] + top + rendered[m.end() :]) if m else top + rendered
        out.downloads = _downloads(reader, post, folder, state)
        links = [(n, first.href(n)) for n in out.downloads.file_names()]
        prov = "".join(
            str(
                first.token(
                    render_block(
                        "provenance.html",
                        experiment=e,
                        quick=q,
                        chips=datas[e].chips,
                        facts=reader.provenance(e, q),
                        load=reader.load_by_chip(e, q),
                        labels=datas[e].chip_names,
                        downloads=[
                            (n, h)
                            for n, h in links
                            if len(datas) == 1 or n.startswith(f"{e}-") or n.endswith(".sql")
                        ],
                    ),
                    "",
                )
            )
            for e, q in post.quick.items()
        )
        audit = str(
            first.token(
                render_block(
                    "audit.html",
                    verdicts=state.verdicts,
                    home=judging.label if judge_chip else _home_text(post, judging),
                    by_chip=across.table_rows(state.verdicts, out.columns),
                    columns=out.columns,
                    newest=any(c.chip_id == judging.chip_id for c in out.columns),
                ),
                "",
            )
        )
        out.markdown = rendered.rstrip() + f"\n\n## Provenance\n{prov}## Audit\n{audit}"
        out.blocks, out.inline_text = state.blocks, state.inline_text
        out.failures += state.failures
        out.verdicts, out.notes = state.verdicts, notes
        out.home_label = _home_text(post, judging)
        out.headline = state.headline_html
    return out


def _home_text(post: _Post, judging: Judging) -> str:
    if judging.chip_id is None:
        return "no home chip"
    label = chip_labels(post.chips)[judging.chip_id]
    if judging.as_of is None:
        return label
    return f"{label}, data as of {(judging.as_of - timedelta(days=1)):%Y-%m-%d}"


def _columns(post: _Post, judging: Judging, as_of, home: list[Verdict]) -> list[across.Column]:
    """Each chip's newest data as a judging view (the home chip's only when it has data
    newer than the post's date), rendered quietly. Every value is read on the column's
    chip, those whose call names a chip too: the table reads each claim off every chip."""
    if not home:
        return []
    labels = chip_labels(post.chips)
    later_on_home = bool(
        as_of
        and judging.chip_id
        and any(r[1] == judging.chip_id for e, q in post.quick.items() for r in post.later(e, q, as_of))
    )
    cols = []
    for chip in post.chips:
        cid = chip.chip_id
        if cid == judging.chip_id and not later_on_home:
            continue
        label = f"{labels[cid]} (newest)" if cid == judging.chip_id else labels[cid]
        _, state, _ = post.render(Judging(cid, None, label, every_value=True), "ALT")
        cols.append(across.Column(label, cid, {v.number: v for v in state.verdicts}))
    return cols


def _later_notes(post: _Post, datas, judging, as_of, home, columns) -> list[Note]:
    if as_of is None:
        return []
    by_chip = {c.chip_id: c for c in columns}
    labels = chip_labels(post.chips)
    out = []
    for e, q in post.quick.items():
        runs = post.later(e, q, as_of)
        out += across.later_notes(e, runs, labels, home, by_chip, datas[e].state.claim_experiments)
    return out


def _downloads(reader, post: _Post, folder: str, state: PostState) -> Downloads:
    tables = {}
    for e, q in post.quick.items():
        for name, table in reader.raw_tables(e, q).items():
            tables[name if len(post.quick) == 1 else f"{e}-{name}"] = table
    return Downloads(folder, tables, dict(state.sql))
