"""The data a post body's functions read, bound to one post and one of its experiments:
its chips, arms, regimes and judging view; the values and claims are `post_values.py`'s.

- Values come from `views.View` (which reads through `queries.Reader`); blocks render a
  template and hand back a placeholder token (the HTML is swapped in after Markdown, so
  Markdown never touches it).
- What a rendering collects (failures, verdicts, blocks, SQL downloads) lives on its
  one `PostState` (`post_state.py`), shared by the post's experiments.
- Problems never stop the post: they are recorded with the post line that caused them
  and reported together at the end of the build.
- Values handed to the sandbox hold no reference to the database or to these objects.
"""

from __future__ import annotations

import posixpath
from datetime import datetime, timedelta

from markupsafe import Markup

from runner.publish.blocks.charts import PALETTE
from runner.publish.blocks.notes import as_day
from runner.publish.blocks.post_state import Failure, PostState, caller_line, chip_labels
from runner.publish.blocks.post_values import PostValues
from runner.publish.metrics import METRICS, unknown_metric_message
from runner.publish.sql.home import (
    Cutoff,
    Judging,
    Pinned,
    day_cutoff,
    match_chip,
    pinned_folders,
    post_cutoff,
    unknown_folders,
)
from runner.publish.stats import aa
from runner.publish.stats.regimes import Regimes, check_regimes
from runner.publish.stats.verdicts import DEFAULT_BAND
from runner.publish.stats.views import ViewCache


