"""Bounding a run's memory, between cells and never inside a cell's clock.

- What the runner holds (measured over spec-decode-batching-deep, issue 22): not its
  Python-side buffers (a cell's events are written and dropped when it ends), nor mostly
  MLX arrays (about 82 MB an engine), but each engine's compiled graphs, one per traced
  decode shape (about 1.5 MB each on deep, near 800 MB an MTP engine). The arms' engines
  therefore share their model and its compiled functions (engine/shelf.py): six arms on
  deep hold three sets of graphs, not six. What grew after the arms were up was graphs
  traced inside timed passes and kept: short prefills (now uncompiled, engine/launch.py),
  every decode shape again when the pool grew (the warm-up now sizes it first) or when a
  queued pass fed uint32 ids (now int32, engine/forward.py).
- MLX's buffer cache is capped at CACHE_LIMIT_BYTES for the run; when an engine goes, the
  cache is emptied and the freed heap handed back to the system.
- A resident-memory budget (BOTHROWS_RUN_MEMORY_MB; default half the machine's memory):
  when the runner's resident memory after a cell exceeds it, the engines of the arms other
  than the next cell's are released; each starts again, warmed up outside any clock, before
  its next cell. Slower, and the arm then runs on a new engine instance, as
  `restart_every` does on purpose (arm_runtimes.py).
This module reads and frees memory; execute.py decides when.
"""

from __future__ import annotations

import ctypes
import gc
import os

CACHE_LIMIT_BYTES = 128 << 20  # a pass's transient buffers on deep at batch 4 are a few MB
BUDGET_ENV = "BOTHROWS_RUN_MEMORY_MB"


def resident_bytes() -> int | None:
    """This process's resident memory (None where /proc is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def budget_bytes(explicit_mb: float | None = None) -> int | None:
    """The resident-memory budget: explicit, else BOTHROWS_RUN_MEMORY_MB, else half the
    machine's memory (None: unknown, no budget). A bad setting raises ValueError naming it."""
    if explicit_mb is None and os.environ.get(BUDGET_ENV):
        try:
            explicit_mb = float(os.environ[BUDGET_ENV])
        except ValueError:
            raise ValueError(f"{BUDGET_ENV} must be a number of MB, got {os.environ[BUDGET_ENV]!r}") from None
    if explicit_mb is not None:
        if explicit_mb <= 0:
            raise ValueError(f"{BUDGET_ENV} must be a positive number of MB, got {explicit_mb!r}")
        return int(explicit_mb * (1 << 20))
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (OSError, ValueError):
        return None


def cap_cache() -> None:
    import mlx.core as mx

    mx.set_cache_limit(CACHE_LIMIT_BYTES)


def release() -> None:
    """Return what dropped engines held: collect their objects, empty MLX's cache, and hand
    the freed heap back to the system (glibc keeps it otherwise: a dropped engine's
    compiled graphs left the resident memory where it was)."""
    import mlx.core as mx

    gc.collect()
    mx.clear_cache()
    _trim_heap()


def _trim_heap() -> None:
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to hand back this way
        pass


def over(budget: int | None) -> int | None:
    """The resident bytes when over the budget, else None."""
    rss = resident_bytes()
    return rss if budget is not None and rss is not None and rss > budget else None


def bound(runtimes: dict, next_arm: str | None, budget: int | None, progress) -> None:
    """Over the budget, release every engine but the next cell's (between cells)."""
    rss = over(budget)
    if rss is None:
        return
    idle = sorted(a for a, r in runtimes.items() if a != next_arm and not isinstance(r, Exception))
    for arm in idle:
        runtimes.pop(arm).stop()
    release()
    if idle:
        progress.note(
            f"resident memory {rss / 2**20:,.0f} MB is over the budget of {budget / 2**20:,.0f} MB: "
            f"released the engine(s) of arm(s) {', '.join(idle)}; each starts again before its next cell"
        )
