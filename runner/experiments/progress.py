"""Progress of a run on stderr: one updating line per cell on a terminal, plain lines
(or JSON lines with --json) otherwise.

Shows cell i/N, arm, concurrency, round, how its requests arrive, the cell's progress
against its minimums (requests finished against its request minimum: requests_per_client
x clients for closed-loop clients and Poisson arrivals, one play of the script for a
script; seconds against min_cell_seconds, tokens against min_cell_tokens; a cell ends
when all three hold and its requests in flight finish), tokens/s and the ETA of the
whole invocation. The ETA is the planned
(estimated) seconds of the cells left, scaled by how long the finished cells took
against their estimates. Terminal redraws are throttled so that reporting progress does
not perturb what is being timed; plain and JSON output write only at cell boundaries.
This module knows nothing about the engine or the store.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import TextIO

REDRAW_SECONDS = 0.5


@dataclass(frozen=True)
class CellLabel:
    index: int  # 1-based position among the cells this invocation runs
    total: int
    arm: str
    concurrency: int
    round: int

    def __str__(self) -> str:
        return (
            f"cell {self.index}/{self.total} arm={self.arm} concurrency={self.concurrency} round={self.round}"
        )


@dataclass(frozen=True)
class CellTarget:
    """What a cell must reach before its clients stop sending, and its estimated length."""

    min_requests: int
    min_seconds: float
    min_tokens: int
    estimate_seconds: float = 0.0
    arrivals: str = ""  # how its requests arrive (arrivals.describe), when not closed-loop

    def fraction(self, requests: int, seconds: float, tokens: int) -> float:
        """How far the slowest of the three minimums is (the cell needs all three)."""
        parts = [
            requests / self.min_requests if self.min_requests else 1.0,
            seconds / self.min_seconds if self.min_seconds else 1.0,
            tokens / self.min_tokens if self.min_tokens else 1.0,
        ]
        return min(1.0, *parts)

    def __str__(self) -> str:
        text = f"at least {self.min_requests} request{'' if self.min_requests == 1 else 's'}"
        if self.min_seconds:
            text += f", {self.min_seconds:g} s"
        if self.min_tokens:
            text += f", {self.min_tokens} tokens"
        return f"{self.arrivals}; {text}" if self.arrivals else text


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    def __init__(self, stream: TextIO | None = None, mode: str | None = None):
        self.stream = stream or sys.stderr
        self.mode = mode or ("tty" if self.stream.isatty() else "plain")
        self.estimates: list[float] = []  # per cell this invocation runs, in order
        self.cell_seconds = 0.0  # time inside cells only: loading and warm-up are not work
        self.estimated_done = 0.0  # the estimates of the cells finished so far
        self._last_draw = 0.0
        self._cell: CellLabel | None = None
        self._target: CellTarget | None = None

    def plan(self, estimates: list[float]) -> None:
        """The estimated seconds of each cell to run (estimate.cell_seconds), for the ETA."""
        self.estimates = list(estimates)

    def _emit(self, event: str, text: str, **fields) -> None:
        if self.mode == "json":
            record = {"event": event, **fields}
            self.stream.write(json.dumps(record, sort_keys=True) + "\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, text: str, **fields) -> None:
        self._emit("note", text, message=text, **fields)

    def cell_started(self, cell: CellLabel, target: CellTarget) -> None:
        self._cell, self._target, self._cell_t0 = cell, target, time.monotonic()
        if self.mode != "tty":
            self._emit(
                "cell_started",
                f"{cell} started ({target})",
                cell=cell.index,
                cells=cell.total,
                arm=cell.arm,
                concurrency=cell.concurrency,
                round=cell.round,
                min_requests=target.min_requests,
                min_seconds=target.min_seconds,
                min_tokens=target.min_tokens,
                arrivals=target.arrivals,
            )

    def eta(self, in_cell_seconds: float | None = None) -> float:
        """Seconds left: the cells not yet finished, at the pace of those that have.
        `in_cell_seconds` is how long the current cell has run; None once it finished."""
        if not self.estimates or self._cell is None:
            return 0.0
        pace = self.cell_seconds / self.estimated_done if self.estimated_done > 0 else 1.0
        i = self._cell.index
        left = sum(self.estimates[i:]) * pace
        if in_cell_seconds is None or i > len(self.estimates):
            return left
        return left + max(self.estimates[i - 1] * pace - in_cell_seconds, 0.0)

    def update(self, requests_done: int, tokens: int) -> None:
        """Called as requests finish inside a cell; draws at most every REDRAW_SECONDS."""
        now = time.monotonic()
        if self.mode != "tty" or now - self._last_draw < REDRAW_SECONDS:
            return
        self._last_draw = now
        seconds = now - self._cell_t0
        t = self._target
        rate = tokens / max(seconds, 1e-9)
        minimums = f"requests {requests_done}/{t.min_requests}"
        if t.min_seconds:
            minimums += f"  {seconds:.1f}/{t.min_seconds:g} s"
        if t.min_tokens:
            minimums += f"  tokens {tokens}/{t.min_tokens}"
        line = (
            f"{self._cell}  {minimums} ({t.fraction(requests_done, seconds, tokens):.0%})  "
            f"{rate:,.1f} tok/s  ETA {_clock(self.eta(seconds))}"
        )
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()

    def cell_finished(
        self,
        cell: CellLabel,
        status: str,
        tokens: int,
        seconds: float,
        requests: int = 0,
        reason: str | None = None,
    ) -> None:
        """`reason`: why a cell failed (a runtime fault), said instead of its figures."""
        self.cell_seconds += seconds
        if self.estimates and cell.index <= len(self.estimates):
            self.estimated_done += self.estimates[cell.index - 1]
        rate = tokens / max(seconds, 1e-9)
        if self.mode == "tty":
            self.stream.write("\r\x1b[2K")
        text = (
            f"{cell} {status}: {reason}"
            if reason
            else f"{cell} {status}: {requests} requests, {tokens} tokens in {seconds:.2f} s "
            f"({rate:,.1f} tok/s), ETA {_clock(self.eta())}"
        )
        extra = {"reason": reason} if reason else {}
        self._emit(
            "cell_finished",
            text,
            cell=cell.index,
            cells=cell.total,
            arm=cell.arm,
            concurrency=cell.concurrency,
            round=cell.round,
            status=status,
            requests=requests,
            tokens=tokens,
            seconds=round(seconds, 3),
            **extra,
        )
