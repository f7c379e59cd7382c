"""Dated update notes: those the author declared in front matter (`updates:`) and the
one made automatically when runs behind a claim were re-measured after the post's date.

Validates and describes; the HTML lives in `templates/blocks/notes.html`. It does not
query the database: the caller hands it the re-measured runs and the claims that moved.
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


@dataclass(frozen=True, slots=True)
class Move:
    stated: str
    before: str  # the claim's measured value as of the post's date
    after: str  # the same claim on today's data


def remeasurement_note(runs: list[tuple], chip_names: dict[str, str], moves: list[Move]) -> Note | None:
    """runs: (run_id, chip_id, arm, concurrency, round, day) re-measured after the post."""
    if not runs:
        return None
    day = max(r[5] for r in runs)
    cells: dict[tuple, list[str]] = {}
    for run_id, chip_id, arm, conc, rnd, _ in runs:
        cells.setdefault((chip_names.get(chip_id, chip_id), arm, conc), []).append(
            f"round {rnd} ({run_id[:8]})"
        )
    which = "; ".join(
        f"{chip} / {arm} / concurrency {conc}: {', '.join(rs)}"
        for (chip, arm, conc), rs in sorted(cells.items())
    )
    moved = [m for m in moves if m.before != m.after]
    what = (
        "; ".join(f"claim {m.stated!r} was {m.before}, now {m.after}" for m in moved)
        if moved
        else "no claimed figure changed at its printed precision"
    )
    return Note(day, f"Re-measured after this post was written: {which}. {what}.", automatic=True)
