"""The named rows the query layer hands out (`queries.Reader`'s results).

- A row that leaves `queries.py` is one of these (or `queries.CellStat`, `queries.Chip`),
  so a reader names its fields: no function elsewhere indexes a row by position.
- NamedTuples, so they still compare and hash as the plain tuples they replace (a set of
  `CellKey`s answers `(chip, arm, c) in cells`).
- Types only: nothing here reads the database.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple


class CellKey(NamedTuple):
    """A cell of one chip: (chip, arm, concurrency)."""

    chip_id: str
    arm: str
    concurrency: int


class RunKey(NamedTuple):
    """A run's cell and round: the key of per-run and per-request values."""

    chip_id: str
    arm: str
    concurrency: int
    round: int


class CellRound(NamedTuple):
    """A planned cell and round of a declaration, without its chip."""

    arm: str
    concurrency: int
    round: int


class ChipKey(NamedTuple):
    """A chip as `report.py` names it: its name and id."""

    name: str
    chip_id: str


class WidthKey(NamedTuple):
    """One batch width of one arm on one chip (the drafted-by-width chart)."""

    chip_id: str
    arm: str
    width: int


class WidthRuns(NamedTuple):
    """Per run at one width: its passes and those that drafted."""

    passes: list[int]
    drafted: list[int]


class TokenTime(NamedTuple):
    """One output token of the per-token timeline."""

    arm: str
    request_id: int
    label: str  # the script entry's label, "" for none
    t_s: float  # when it arrived, from the cell's start
    gap_ms: float  # since the request's previous token (or its arrival)


class ArmRuntime(NamedTuple):
    """What measured an arm, and whether its runs have per-pass rows."""

    runtime: str
    has_passes: bool


class RunSummary(NamedTuple):
    """How many complete runs, and the newest finish time."""

    runs: int
    newest: datetime | None


class LaterRun(NamedTuple):
    """A complete run started on or after a post's date."""

    run_id: str
    chip_id: str
    arm: str
    concurrency: int
    round: int
    day: str  # its start, YYYY-MM-DD
    code_version: str
    runtime_versions: str | None = None  # what ran it (runtime and server versions; None: ours)
    started: str = ""  # its start, to the microsecond (notes of one day follow it)
