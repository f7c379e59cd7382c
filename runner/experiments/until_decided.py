"""Measuring until decided: after the declared rounds, rounds are added at the design's
pre-declared looks (`publish/stats/sequential.py`) to the concurrencies whose deciding
comparisons are still undecided, until each is decided, `max_rounds` is reached or the
budget ends.

- The deciding comparisons: the post's `headline:` arm against its base on its metric at
  one sequence and at the ceiling, when a post names this experiment with one (with
  `at_least: "0.97x"` in it, a floor too: each is then decided only once the floor is as
  well, held or refuted, `verdicts.decide_bound`, for a level can be decided while the
  floor inside the band is not); otherwise
  every arm against the first declared arm on decode and aggregate tok/s at every
  concurrency. A comparison of two identical arms (the A/A pair) is one like any other
  (it can only be decided level), and the pair is always measured beside the others.
  An `-aa` copy's comparison (`[workload] aa = true`) is printed at each look but never
  keeps the run going: it calibrates the others and is measured where they are undecided.
- At each look the statistics floor judges them (`verdicts.decide`, with the design's
  interval and the A/A margin); the next look's rounds are planned for the undecided
  concurrencies and the arms their comparisons name, counterbalanced as ever
  (`cell_plan.py`); cells already complete are skipped, so a killed run resumes the
  sequence where it was. The budget counts from the run's start: the declared rounds
  always finish, and no group of added cells starts after it ends. A budget that ends
  first is a normal end: the page says undecided.
- A look judges the runs of this declaration only: an edited declaration's cells are new,
  and the earlier version's rounds (which pages may still pool, the newest run of a
  cell) measured something else, so they never decide when this one stops. A
  re-measurement (`--remeasure`, `since` its start) judges its looks on its own runs
  only, never pooled with an earlier measurement's rounds, and a later look re-runs none
  of the cells an earlier one measured.
- The database is read between looks through the query layer (the store is closed
  then); this module writes nothing itself and prints through `Progress`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from runner.experiments.declaration import Experiment
from runner.experiments.progress import Progress

DEFAULT_METRICS = ("decode_tps", "aggregate_tps")


@dataclass(frozen=True)
class Comparison:
    arm: str
    base: str
    metric: str
    concurrencies: tuple[int, ...]
    floor: float | None = None  # the headline's at_least, as a change (0.97x: -0.03)
    floor_text: str = ""  # as the post states it

    def __str__(self) -> str:
        return f"{self.metric} of {self.arm} vs {self.base}"


def floor_of(headline: dict) -> tuple[float | None, str]:
    """The headline's `at_least` floor as a change, and as stated; a ValueError names it."""
    from runner.publish.stats.claims import ClaimSyntaxError, parse_stated

    text = headline.get("at_least")
    if text is None:
        return None, ""
    try:
        return parse_stated(str(text), "change").value, str(text)
    except ClaimSyntaxError as e:
        raise ValueError(f"headline at_least: {e}") from None


def with_arguments(exp: Experiment, budget: str | None, max_rounds: int | None) -> Experiment:
    """`--until-decided [--budget D] [--max-rounds N]` applied to the declaration; a
    ValueError names the flag and the value it cannot take."""
    from runner.experiments.validation.sequential import parse_duration

    seconds = parse_duration(budget) if budget is not None else None
    if budget is not None and seconds is None:
        raise ValueError(f"--budget: expected a duration such as 20m, 90s or 1h30m, got {budget!r}")
    if max_rounds is not None and max_rounds < exp.rounds:
        raise ValueError(
            f"--max-rounds: must be at least the declared rounds ({exp.rounds}), got {max_rounds}"
        )
    return exp.until_decided(max_rounds, seconds)


def deciding_comparisons(exp: Experiment, headline: dict | None = None) -> list[Comparison]:
    """The comparisons a run measures until decided (see the module docstring)."""
    arms = list(exp.arms)
    ceiling = max(exp.concurrency)
    if headline and headline.get("arm") in arms and (headline.get("base") or arms[0]) in arms:
        pair = (1, ceiling) if 1 in exp.concurrency else (ceiling,)
        floor, text = floor_of(headline)
        out = [
            Comparison(
                headline["arm"], headline.get("base") or arms[0], headline["metric"], pair, floor, text
            )
        ]
        if exp.aa_copy in arms:
            out.append(Comparison(exp.aa_copy, arms[0], headline["metric"], pair))
        return out
    every = tuple(sorted(exp.concurrency))
    return [Comparison(a, arms[0], m, every) for a in arms[1:] for m in DEFAULT_METRICS]


