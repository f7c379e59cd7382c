"""What later data says about a post: the claims-on-every-chip table and the automatic
update notes for measurements made after the post's date.

- A post's claims are judged on its home data (`home.py`). Here the same body is
  rendered again with each other chip (and the home chip's newest data) as the judging
  view, and each claim's value and plain verdict there are collected: shown, never a
  build failure.
- Each later measurement (a chip, a code version and the runtime versions that ran it,
  with runs after the post's date) gets a dated one-line note: how many of the claims
  that read its experiment hold on its data, and what its machine differs in.
- It compares verdicts; `notes.py` words the note and `post.py` renders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runner.publish.stats.claims import Verdict
from runner.publish.stats.verdicts import UNDECIDED
from runner.publish.blocks.notes import Clause, Note, measurement_note
from runner.publish.sql.rows import LaterRun


@dataclass(frozen=True, slots=True)
class Column:
    """One judging view of the claims: a chip's newest data, or the home data."""

    label: str
    chip_id: str | None
    verdicts: dict[int, Verdict]  # claim number -> verdict in this view


def plain(v: Verdict | None) -> str:
    """holds, does not hold, undecided (its data decides neither way) or not measured."""
    if v is None or v.measured.value is None:
        return "not measured"
    if v.ok:
        return "holds"
    decision = v.measured.decision()
    return "undecided" if decision is not None and decision.kind == UNDECIDED else "does not hold"


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


def later_notes(
    experiment: str,
    runs: list[LaterRun],
    labels: dict[str, str],
    home: list[Verdict],
    columns: dict[str, Column],
    reads: dict[int, frozenset[str]],
    machine: Callable[[str, list[LaterRun]], str | None] | None = None,
    pooled: dict[str, tuple[int, int]] | None = None,
) -> list[Note]:
    """runs: those started after the post's date. One note per (chip, code version,
    runtime versions), the runtime versions being those of the runs of that chip and code
    version on that day (another mlx-lm makes another note, as another code version
    does); columns: chip id -> its newest-data view; reads: claim number -> the
    experiments it reads (only the claims that read this experiment are counted);
    machine: what a group's machine differs in from the home data's (None: nothing);
    pooled: chip (class) -> the instances and rounds its newest data pools, said when the
    claims were judged on more than one instance ("on 2 instances, 6 rounds")."""
    versions: dict[tuple, set[str]] = {}
    for r in runs:
        if r.runtime_versions:
            versions.setdefault((r.chip_id, r.code_version, r.day), set()).add(r.runtime_versions)
    groups: dict[tuple, list[LaterRun]] = {}
    for r in runs:
        ran = tuple(sorted(versions.get((r.chip_id, r.code_version, r.day), ())))
        groups.setdefault((r.chip_id, r.code_version, ran), []).append(r)
    reading = [v for v in home if experiment in reads.get(v.number, ())]
    notes = []
    # In order of the groups' last runs (their day first): on one day, the newest
    # measurement's note is the last, whatever its code version's hash.
    for (chip, code, ran), rs in sorted(groups.items(), key=lambda kv: (max(r.started for r in kv[1]), kv[0])):
        col = columns.get(chip)
        counted = reading if col is not None else []
        said_of = [plain(col.verdicts.get(v.number)) for v in counted] if col else []
        held, undecided = said_of.count("holds"), said_of.count("undecided")
        cells = len({(r.arm, r.concurrency) for r in rs})
        note = measurement_note(
            max(r.day for r in rs),
            labels.get(chip, chip),
            code,
            experiment,
            cells,
            held,
            len(counted),
            undecided,
            max(r.started for r in rs),
        )
        instances, rounds = (pooled or {}).get(chip, (1, 0))
        if counted and instances > 1:
            note = note.with_clause(Clause("pooled", f"on {instances} instances, {rounds} rounds"))
        if ran:
            note = note.with_clause(Clause("runtime", ", ".join(ran)))
        said = machine(chip, rs) if machine else None
        if said:
            note = note.with_clause(Clause("machine", said))
        notes.append(note)
    return notes
