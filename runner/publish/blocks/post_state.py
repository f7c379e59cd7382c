"""What one rendering of a post collects, and the helpers that name where a problem is.

- `PostState`: failures, verdicts, blocks, SQL downloads and the values claims may
  stand on, shared by the post's experiments' `PostData`.
- `Failure`: a problem and the post line that caused it; `caller_line` finds that line
  from inside a template call; `chip_labels` names chips as pages show them.
This module neither queries nor renders.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from runner.publish.blocks.templating import template_line
from runner.publish.stats.claims import Measured, Verdict


@dataclass(frozen=True, slots=True)
class Failure:
    path: str
    line: int | None
    message: str

    def describe(self) -> str:
        return f"{self.path}:{self.line or 1}: {self.message}"


def caller_line() -> int | None:
    """The post-body line of the template expression that is calling us."""
    frame = sys._getframe(1)
    while frame is not None:
        line = template_line(frame.f_globals, frame.f_lineno)
        if line is not None:
            return line
        frame = frame.f_back
    return None


def chip_labels(chips) -> dict[str, str]:
    """chip_id -> the name pages show: the chip's name, with the start of its id when
    other chips share the name (the same machine measured with another BLAS, say, is
    another fingerprint, hence another chip)."""
    shared = {c.name for c in chips if sum(d.name == c.name for d in chips) > 1}
    return {c.chip_id: f"{c.name} ({c.chip_id[:8]})" if c.name in shared else c.name for c in chips}


@dataclass
class PostState:
    """What one rendering of a post collects, shared by its experiments' PostData."""

    key: str
    token_prefix: str
    line_offset: int = 0
    page_url: str = ""
    downloads_folder: str = "downloads"
    failures: list[Failure] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    blocks: dict[str, str] = field(default_factory=dict)  # token -> HTML
    inline_text: dict[str, str] = field(default_factory=dict)  # token -> plain text for excerpts
    sql: dict[str, str] = field(default_factory=dict)  # download file name -> SQL text
    claim_cells: set[tuple[str, str, str, int]] = field(default_factory=set)  # (experiment, chip, arm, c)
    cells_of: dict[int, set] = field(default_factory=dict)  # id(Measured) -> its cells
    missing_of: dict[int, str] = field(default_factory=dict)  # id(Measured) -> why it is absent
    # Every Measured keyed above, kept alive with the state: a value a page rendered and
    # dropped would free its id for a later one, which would inherit its cells or reason.
    held: list = field(default_factory=list)
    home_problem_told: bool = False
    claim_experiments: dict[int, frozenset[str]] = field(default_factory=dict)  # claim number -> read
    headline_calls: list[tuple] = field(default_factory=list)  # (experiment, arm, base, metrics)
    arm_colors: dict[str, str] = field(default_factory=dict)  # one colour per arm across the post
    headline_html: str = ""  # the headline pair's line, for the blog index and the home page

    def remember(self, m: Measured, cells: set | None = None, missing: str | None = None) -> None:
        """A value's cells (what a claim on it stands on) or why it is absent, by its id."""
        self.held.append(m)
        if cells is not None:
            self.cells_of[id(m)] = cells
        if missing is not None:
            self.missing_of[id(m)] = missing
