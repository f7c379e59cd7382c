"""Renders one data-bearing post, in named phases (`render_post`).

- Input: the post's Markdown body and front matter. Output: Markdown holding placeholder
  tokens, the HTML for each token, every failure, the claims' verdicts and the post's
  downloads.
- Phases: the sandboxed body; the update notes and quick-data banner under its title;
  the provenance and audit sections at its end; then assembly (the sections around the
  body are `post_sections.py`).
- Front matter: `experiment:` or `experiments: [a, b]` (the first is the default of every
  call's `experiment=`), `chip:` (the home chip, `home.py`), `base:` (the default base
  arm; otherwise each declaration's first arm), `date:`, `updates:`, `data:` (a pin,
  `home.py`) and `headline:` (`headline.py`).
- It knows nothing about mkdocs (the plugin and `runner audit` share it).
"""

from __future__ import annotations

import hashlib
import traceback
from dataclasses import dataclass, field, replace
from datetime import datetime, time, timedelta
from pathlib import Path

from runner.publish.site import across

from runner.publish.sql.reader import QueryError, Reader
from runner.publish.site import post_sections as sections
from runner.publish.site.api import post_api
from runner.publish.stats.claims import Verdict
from runner.publish.site.frontmatter import declared_band, declared, downloads_folder, experiments_of
from runner.publish.site.headline import pair_line
from runner.publish.sql.home import Judging, match_chip, post_cutoff, read_pin, resolve_home, unseen_by_home
from runner.publish.blocks.notes import Note, as_day, declared_notes
from runner.publish.blocks.post_state import Failure, PostState, chip_labels
from runner.publish.blocks.postdata import PostData
from runner.publish.site.provenance import Downloads
from runner.publish.sql.rows import LaterRun
from runner.publish.stats.shortfall import declared_allow_short
from runner.publish.blocks.templating import render_post_body
from runner.publish.stats.views import ViewCache


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
    home: Judging | None = None  # where the claims were judged (runner pin reads it)
    claim_cells: set[tuple] = field(default_factory=set)  # (experiment, chip, arm, concurrency)
    headline: str = ""  # the headline pair's line (headline.py), for the index pages


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
        self._later: dict[tuple, list[LaterRun]] = {}
        self.home: Judging | None = None  # the judging of the post's own rendering
        self.pin: tuple[str, ...] | None = None  # front matter data: (home.py)

    def later(self, experiment: str, quick: bool, since) -> list[LaterRun]:
        """What the post's judged data did not see (read once a post): the experiment's
        complete runs started on or after `since` (the day after the post's date), other
        chips' runs of the post's own day, and the home chip's runs its judged data passed
        over (a re-measurement the same day); never the runs its `data:` pin judges (a
        revision that re-pins a post to a newer measurement)."""
        key = (experiment, quick, since)
        if key not in self._later:
            home = self.home.chip_id if self.home is not None else None
            day = since - timedelta(days=1)  # the post's own day
            from_day = self.reader.remeasured(experiment, quick, day)
            same_day = [r for r in from_day if r.day == day.strftime("%Y-%m-%d")]
            later = (
                unseen_by_home(self.reader, experiment, quick, self.home)
                + [r for r in same_day if r.chip_id != home]
                + from_day[len(same_day) :]
            )
            pinned = self.reader.judging.runs_of_folders(self.pin or ())  # the judged data is no later data
            self._later[key] = [r for r in later if r.run_id not in pinned]
        return self._later[key]

    def datas(self, state: PostState, judging: Judging) -> dict[str, PostData]:
        labels = chip_labels(self.chips)
        base = self.meta.get("base") if isinstance(self.meta.get("base"), str) else None
        out = {}
        for e, q in self.quick.items():
            arms, model = declared(self.declarations, e)
            out[e] = PostData(
                state,
                self.views,
                e,
                q,
                base=base,
                judging=judging,
                labels=labels,
                declared_arms=arms,
                allow_short=declared_allow_short(self.declarations, e),
                band=declared_band(self.declarations, e),
            )
            out[e].model = Path(model).name
        return out

    def render(self, judging: Judging, prefix: str, folder: str = "downloads") -> tuple[str, PostState, dict]:
        state = PostState(self.key, prefix, self.line_offset, self.page_url, folder)
        datas = self.datas(state, judging)
        return str(_render_body(self.body, datas, next(iter(datas)))), state, datas


