"""Dated update notes: those the author declared in front matter (`updates:`, full text)
and one line per later measurement (`across.py` counts its claims).

- An automatic note is built from small named clauses (chip, code, experiment and cells,
  claims); `Note.with_clause` appends one more.
- At the top of a post the newest three show; earlier ones fold into "and K earlier
  updates". The HTML lives in `templates/blocks/notes.html`; nothing here queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime


@dataclass(frozen=True, slots=True)
class Clause:
    """One named part of an automatic note's line; href: a link on the post's page."""

    name: str  # "chip", "code", "experiment", "cells", "claims", ...
    text: str
    href: str = ""


@dataclass(frozen=True, slots=True)
class Note:
    day: str  # YYYY-MM-DD
    text: str  # a declared note's full text; an automatic note's clauses, joined
    automatic: bool
    clauses: tuple[Clause, ...] = ()
    at: str = ""  # an automatic note's newest run's start (notes of one day follow it)

    def with_clause(self, clause: Clause) -> Note:
        """The same note with one more clause at the end of its line."""
        return automatic_note(self.day, (*self.clauses, clause), self.at)


SEPARATOR = " \u00b7 "
NOTES_SHOWN = 3  # more notes than this fold into "and K earlier updates"


def automatic_note(day: str, clauses: tuple[Clause, ...], at: str = "") -> Note:
    return Note(day, SEPARATOR.join(c.text for c in clauses), True, tuple(clauses), at)


def measurement_note(
    day: str,
    chip: str,
    code: str,
    experiment: str,
    cells: int,
    held: int,
    reading: int,
    undecided: int = 0,
    at: str = "",
) -> Note:
    """A later measurement in one line: where, what, and what it says of the claims that
    read its experiment (`held` of `reading` hold on its data, `undecided` of the others
    neither hold nor fail: their data decides nothing); at: its newest run's start."""
    verdict = f"{held} of {reading} claims that read these cells hold there"
    if undecided:
        verdict += f", {undecided} undecided"
    claims = (
        Clause("claims", verdict, "#claims-on-every-chip")
        if reading
        else Clause("claims", "no claim of this post reads these cells")
    )
    return automatic_note(
        day,
        (
            Clause("chip", chip),
            Clause("code", f"code {code[:12]}"),
            Clause("experiment", f"{experiment}, {cells} cell{'s' if cells != 1 else ''}"),
            claims,
        ),
        at,
    )


def shown_and_folded(notes: list[Note]) -> tuple[list[Note], list[Note]]:
    """Newest NOTES_SHOWN notes shown (in date order), the earlier ones folded."""
    cut = max(len(notes) - NOTES_SHOWN, 0)
    return notes[cut:], notes[:cut]


def as_day(value: object) -> date | None:
    """A front-matter date (date, datetime, 'YYYY-MM-DD' or material's {created: ...})."""
    if isinstance(value, dict):
        value = value.get("created")
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip()[:10])
        except ValueError:
            return None
    return None


def declared_notes(meta: dict) -> tuple[list[Note], list[str]]:
    """The `updates:` list as notes, and a problem (naming the field) for each bad entry."""
    raw = meta.get("updates") or []
    if not isinstance(raw, list):
        return [], ["front matter field 'updates' must be a list of {date, text}"]
    notes, problems = [], []
    for i, item in enumerate(raw):
        day = as_day(item.get("date")) if isinstance(item, dict) else None
        text = item.get("text") if isinstance(item, dict) else None
        if day is None or not isinstance(text, str) or not text.strip():
            problems.append(
                f"front matter field 'updates[{i}]' needs a date (YYYY-MM-DD) and a non-empty text"
            )
            continue
        notes.append(Note(day.isoformat(), text.strip(), automatic=False))
    return notes, problems


def notes_html(notes: list[Note], quick: bool) -> str:
    """The block at the top of a post: the quick-data banner and the notes, one line each."""
    from runner.publish.blocks.templating import render_block  # the one place that touches jinja2

    shown, folded = shown_and_folded(notes)
    return render_block("notes.html", shown=shown, folded=folded, quick=quick)
