"""A post's home: the chip its author measured on, with the data as of the post's date.

Claims without `chip=` are judged there, so a post stays true to what its author
measured whatever is added to the database later. Front matter `chip:` names it (a chip
name, the label a page shows, or a chip id prefix where names repeat); when it is
omitted, the home is the one chip the data holds as of the post's date (or, for a post
dated before any of its data, the one chip the data holds at all). Anything else is one
problem naming the choices.

What data of the home is judged (a `Cutoff`): front matter `data:` (measurement folder
names) pins it, values' `data=` beside `as_of=` too; without a pin, each cell's
*earliest* complete run up to the post's date (the data its author could have seen,
never a re-measurement the same day), and for `as_of=` the earliest run of that day,
else the newest before it. This module decides; it does not query or render.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import NamedTuple


class Cutoff(NamedTuple):
    """A judging view's data: runs started before `at` (None: any time), each cell's
    earliest at or after `first_from` else (unless `fresh`) the newest before it; or,
    with `data`, the runs of those measurement folders."""

    at: datetime | None
    first_from: datetime = datetime.min
    data: tuple[str, ...] | None = None
    fresh: bool = False  # only runs from `first_from` on: a re-measurement's own looks
    declaration: str | None = None  # only this declaration's runs (sha256): a run's own looks


class Pinned(NamedTuple):
    """A value's `as_of=` with its `data=` pin (api.py hands both on as one argument)."""

    as_of: object
    data: object


def post_cutoff(as_of: datetime | None, data: tuple[str, ...] | None) -> Cutoff | None:
    """The home data of a post dated the day before `as_of` (None: undated and unpinned,
    so the newest data)."""
    return None if as_of is None and data is None else Cutoff(as_of, datetime.min, data)


def day_cutoff(day, data: tuple[str, ...] | None) -> Cutoff:
    """The data of an update section's day (`as_of=`): that day's earliest runs."""
    start = datetime.combine(day, time())
    return Cutoff(start + timedelta(days=1), start, data)


def pinned_folders(value: object, field: str = "data") -> tuple[tuple[str, ...] | None, str | None]:
    """A `data:` pin (a folder name or a list of them) and the problem with it, if any."""
    if value is None:
        return None, None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        return None, f"front matter field {field!r} must name measurement folders (a name or a list)"
    return tuple(sorted({n.strip() for n in names})), None


def unknown_folders(pin: tuple[str, ...], known: list[str] | None) -> str | None:
    """The problem with a pin naming folders the data was not loaded from."""
    if known is None:
        return "a 'data' pin needs a database loaded from measurement folders (runner build does it)"
    missing = [n for n in pin if n not in known]
    if missing:
        return f"'data' names measurement folders the data does not hold: {', '.join(missing)}"
    return None


@dataclass(frozen=True, slots=True)
class Judging:
    """Where a rendering judges its claims: a default chip and a cutoff."""

    chip_id: str | None
    as_of: datetime | None
    label: str  # "home", or the chip's label in the claims-on-every-chip table
    problem: str | None = None  # why there is no chip (reported once, not per claim)
    every_value: bool = False  # read every value on chip_id, even one whose call names a chip
    data: tuple[str, ...] | None = None  # front matter `data:`: the measurement folders judged

    def cutoff(self) -> Cutoff | None:
        """The judging view's data (None: the newest, as in the claims-on-every-chip table)."""
        return None if self.every_value else post_cutoff(self.as_of, self.data)


def match_chip(
    wanted: str, chip_ids: list[str], labels: dict[str, str], names: dict[str, str | tuple[str, ...]]
) -> list[str]:
    """The chips (machine classes) `wanted` names: by label, id or name, or an instance's
    chip name or id (`names` holds a class's own and its instances'); else by id prefix."""
    w = str(wanted).strip()
    known = {
        c: (names.get(c),) if isinstance(names.get(c), (str, type(None))) else names[c] for c in chip_ids
    }
    exact = [c for c in chip_ids if w in (labels.get(c), c, *known[c])]
    return exact or [
        c for c in chip_ids if len(w) >= 4 and any(str(n).startswith(w) for n in (c, *known[c]) if n)
    ]


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


def read_pin(meta: dict, reader, experiments: list[str]) -> tuple[tuple[str, ...] | None, str | None]:
    """Front matter `data:` (None when absent or bad) and the problem with it, if any."""
    pin, problem = pinned_folders(meta.get("data"))
    if pin is None:
        return None, problem
    known = [reader.judging.measurement_folders(e) for e in experiments]
    problem = unknown_folders(pin, None if None in known else [f for k in known for f in k])
    return (None, problem) if problem else (pin, None)


def unseen_by_home(reader, experiment: str, quick: bool, judging: Judging | None) -> list:
    """The home chip's runs its judged data passed over (a same-day re-measurement)."""
    cut = judging.cutoff() if judging is not None and judging.chip_id is not None else None
    return [] if cut is None else reader.judging.unseen(experiment, quick, cut, judging.chip_id)
