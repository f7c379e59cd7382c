"""The sections of a rendered post around its body (`post.py` renders the body and calls
these in order): the regime gaps, the notes under the title (declared, and those later
runs made, judged on every chip's newest data), the provenance blocks with their share of
the downloads, the audit of every claim, and the assembly of the page's Markdown.
"""

from __future__ import annotations

import re
from datetime import timedelta

from runner.publish.site import across

from runner.publish.site import machines
from runner.publish.stats.claims import Verdict
from runner.publish.sql import classes
from runner.publish.sql.home import Judging
from runner.publish.blocks.notes import Note, notes_html
from runner.publish.blocks.post_state import Failure, PostState, chip_labels
from runner.publish.blocks.postdata import PostData
from runner.publish.site.provenance import Downloads
from runner.publish.blocks.templating import render_block

_H1 = re.compile(r"^# .*$", re.MULTILINE)


def regime_gaps(key: str, datas: dict[str, PostData]) -> list[Failure]:
    """A failure for every regime an experiment lacks (batch 1 or the ceiling)."""
    failures = []
    for d in datas.values():
        where = "" if len(datas) == 1 else f" ({d.experiment})"
        failures += [Failure(key, 1, f"regime gap{where}: " + g.describe()) for g in d.regimes.gaps]
    return failures


def notes(post, datas, judging, as_of, declared: list[Note], home, columns) -> list[Note]:
    """The declared notes and the automatic ones for later runs, in date order; on one day
    the author's own after the measurements' (a declared note answers what they show), and
    the measurements' in the order they ran, whichever experiment of the post each measured
    (grouped by experiment, the newest lines shown could all be one experiment's)."""
    auto = later_notes(post, datas, judging, as_of, home, columns)
    return sorted(declared + auto, key=lambda n: (n.day, not n.automatic, n.at))


def notes_section(first: PostData, notes: list[Note], quick: bool) -> str:
    """The notes block (and the quick-data banner) that goes under the title."""
    return str(first.token(notes_html(notes, quick), ""))


def provenance(post, datas: dict[str, PostData], links: list[tuple[str, str]]) -> str:
    """The provenance section: one block an experiment, with the downloads that are its own."""
    first, blocks = datas[next(iter(datas))], []
    for e, q in post.quick.items():
        mine = [(n, h) for n, h in links if len(datas) == 1 or owner(n, datas) in (e, None)]
        html = render_block(
            "provenance.html",
            experiment=e,
            quick=q,
            chips=datas[e].chips,
            facts=post.reader.provenance(e, q),
            load=post.reader.load_by_chip(e, q),
            labels=datas[e].chip_names,
            aa=datas[e].values.aa_coverage(),
            aa_judged=_judged_aa(datas[e]),
            judged_what=_judged_what(post.home),
            aa_pair=datas[e].aa_pair,
            machines=machines.provenance_lines(post.reader, e, q, datas[e].chip_names),
            downloads=[(n, h) for n, h in mine if not n.endswith(".sql")],
            sqls=[(n, h) for n, h in mine if n.endswith(".sql")],
        )
        blocks.append(str(first.token(html, "")))
    return "".join(blocks)


def _judged_aa(data: PostData) -> dict | None:
    """The A/A of the data the post's claims are judged on, where what a reader sees of it
    (cells covered, margins) differs from the A/A over all the data the provenance lists
    (None: the same)."""
    judged = data.values.aa_judged()

    def seen(cov: dict) -> dict:
        return {chip: [(c.metric, c.covered, c.cells, c.margin) for c in cs] for chip, cs in cov.items()}

    return None if seen(judged) == seen(data.values.aa_coverage()) else judged


def _judged_what(home) -> str:
    """The data a post's claims are judged on, in words."""
    if home is not None and home.data:
        return "the measurement folders it pins"
    return "its data as of its date"


def owner(name: str, datas: dict) -> str | None:
    """The experiment a raw-rows download belongs to (the longest name it starts with: one
    experiment's name can begin another's); None for the SQL files, which every block shares."""
    return max((e for e in datas if name.startswith(f"{e}-")), key=len, default=None)


def audit(post, first: PostData, verdicts: list[Verdict], judging, judge_chip, columns) -> str:
    """The audit section: each claim's verdict at home and on every chip."""
    html = render_block(
        "audit.html",
        verdicts=verdicts,
        home=judging.label if judge_chip else home_text(post, judging),
        by_chip=across.table_rows(verdicts, columns),
        columns=columns,
        newest=any(c.chip_id == judging.chip_id for c in columns),
    )
    return str(first.token(html, ""))


def assemble(rendered: str, top: str, provenance: str, audit: str) -> str:
    """The post's Markdown: the notes under its title, provenance and audit at its end."""
    m = _H1.search(rendered)
    rendered = (rendered[: m.end()] + top + rendered[m.end() :]) if m else top + rendered
    return rendered.rstrip() + f"\n\n## Provenance\n{provenance}## Audit\n{audit}"


def home_text(post, judging: Judging) -> str:
    if judging.chip_id is None:
        return "no home chip"
    label = chip_labels(post.chips)[judging.chip_id]
    if judging.as_of is None:
        return label
    return f"{label}, data as of {(judging.as_of - timedelta(days=1)):%Y-%m-%d}"


def columns(post, judging: Judging, as_of, home: list[Verdict]) -> list[across.Column]:
    """Each chip's newest data as a judging view (the home chip's only when it has data
    newer than the post's date), rendered quietly. Every value is read on the column's
    chip, those whose call names a chip too: the table reads each claim off every chip."""
    if not home:
        return []
    labels = chip_labels(post.chips)
    later_on_home = bool(
        as_of
        and judging.chip_id
        and any(r.chip_id == judging.chip_id for e, q in post.quick.items() for r in post.later(e, q, as_of))
    )
    cols = []
    for chip in post.chips:
        cid = chip.chip_id
        if cid == judging.chip_id and not later_on_home:
            continue
        label = f"{labels[cid]} (newest)" if cid == judging.chip_id else labels[cid]
        later = (
            [r[0] for e, q in post.quick.items() for r in post.later(e, q, as_of) if r[1] == cid]
            if as_of
            else []
        )
        machine = machines.column_note(post.reader, post.quick, judging, cid, later)
        label += f" ({machine})" if machine else ""
        _, state, _ = post.render(Judging(cid, None, label, every_value=True), "ALT")
        cols.append(across.Column(label, cid, {v.number: v for v in state.verdicts}))
    return cols


def later_notes(post, datas, judging, as_of, home, columns) -> list[Note]:
    if as_of is None:
        return []
    by_chip = {c.chip_id: c for c in columns}
    labels = chip_labels(post.chips)
    out = []
    for e, q in post.quick.items():
        runs = post.later(e, q, as_of)
        machine = machines.group_difference(post.reader, e, q, judging)
        pooled = post.reader.judging.pooled(e, q)
        out += across.later_notes(
            e, runs, labels, home, by_chip, datas[e].state.claim_experiments, machine, pooled
        )
    return out


def downloads(reader, post, folder: str, state: PostState) -> Downloads:
    tables = {}
    for e, q in post.quick.items():
        for name, table in reader.raw_tables(e, q).items():
            tables[name if len(post.quick) == 1 else f"{e}-{name}"] = table
    return Downloads(folder, tables, {**state.sql, "machine-classes.sql": classes.download_text()})
