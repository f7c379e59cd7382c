"""The sequential design: measuring until a comparison is decided without losing the 95%.

- Looks happen at pre-declared round counts: the declared rounds, then doubling, up to
  `max_rounds` (3, 6, 12 for rounds = 3 and max_rounds = 12). A fixed design is one look.
- The 5% error is spent equally across the looks (Bonferroni: 5%/3 at each of three
  looks): by the union bound, whichever look a measurement stops at, the interval it
  reports misses with probability at most 5%, and each look's interval is a 98.3% one.
  Spending in proportion to the rounds instead would narrow the last look's interval but
  make the early ones over-cover (99.3% at the first look in the harness), past what a
  reader is told an interval is.
- A cell's interval is judged at the look its rounds were heading for: n rounds use the
  first look of at least n (a run cut short by its budget or a kill is that look, taken
  early and not because of the data).
- Stored per run as the schedule's round counts (`runs.looks`, "3,6,12"); NULL or one
  look is the fixed design and its plain 95% interval (`intervals.t975`).
"""

from __future__ import annotations

from functools import lru_cache

from runner.publish.stats.student import two_sided_critical

ALPHA = 0.05


def looks(rounds: int, max_rounds: int) -> tuple[int, ...]:
    """The round counts at which a run looks: rounds, doubling, and max_rounds last."""
    out = [rounds]
    while out[-1] * 2 < max_rounds:
        out.append(out[-1] * 2)
    if max_rounds > out[-1]:
        out.append(max_rounds)
    return tuple(out)


def parse_looks(text: str | None) -> tuple[int, ...]:
    """A stored schedule ("3,6,12") -> its looks; () for NULL (the fixed design)."""
    if not text:
        return ()
    return tuple(int(x) for x in str(text).split(","))


def spent(schedule: tuple[int, ...]) -> tuple[float, ...]:
    """The error each look spends: ALPHA split equally over the looks."""
    return tuple(ALPHA / len(schedule) for _ in schedule)


def look_of(n_rounds: int, schedule: tuple[int, ...]) -> int:
    """The index of the look `n_rounds` belongs to: the first with at least that many rounds."""
    return next((i for i, n in enumerate(schedule) if n >= n_rounds), len(schedule) - 1)


def confidence(n_rounds: int, schedule: tuple[int, ...]) -> float:
    """The two-sided confidence of an interval over `n_rounds` under the schedule."""
    if len(schedule) <= 1:
        return 1 - ALPHA
    return 1 - spent(schedule)[look_of(n_rounds, schedule)]


@lru_cache(maxsize=512)
def critical(n_rounds: int, schedule: tuple[int, ...]) -> float:
    """t's critical value for an interval over `n_rounds` (df = n - 1) under the schedule."""
    return two_sided_critical(confidence(n_rounds, schedule), n_rounds - 1)
