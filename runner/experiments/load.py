"""How busy the machine was while a cell ran: the figures stored beside each run.

`sample()` is taken just before a cell's clock starts and `closing_sample()` just after
its last request finishes; `figures(start, end)` turns two samples into the four
nullable `runs` columns:

- `loadavg_start`, `loadavg_end`: the 1-minute load average (os.getloadavg, i.e.
  /proc/loadavg on Linux) at the two samples.
- `steal_fraction`: CPU time the hypervisor gave to other guests, over all CPU time,
  between the samples (the `steal` column of /proc/stat's aggregate `cpu` line).
- `busy_fraction_other`: CPU time spent by processes other than this one, over all CPU
  time: the non-idle, non-steal delta of /proc/stat minus this process's own user and
  system time (os.times(), every thread), clamped to [0, 1]. Fractions are of the whole
  machine (all cores together), so 0.5 on two cores is one core's worth of other work.

The contention rule: a cell whose steal or other processes' share passed the declared
limit (`contention_limit`, default 15% of the cell's CPU time) is measured again in its
slot, at most MAX_RERUNS times, and then kept (flagged busy on the page) with its count;
BOTHROWS_CONTENTION_RULE=off turns it off for a process (the test suite does, since its
own workers share the cores by design). Whatever the platform does not report is None
(stored as NULL), never 0: no /proc/stat (macOS, Windows) gives None fractions; a
kernel without the steal column gives a None steal_fraction. Reading /proc costs
microseconds and happens outside the timed cell. This module knows nothing about the
engine or the store.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# /proc/stat cpu line: user nice system idle iowait irq softirq steal guest guest_nice.
# guest and guest_nice are already counted inside user and nice, so they are left out.
_IDLE, _IOWAIT, _STEAL = 3, 4, 7
COLUMNS = ("loadavg_start", "loadavg_end", "steal_fraction", "busy_fraction_other")
DEFAULT_LIMIT = 0.15
MAX_RERUNS = 2
RULE_ENV = "BOTHROWS_CONTENTION_RULE"


def contention_limit(declared: float | None) -> float | None:
    """The limit a run applies: the declaration's (None: the rule is off), unless the
    environment turns the rule off."""
    return None if os.environ.get(RULE_ENV, "").lower() == "off" else declared


def contended(figures: dict[str, float | None], limit: float) -> str | None:
    """Why a cell's CPU was taken past `limit` (None: it was not, or nothing was reported)."""
    steal, other = figures.get("steal_fraction"), figures.get("busy_fraction_other")
    if steal is not None and steal > limit:
        return f"the hypervisor stole {steal:.0%} of its CPU (limit {limit:.0%})"
    if other is not None and other > limit:
        return f"other processes took {other:.0%} of its CPU (limit {limit:.0%})"
    return None


@dataclass(frozen=True)
class Sample:
    loadavg: float | None
    ticks: tuple[int, ...] | None  # the aggregate cpu line's first (up to) 8 fields
    own_seconds: float  # this process's user + system CPU time


def _loadavg() -> float | None:
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):  # not available on this platform
        return None


def _cpu_ticks(stat: Path) -> tuple[int, ...] | None:
    try:
        first = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    try:
        fields = tuple(int(x) for x in first[1:9])
    except ValueError:
        return None
    return fields if len(fields) >= 4 else None


def sample(stat: Path = PROC_STAT) -> Sample:
    t = os.times()
    return Sample(_loadavg(), _cpu_ticks(stat), t.user + t.system)


def closing_sample(start: Sample, stat: Path = PROC_STAT, wait_s: float = 0.1) -> Sample:
    """The sample that closes a cell begun at `start`. The kernel counts CPU time in ticks,
    and on a VM they arrive in bursts: a cell of a few tens of milliseconds can close
    before any is counted, and its fractions would be unknown. Then this waits (at most
    wait_s) for the next tick: the window grows by that wait, the fractions stay the
    machine's over a window holding the whole cell."""
    end = sample(stat)
    deadline = time.monotonic() + wait_s
    while _no_tick(start, end) and time.monotonic() < deadline:
        time.sleep(0.002)
        end = sample(stat)
    return end


def _no_tick(start: Sample, end: Sample) -> bool:
    if start.ticks is None or end.ticks is None:
        return False  # nothing to wait for: the platform reports none
    return sum(end.ticks) <= sum(start.ticks)


def _ticks_per_second() -> float | None:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return None


def figures(start: Sample, end: Sample) -> dict[str, float | None]:
    """The four `runs` columns for the interval between two samples."""
    out: dict[str, float | None] = {
        "loadavg_start": start.loadavg,
        "loadavg_end": end.loadavg,
        "steal_fraction": None,
        "busy_fraction_other": None,
    }
    if start.ticks is None or end.ticks is None or len(start.ticks) != len(end.ticks):
        return out
    delta = [b - a for a, b in zip(start.ticks, end.ticks)]
    if len(delta) > _IOWAIT and delta[_IOWAIT] < 0:
        delta[_IOWAIT] = 0  # the kernel's iowait count may go back a little (proc(5)): not a reset
    total = sum(delta)
    if total <= 0 or any(d < 0 for d in delta):  # no tick elapsed, or counters reset
        return out
    has_steal = len(delta) > _STEAL
    steal = delta[_STEAL] if has_steal else 0
    if has_steal:
        out["steal_fraction"] = steal / total
    idle = delta[_IDLE] + (delta[_IOWAIT] if len(delta) > _IOWAIT else 0)
    hz = _ticks_per_second()
    if hz:
        own = (end.own_seconds - start.own_seconds) * hz
        out["busy_fraction_other"] = min(max((total - idle - steal - own) / total, 0.0), 1.0)
    return out
