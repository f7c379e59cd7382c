"""Dated update notes.

- A `Note` is one dated note; the author declares them in front matter (`updates:`),
  read and checked here.
- The automatic notes for runs measured after a post's date are `across.py`'s.
- The HTML lives in `templates/blocks/notes.html`; nothing here queries the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime


@dataclass(frozen=True, slots=True)
class Note:
    day: str  # YYYY-MM-DD
    text: str
    automatic: bool


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
