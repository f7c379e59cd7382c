"""Requests that came back shorter than asked, or errored, on a page and in its claims.

- A runtime that stops at end-of-sequence returns fewer tokens than the workload asked
  for (requests.asked_tokens), which changes batch occupancy: a figure over such cells is
  not the same requests as in the other arms.
- A table row over such a cell says how many of its requests were short; a claim whose
  cells hold any fails with that reason, unless the experiment's declaration says
  `workload.allow_short = true`.
- A request that errored (an HTTP error, a stalled stream: requests.error) has no figures;
  a table row says how many of its cell's did, and a claim on such cells always fails.
This module neither queries nor renders HTML; it reads the declaration's one key.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from runner.publish.stats.claims import Verdict


def declared_allow_short(declarations: Path | None, experiment: str) -> bool:
    """workload.allow_short of the experiment's declaration (False when unreadable here)."""
    path = declarations / f"{experiment}.toml" if declarations else None
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, tomllib.TOMLDecodeError):
        return False
    workload = doc.get("workload")
    return isinstance(workload, dict) and workload.get("allow_short") is True


def short_text(short: int, requests: int) -> str:
    return f"{short} of {requests} requests came back shorter than asked"


def short_of(cells, counts: dict) -> tuple[int, int]:
    """(short, requests) summed over the cells ((experiment, chip, arm, c) or (chip, arm, c))."""
    hits = [counts[c[-3:]] for c in cells if c[-3:] in counts]
    return sum(h.short for h in hits), sum(h.requests for h in hits)


def errored_of(cells, counts: dict) -> tuple[int, int]:
    """(errored, requests) summed over the cells, as short_of."""
    hits = [counts[c[-3:]] for c in cells if c[-3:] in counts]
    return sum(h.errored for h in hits), sum(h.requests for h in hits)


def judge_short(verdict: Verdict, cells, counts: dict, allow_short: bool) -> Verdict:
    """A claim standing on cells with errored requests fails, saying how many; so does one
    on cells with short requests, unless the experiment allows them."""
    if not verdict.ok:
        return verdict
    errored, requests = errored_of(cells, counts)
    if errored:
        return dataclasses.replace(
            verdict,
            ok=False,
            reason=(
                f"{errored} of {requests} requests errored in the cells behind it (no answer from "
                "the runtime: its figures stand on the others only)"
            ),
        )
    short, requests = short_of(cells, counts)
    if not short or allow_short:
        return verdict
    return dataclasses.replace(
        verdict,
        ok=False,
        reason=(
            f"{short_text(short, requests)} in the cells behind it (the arms did not serve the "
            "same lengths); declare workload.allow_short = true to accept them"
        ),
    )
