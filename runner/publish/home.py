"""A post's home: the chip its author measured on, with the data as of the post's date.

Claims without `chip=` are judged there, so a post stays true to what its author
measured whatever is added to the database later. Front matter `chip:` names it (a chip
name, the label a page shows, or a chip id prefix where names repeat); when it is
omitted, the home is the one chip the data holds as of the post's date (or, for a post
dated before any of its data, the one chip the data holds at all). Anything else is one
problem naming the choices. This module decides; it does not query or render.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class Judging:
    """Where a rendering judges its claims: a default chip and a cutoff."""

    chip_id: str | None
    as_of: datetime | None
    label: str  # "home", or the chip's label in the claims-on-every-chip table
    problem: str | None = None  # why there is no chip (reported once, not per claim)
    every_value: bool = False  # read every value on chip_id, even one whose call names a chip


def match_chip(wanted: str, chip_ids: list[str], labels: dict[str, str], names: dict[str, str]) -> list[str]:
    w = str(wanted).strip()
    exact = [c for c in chip_ids if w in (labels.get(c), names.get(c), c)]
    return exact or [c for c in chip_ids if len(w) >= 4 and c.startswith(w)]


def resolve_home(
    wanted: object,
    as_of: datetime | None,
    chips_then: tuple[str, ...],
    chips_now: tuple[str, ...],
    labels: dict[str, str],
    names: dict[str, str],
) -> Judging:
    """chips_then: chip ids with data as of the post's date; chips_now: all of them."""
    known = ", ".join(repr(labels[c]) for c in chips_now)
    if wanted is not None:
        if not isinstance(wanted, str) or not wanted.strip():
            return Judging(
                None, as_of, "home", f"front matter field 'chip' must name a chip (the data has {known})"
            )
        hits = match_chip(wanted, list(chips_now), labels, names)
        if len(hits) == 1:
            return Judging(hits[0], as_of if hits[0] in chips_then else None, "home")
        return Judging(
            None,
            as_of,
            "home",
            (
                f"front matter field 'chip': {wanted!r} names {len(hits)} chips; name one of {known}"
                if hits
                else f"front matter field 'chip': unknown chip {wanted!r}; the data has {known}"
            ),
        )
    if len(chips_then) == 1:
        return Judging(chips_then[0], as_of, "home")
    if not chips_then and len(chips_now) == 1:
        return Judging(chips_now[0], None, "home")
    pool = chips_then or chips_now
    day = f" as of {as_of - timedelta(days=1):%Y-%m-%d}" if as_of and chips_then else ""
    return Judging(
        None,
        as_of,
        "home",
        (
            f"this post's home chip is ambiguous: its data{day} holds chips "
            + ", ".join(repr(labels[c]) for c in pool)
            + "; name one in front matter (chip: ...)"
        ),
    )
