"""What later data says about a post: the claims-on-every-chip table and the automatic
update notes for measurements made after the post's date.

- A post's claims are judged on its home data (`home.py`). Here the same body is
  rendered again with each other chip (and the home chip's newest data) as the judging
  view, and each claim's value and plain verdict there are collected: shown, never a
  build failure.
- Each later measurement (a chip and a code version, with runs after the post's date)
  gets a dated note saying which cells it measured and what it says of the claims.
- It compares verdicts and writes text; `post.py` renders.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.publish.claims import Verdict
from runner.publish.notes import Note
from runner.publish.rows import LaterRun

MOVES_SHOWN = 6


@dataclass(frozen=True, slots=True)
class Column:
    """One judging view of the claims: a chip's newest data, or the home data."""

    label: str
    chip_id: str | None
    verdicts: dict[int, Verdict]  # claim number -> verdict in this view


def plain(v: Verdict | None) -> str:
    if v is None or v.measured.value is None:
        return "not measured"
    return "holds" if v.ok else "does not hold"


def table_rows(home: list[Verdict], columns: list[Column]) -> list[dict]:
    rows = []
    for v in home:
        cells = [
            {
                "value": c.verdicts[v.number].measured.text() if v.number in c.verdicts else "not measured",
                "verdict": plain(c.verdicts.get(v.number)),
            }
            for c in columns
        ]
        rows.append(
            {
                "number": v.number,
                "stated": v.stated,
                "home": v.measured.text(),
                "home_verdict": plain(v),
                "cells": cells,
            }
        )
    return rows


def _cells_text(runs: list[LaterRun]) -> str:
    arms = sorted({r.arm for r in runs})
    concs = sorted({r.concurrency for r in runs})
    rounds = sorted({r.round for r in runs})
    cells = len({(r.arm, r.concurrency) for r in runs})
    return (
        f"{cells} cell{'s' if cells != 1 else ''} (arm{'s' if len(arms) != 1 else ''} "
        f"{', '.join(arms)}; concurrency {', '.join(map(str, concs))}; "
        f"round{'s' if len(rounds) != 1 else ''} {', '.join(map(str, rounds))})"
    )


def _versions_text(runs: list[LaterRun], ran: tuple[str, ...]) -> str:
    if not ran:
        return ""
    arms = {}
    for r in runs:
        if r.runtime_versions:
            arms.setdefault(r.runtime_versions, set()).add(r.arm)
    return " with " + "; ".join(
        f"{v} (arm{'s' if len(arms[v]) > 1 else ''} {', '.join(sorted(arms[v]))})" for v in ran
    )


def later_notes(
    experiment: str,
    runs: list[LaterRun],
    labels: dict[str, str],
    home_chip: str | None,
    home: list[Verdict],
    columns: dict[str, Column],
) -> list[Note]:
    """runs: those started after the post's date. One note per (chip, code version,
    runtime versions), the runtime versions being those of the runs of that chip and code
    version on that day (another mlx-lm makes another note, as another code version
    does); columns: chip id -> its newest-data view."""
    versions: dict[tuple, set[str]] = {}
    for r in runs:
        if r.runtime_versions:
            versions.setdefault((r.chip_id, r.code_version, r.day), set()).add(r.runtime_versions)
    groups: dict[tuple, list[LaterRun]] = {}
    for r in runs:
        ran = tuple(sorted(versions.get((r.chip_id, r.code_version, r.day), ())))
        groups.setdefault((r.chip_id, r.code_version, ran), []).append(r)
    notes = []
    for (chip, code, ran), rs in sorted(groups.items(), key=lambda kv: (max(r.day for r in kv[1]), kv[0])):
        where = labels.get(chip, chip)
        text = (
            f"Measured after this post was written: experiment {experiment} on {where} "
            f"at code version {code}{_versions_text(rs, ran)}, {_cells_text(rs)}. "
        )
        col = columns.get(chip)
        if col is None or not home:
            text += "No claim of this post reads these cells."
        else:
            moved = [(v, col.verdicts.get(v.number)) for v in home]
            moved = [(v, w) for v, w in moved if w is not None and w.measured.text() != v.measured.text()]
            shown = "; ".join(
                f"claim {v.stated!r} was {v.measured.text()}, now {w.measured.text()} ({plain(w)})"
                for v, w in moved[:MOVES_SHOWN]
            )
            more = len(moved) - MOVES_SHOWN
            text += (
                shown + (f"; and {more} more" if more > 0 else "") + ". "
                if moved
                else "No claimed figure changed at its printed precision. "
            )
            held = sum(plain(col.verdicts.get(v.number)) == "holds" for v in home)
            text += (
                f"On this data {held} of the post's {len(home)} claims hold (see the claims on "
                "every chip); they stay judged on the home data as of the post's date."
            )
        notes.append(Note(max(r.day for r in rs), text, automatic=True))
    return notes