def _judging(post: _Post, as_of: datetime | None, judge_chip: str | None) -> Judging:
    labels = chip_labels(post.chips)
    names = {c.chip_id: (c.name, *c.aliases) for c in post.chips}
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
            {
                c
                for e, q in post.quick.items()
                for c in post.views.get(e, q, post_cutoff(as_of, post.pin)).chip_ids
            },
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
    declared, problems = declared_notes(meta)
    experiments, more = experiments_of(meta)
    out.failures += [Failure(key, 1, p) for p in problems + more]
    if not experiments:
        return out
    try:
        reader = Reader(db_path)
    except QueryError as e:
        out.failures.append(Failure(key, 1, f"experiment {experiments[0]!r}: {e}"))
        return out
    with reader:
        post = _Post(reader, body, meta, key, declarations, line_offset, page_url)
        out.failures += _choose_data(post, experiments, db_path)
        if not post.quick:
            return out
        day = as_day(meta.get("date"))
        as_of = datetime.combine(day + timedelta(days=1), time()) if day else None
        if judge_chip is None:  # a data: pin also names the home chip: its folders' chip
            post.pin, problem = read_pin(meta, reader, list(post.quick))
            out.failures += [Failure(key, 1, problem)] if problem else []
        judging = _judging(post, as_of, judge_chip)
        post.home = judging = replace(judging, data=post.pin) if post.pin else judging
        # Body: the sandboxed body over each experiment's data, claims judged at home.
        rendered, state, datas = _body(post, judging)
        out.failures += sections.regime_gaps(key, datas)
        out.columns = sections.columns(post, judging, as_of, state.verdicts) if judge_chip is None else []
        first = datas[next(iter(datas))]  # tokens of the sections are the first experiment's
        # Notes: the declared ones and those later runs made, under the title.
        notes = sections.notes(post, datas, judging, as_of, declared, state.verdicts, out.columns)
        top = str(pair_line(datas, meta, first.experiment)) + sections.notes_section(
            first, notes, any(post.quick.values())
        )
        # Provenance: each experiment's facts and its share of the downloads.
        out.downloads = sections.downloads(reader, post, downloads_folder(key), state)
        provenance = sections.provenance(
            post, datas, [(n, first.href(n)) for n in out.downloads.file_names()]
        )
        # Audit: every claim's verdict at home and on every chip.
        audit = sections.audit(post, first, state.verdicts, judging, judge_chip, out.columns)
        # Assemble: the Markdown, and what the plugin and `runner audit` read off it.
        out.markdown = sections.assemble(rendered, top, provenance, audit)
        out.blocks, out.inline_text = state.blocks, state.inline_text
        out.failures += state.failures
        out.verdicts, out.notes = state.verdicts, notes
        out.home_label = sections.home_text(post, judging)
        out.home, out.claim_cells = judging, set(state.claim_cells)
        out.headline = state.headline_html
    return out


def _choose_data(post: _Post, experiments: list[str], db_path) -> list[Failure]:
    """Each experiment's quick-or-full choice on the post; a failure for one without runs."""
    failures = []
    for e in experiments:
        quick = post.reader.quick_choice(e)
        if quick is None:
            failures.append(
                Failure(post.key, 1, f"experiment {e!r} has no complete runs in database {db_path}")
            )
        else:
            post.quick[e] = quick
    post.chips = sorted(
        {c.chip_id: c for e, q in post.quick.items() for c in post.reader.chips(e, q)}.values(),
        key=lambda c: (c.name, c.chip_id),
    )
    return failures


def _body(post: _Post, judging: Judging) -> tuple[str, PostState, dict[str, PostData]]:
    """The body rendered in the sandbox: Markdown with tokens, its state, its PostData."""
    return post.render(judging, _token_prefix(post.key), downloads_folder(post.key))