def post_headline(exp: Experiment) -> dict | None:
    """The `headline:` front matter of a post naming this experiment (beside its
    declaration folder's blog), applied to each experiment the post names."""
    from mkdocs.utils.meta import get_data

    from runner.publish.site.frontmatter import experiments_of

    docs = Path(exp.source).resolve().parent.parent
    for path in sorted((docs / "blog").rglob("*.md")) if (docs / "blog").is_dir() else []:
        try:
            _, meta = get_data(path.read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError):
            continue
        names, _ = experiments_of(meta)
        headline = meta.get("headline")
        if exp.name in names and isinstance(headline, dict) and isinstance(headline.get("metric"), str):
            try:
                floor_of(headline)
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
            return headline
    return None


@dataclass(frozen=True)
class Judged:
    comparison: Comparison
    concurrency: int
    text: str  # the change and its interval, as the page prints it
    kind: str | None  # verdicts' kind; None: not measured yet
    rounds_to_decide: int | None = None  # undecided: about how many rounds would decide it
    floor: str = ""  # with a floor: "holds", "refuted" or "undecided" ("": none, or no interval)


def judge_look(
    db: Path, exp: Experiment, chip_id: str, comparisons: list[Comparison], since: datetime | None = None
) -> list[Judged]:
    """Each comparison at each of its concurrencies, judged on this chip's runs of this
    declaration now (with `since`, naive UTC: on the runs started from then on only)."""
    from runner.publish.sql.home import Cutoff
    from runner.publish.sql.reader import Reader
    from runner.publish.stats import aa
    from runner.publish.stats.verdicts import decide, decide_bound
    from runner.publish.stats.views import ViewCache

    out = []
    with Reader(db) as reader:
        # pages (and these looks) see a machine class, of which this run's chip is one instance
        chip_id = next(
            (c.chip_id for c in reader.chips(exp.name, exp.quick) if chip_id in c.aliases), chip_id
        )
        # this declaration's runs only (an edited one's earlier rounds measured something
        # else): a re-measurement's own, else each cell's newest (all before datetime.max)
        if since is None:
            cut = Cutoff(None, datetime.max, declaration=exp.sha256)
        else:
            cut = Cutoff(None, since, fresh=True, declaration=exp.sha256)
        view = ViewCache(reader).get(exp.name, exp.quick, cut)
        margins = {
            (chip, c.metric): c.margin
            for chip, covs in aa.coverage(reader, exp.name, exp.quick, cut=cut).items()
            for c in covs
        }
        for cmp in comparisons:
            for conc in cmp.concurrencies:
                e = view.compare(cmp.metric, chip_id, cmp.arm, cmp.base, conc, "change")
                margin = margins.get((chip_id, cmp.metric), 0.0)
                d = decide(e.lo, e.hi, e.n_rounds, "change", exp.equivalence, margin)
                text = "not measured" if e.value is None else f"{e.value:+.1%}"
                if e.lo is not None:
                    text += f" [{e.lo:+.1%}, {e.hi:+.1%}] over {e.n_rounds} rounds"
                judged = Judged(cmp, conc, text, d.kind if d else None, d.rounds_to_decide if d else None)
                b = (
                    None
                    if cmp.floor is None
                    else decide_bound(e.lo, e.hi, e.n_rounds, "change", cmp.floor, True, margin)
                )
                out.append(judged if b is None else _with_floor(judged, b))
    return out


def _with_floor(judged: Judged, b) -> Judged:
    """The comparison judged on its floor too: open while the floor is undecided."""
    from runner.publish.stats.verdicts import UNDECIDED

    rounds = [n for n in (judged.rounds_to_decide, b.rounds_to_decide) if n is not None]
    open_ = UNDECIDED in (judged.kind, b.kind)
    return dataclasses.replace(
        judged, floor=b.kind, rounds_to_decide=max(rounds) if open_ and rounds else judged.rounds_to_decide
    )