class PostData:
    """One experiment's view for one post: blocks read every chip's newest data; values
    for claims read the judging view (the home chip as of the post's date, or another
    chip in the claims-on-every-chip table)."""

    def __init__(
        self,
        state: PostState,
        views: ViewCache,
        experiment: str,
        quick: bool,
        *,
        base: str | None = None,
        judging: Judging | None = None,
        declared_arms: tuple[str, ...] = (),
        labels: dict[str, str] | None = None,
        allow_short: bool = False,
        band: float = DEFAULT_BAND,
    ):
        self.state, self.views = state, views
        self.reader, self.experiment, self.quick, self.as_of = views.reader, experiment, quick, None
        self.key, self.line_offset = state.key, state.line_offset
        self.chips = self.reader.chips(experiment, quick)
        self.chip_names = {
            c.chip_id: (labels or chip_labels(self.chips)).get(c.chip_id, c.name) for c in self.chips
        }
        self.now = views.get(experiment, quick, None)
        self.rates = tuple(self.reader.sweeps.sweep_rates(experiment, quick))  # empty: not a rate sweep
        self.cells = self.now.cells
        self.busy = self.reader.busy_cells(experiment, quick)
        self.short = self.reader.sweeps.short_cells(experiment, quick)  # (chip, arm, c) -> ShortCount
        self.allow_short = allow_short
        self.band = band  # δ: a change within ±δ is level (the declaration's `equivalence`)
        self.aa_pair = aa.aa_pair(self.reader, experiment, quick)  # (arm, copy): the provenance's
        base, copy = self.aa_pair or (None, None)
        copy = self.aa_copy = copy if copy == f"{base}{aa.COPY_SUFFIX}" else None
        # An `-aa` copy is no arm of the post: its cells feed the provenance's coverage line
        # only, so a chip measured before `aa = true` has no gap for it. Two declared arms
        # that happen to be identical stay arms.
        self.regimes: Regimes = check_regimes(
            [cell for cell in self.reader.layout(experiment, quick) if cell.arm != copy],
            self.now.measured,
            [c.chip_id for c in self.chips],
            self.chip_names,
        )
        self.judging = judging or Judging(None, None, "home")
        arms = [a for a in declared_arms if a in self.regimes.arms] + sorted(
            a for a in self.regimes.arms if a not in declared_arms
        )
        self.arm_order = tuple(arms)
        for arm in self.arm_order:  # the post's experiments in order: an arm keeps its colour everywhere
            state.arm_colors.setdefault(arm, PALETTE[len(state.arm_colors) % len(PALETTE)])
        self.base = base if base is not None else (arms[0] if arms else "")
        self.model = experiment  # the declaration's model, when post.py knows it
        self.runtimes = self.reader.arms.arm_runtimes(experiment, quick)  # arm -> (runtime, has passes)
        self.params = {"experiment": experiment, "quick": quick, "as_of": None, "label": None}
        self.values = PostValues(self)  # the metrics, comparisons and claims a body reads

    # -- plumbing -----------------------------------------------------------
    def fail(self, message: str, line: int | None = None) -> None:
        line = caller_line() if line is None else line
        self.state.failures.append(
            Failure(self.key, None if line is None else line + self.line_offset, message)
        )

    def token(self, html: str, text: str = "", block: bool = True) -> Markup:
        tok = f"{self.state.token_prefix}N{len(self.state.blocks):04d}Z"
        self.state.blocks[tok] = html
        self.state.inline_text[tok] = text
        return Markup(f"\n\n{tok}\n\n" if block else tok)

    def register_sql(self, kind: str, sql: str) -> str:
        """Offer the SQL behind a block for download; returns the link to it."""
        name = f"{kind}-{len(self.state.sql) + 1}.sql"
        self.state.sql[name] = sql
        return self.href(name)

    def href(self, file_name: str) -> str:
        """Link from this post's page to one of its download files."""
        page_url = self.state.page_url
        page_dir = page_url if page_url.endswith("/") else posixpath.dirname(page_url)
        return posixpath.relpath(f"{self.state.downloads_folder}/{file_name}", page_dir or ".")

    def chip_for(self, chip: str | None) -> str | None:
        """The chip a value is read on: the judging chip unless the call names one."""
        known = ", ".join(repr(label) for label in self.chip_names.values())
        if self.judging.every_value and self.judging.chip_id is not None:
            return self.judging.chip_id
        if chip is None:
            if self.judging.chip_id is not None:
                return self.judging.chip_id
            if not self.state.home_problem_told:  # said once per post, not once per claim
                self.state.home_problem_told = True
                self.fail(self.judging.problem or f"name a chip (chip=...): the data has chips {known}")
            return None
        ids = [c.chip_id for c in self.chips]
        hits = match_chip(chip, ids, self.chip_names, {c.chip_id: (c.name, *c.aliases) for c in self.chips})
        if len(hits) == 1:
            return hits[0]
        self.fail(
            f"chip {chip!r} names {len(hits)} chips; name one of {known}"
            if hits
            else f"unknown chip {chip!r}; the data has {known}"
        )
        return None

    def metric_ok(self, name: object) -> bool:
        if name not in METRICS:
            self.fail(unknown_metric_message(name))
            return False
        return True

    def arm_ok(self, arm: object) -> bool:
        if arm not in self.regimes.arms:
            self.fail(
                f"unknown arm {arm!r}; experiment {self.experiment!r} has arms "
                + ", ".join(repr(a) for a in self.arm_order)
            )
            return False
        return True

    def compared_ok(self, arm: object) -> bool:
        """An arm a comparison may read: a post's arm, or its `-aa` copy (how far two engines
        of identical work read apart, against its original), which is no arm of the tables."""
        return (arm is not None and arm == self.aa_copy) or self.arm_ok(arm)

    def homeless(self, chip: str | None) -> bool:
        """A value with no chip because the post has no home: that problem is reported
        once, so its claims do not each fail again."""
        return chip is None and self.judging.chip_id is None and self.judging.problem is not None

    def label_of(self, chip_id: str | None, chip: str | None, cutoff: datetime | None = None) -> str:
        label = self.chip_names.get(chip_id, chip)
        cutoff = cutoff.at if isinstance(cutoff, Cutoff) else cutoff
        if cutoff is not None:
            return f"{label} (data as of {(cutoff - timedelta(days=1)):%Y-%m-%d})"
        return str(label)

    def cutoff(self, as_of: object = None) -> datetime | None:
        """Where a value's data ends: the judging view's date, or the end of the day
        `as_of` names (a claim in a dated update section reads the data of its day).
        The claims-on-every-chip table reads every value off the newest data."""
        if self.judging.every_value:
            return None
        pin = None
        if isinstance(as_of, Pinned):  # data= beside as_of=
            as_of, (pin, problem) = as_of.as_of, pinned_folders(as_of.data, "data=")
            problem = problem or (
                pin and unknown_folders(pin, self.reader.judging.measurement_folders(self.experiment))
            )
            if problem:
                self.fail(problem.replace("front matter field 'data='", "data="))
        if as_of is None:
            return self.judging.cutoff() if pin is None else post_cutoff(self.judging.as_of, pin)
        day = as_day(as_of)
        if day is None:
            self.fail(f"as_of= names a day (YYYY-MM-DD), got {as_of!r}")
            return self.judging.cutoff()
        return day_cutoff(day, pin)
