"""Progress of a run on stderr: one updating line per cell on a terminal, plain lines
(or JSON lines with --json) otherwise.

Shows cell i/N, arm, concurrency, round, requests done/total, tokens/s and the ETA of
the whole experiment. Terminal redraws are throttled so that reporting progress does
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
    index: int        # 1-based position among the cells this invocation runs
    total: int
    arm: str
    concurrency: int
    round: int

    def __str__(self) -> str:
        return (f"cell {self.index}/{self.total} arm={self.arm} "
                f"concurrency={self.concurrency} round={self.round}")


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    def __init__(self, stream: TextIO | None = None, mode: str | None = None,
                 total_requests: int = 0):
        self.stream = stream or sys.stderr
        self.mode = mode or ("tty" if self.stream.isatty() else "plain")
        self.total_requests = total_requests  # over all cells this invocation runs
        self.finished_requests = 0
        self.cell_seconds = 0.0   # time inside cells only: loading and warm-up are not work
        self._last_draw = 0.0
        self._cell: CellLabel | None = None

    def _emit(self, event: str, text: str, **fields) -> None:
        if self.mode == "json":
            record = {"event": event, **fields}
            self.stream.write(json.dumps(record, sort_keys=True) + "\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, text: str, **fields) -> None:
        self._emit("note", text, message=text, **fields)

    def cell_started(self, cell: CellLabel, requests: int) -> None:
        self._cell, self._cell_requests, self._cell_t0 = cell, requests, time.monotonic()
        if self.mode != "tty":
            self._emit("cell_started", f"{cell} started ({requests} requests)",
                       cell=cell.index, cells=cell.total, arm=cell.arm,
                       concurrency=cell.concurrency, round=cell.round, requests=requests)

    def eta(self, done_in_cell: int) -> float:
        done = self.finished_requests + done_in_cell
        if not done or not self.total_requests:
            return 0.0
        elapsed = self.cell_seconds + (time.monotonic() - self._cell_t0 if done_in_cell else 0.0)
        return elapsed / done * (self.total_requests - done)

    def update(self, requests_done: int, tokens: int) -> None:
        """Called as requests finish inside a cell; draws at most every REDRAW_SECONDS."""
        now = time.monotonic()
        if self.mode != "tty" or now - self._last_draw < REDRAW_SECONDS:
            return
        self._last_draw = now
        rate = tokens / max(now - self._cell_t0, 1e-9)
        line = (f"{self._cell}  requests {requests_done}/{self._cell_requests}  "
                f"{rate:,.1f} tok/s  ETA {_clock(self.eta(requests_done))}")
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()

    def cell_finished(self, cell: CellLabel, status: str, tokens: int, seconds: float) -> None:
        self.finished_requests += self._cell_requests if status == "complete" else 0
        self.cell_seconds += seconds
        rate = tokens / max(seconds, 1e-9)
        if self.mode == "tty":
            self.stream.write("\r\x1b[2K")
        self._emit("cell_finished",
                   f"{cell} {status}: {tokens} tokens in {seconds:.2f} s ({rate:,.1f} tok/s), "
                   f"ETA {_clock(self.eta(0))}",
                   cell=cell.index, cells=cell.total, arm=cell.arm, concurrency=cell.concurrency,
                   round=cell.round, status=status, tokens=tokens, seconds=round(seconds, 3))