def run_until_decided(
    exp: Experiment, db: Path, progress: Progress, run, since: datetime | None = None
) -> object:
    """`run(experiment, keep, deadline)` runs cells (execute.run_experiment bound to its
    store options) and returns a RunSummary; `since`: a re-measurement's start."""
    started = time.monotonic()
    deadline = None if exp.budget_s is None else started + exp.budget_s
    schedule = exp.schedule
    comparisons = deciding_comparisons(exp, post_headline(exp))
    summary = run(exp, None, None)
    pair = {exp.aa_copy, next(iter(exp.arms))} if exp.aa_copy in exp.arms else set()
    for look, rounds in enumerate(schedule[1:], start=2):
        judged = judge_look(db, exp, summary.chip_id, comparisons, since)
        _print_look(progress, look - 1, schedule, judged)
        open_ = still_open(judged, exp)
        if not open_:
            progress.note("every deciding comparison is decided")
            return summary
        if deadline is not None and time.monotonic() >= deadline:
            progress.note(
                f"the budget of {exp.budget_s:g} s is spent: {len(open_)} comparison(s) stay undecided"
            )
            return summary
        wanted = {(arm, j.concurrency) for j in open_ for arm in (j.comparison.arm, j.comparison.base, *pair)}
        progress.note(
            f"look {look} of {len(schedule)}: measuring up to {rounds} rounds at concurrency "
            f"{', '.join(str(c) for c in sorted({c for _, c in wanted}))}"
        )
        more = run(
            dataclasses.replace(exp, rounds=rounds, design=schedule),  # its runs record the whole design
            lambda cell: (cell.arm, cell.concurrency) in wanted,
            deadline,
        )
        summary = _added(summary, more)
        if more.stopped_by_budget:
            progress.note(
                "the budget ended inside this look: the comparisons are judged on the rounds measured"
            )
            break
    _print_look(progress, len(schedule), schedule, judge_look(db, exp, summary.chip_id, comparisons, since))
    return summary


def still_open(judged: list[Judged], exp: Experiment) -> list[Judged]:
    """The comparisons a next look measures for: undecided or unmeasured, except the `-aa`
    copy against its arm (printed, never a reason to measure on)."""
    return [j for j in _undecided(judged) if j.comparison.arm != exp.aa_copy]


def _undecided(judged: list[Judged]) -> list[Judged]:
    from runner.publish.stats.verdicts import UNDECIDED

    return [j for j in judged if j.kind in (UNDECIDED, None) or j.floor == UNDECIDED]


def _print_look(progress: Progress, look: int, schedule: tuple[int, ...], judged: list[Judged]) -> None:
    undecided = _undecided(judged)
    rounds = ", ".join(map(str, schedule))
    decided = len(judged) - len(undecided)
    progress.note(f"look {look} of {len(schedule)} (rounds {rounds}): {decided} of {len(judged)} decided")
    for j in judged:
        progress.note(look_line(j, schedule[-1]))


def look_line(j: Judged, max_rounds: int) -> str:
    """One comparison at a look; an undecided one says about how many rounds would decide
    it at the spread measured so far, and when that is past the design's max_rounds."""
    line = f"  {j.comparison} at concurrency {j.concurrency}: {j.text}: {j.kind or 'no interval yet'}"
    if j.floor:
        line += f"; at least {j.comparison.floor_text}: {j.floor}"
    n = j.rounds_to_decide
    if n is None:
        return line
    from runner.publish.stats.verdicts import MOST_ROUNDS

    about = "about" if n < MOST_ROUNDS else "more than"
    past = f"; max_rounds is {max_rounds}" if n > max_rounds else ""
    return f"{line} ({about} {n} rounds would decide it{past})"


def _added(a, b):
    return dataclasses.replace(
        a,
        planned=a.planned + b.planned,
        skipped=a.skipped + b.skipped,
        completed=a.completed + b.completed,
        faults=a.faults + b.faults,
        failed_cell=b.failed_cell or a.failed_cell,
        stopped_by_budget=b.stopped_by_budget,
    )
