"""The functions a post body may call, bound to one post's experiment and data.

Each call queries through `queries.Reader`, renders one block template, and hands back a
placeholder token (the HTML is swapped in after Markdown, so Markdown never touches it).
Problems never stop the post: they are recorded with the post line that caused them and
reported together at the end of the build. Values handed to the sandbox hold no
reference to the database or to these objects.
"""
from __future__ import annotations

import posixpath
import sys
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup

from runner.publish import queries
from runner.publish.claims import Measured, Verdict, claim_link, judge
from runner.publish.metrics import METRICS, unknown_metric_message
from runner.publish.regimes import Regimes, check_regimes
from runner.publish.templating import template_line


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


class PostData:
    """One post's view of the database: its experiment, quickness and cutoff."""

    def __init__(self, reader: queries.Reader, experiment: str, quick: bool, *, key: str,
                 token_prefix: str, line_offset: int = 0, as_of: datetime | None = None,
                 page_url: str = "", downloads_folder: str = "downloads"):
        self.page_url, self.downloads_folder = page_url, downloads_folder
        self.reader, self.experiment, self.quick, self.as_of = reader, experiment, quick, as_of
        self.key, self.token_prefix, self.line_offset = key, token_prefix, line_offset
        self.failures: list[Failure] = []
        self.verdicts: list[Verdict] = []
        self.blocks: dict[str, str] = {}        # token -> HTML
        self.inline_text: dict[str, str] = {}   # token -> plain text for excerpts
        self.sql: dict[str, str] = {}           # download file name -> SQL text
        self.claim_cells: set[tuple[str, str, int]] = set()
        self._cells_of: dict[int, set] = {}
        self.chips = reader.chips(experiment, quick)
        self.chip_names = chip_labels(self.chips)
        cells = reader.cells(experiment, quick, as_of)
        self.cells = {(c.chip_id, c.arm, c.concurrency, c.metric): c for c in cells}
        measured = {(c.chip_id, c.arm, c.concurrency) for c in cells}
        self.regimes: Regimes = check_regimes(reader.layout(experiment, quick), measured,
                                              [c.chip_id for c in self.chips], self.chip_names)
        self.params = {"experiment": experiment, "quick": quick, "as_of": as_of}

    # -- plumbing -----------------------------------------------------------
    def fail(self, message: str, line: int | None = None) -> None:
        line = caller_line() if line is None else line
        self.failures.append(Failure(self.key, None if line is None else line + self.line_offset,
                                     message))

    def token(self, html: str, text: str = "", block: bool = True) -> Markup:
        tok = f"{self.token_prefix}N{len(self.blocks):04d}Z"
        self.blocks[tok] = html
        self.inline_text[tok] = text
        return Markup(f"\n\n{tok}\n\n" if block else tok)

    def href(self, file_name: str) -> str:
        """Link from this post's page to one of its download files."""
        page_dir = self.page_url if self.page_url.endswith("/") else posixpath.dirname(self.page_url)
        return posixpath.relpath(f"{self.downloads_folder}/{file_name}", page_dir or ".")

    def _chip(self, chip: str | None) -> str | None:
        known = ", ".join(repr(label) for label in self.chip_names.values())
        if chip is None:
            if len(self.chips) == 1:
                return self.chips[0].chip_id
            self.fail(f"name a chip (chip=...): the data has chips {known}")
            return None
        hits = [c.chip_id for c in self.chips if chip in (self.chip_names[c.chip_id], c.name, c.chip_id)]
        if len(hits) == 1:
            return hits[0]
        self.fail(f"chip {chip!r} names {len(hits)} chips; name one of {known}" if hits
                  else f"unknown chip {chip!r}; the data has {known}")
        return None

    def _metric_ok(self, name: object) -> bool:
        if name not in METRICS:
            self.fail(unknown_metric_message(name))
            return False
        return True

    def _arm_ok(self, arm: object) -> bool:
        if arm not in self.regimes.arms:
            self.fail(f"unknown arm {arm!r}; experiment {self.experiment!r} has arms "
                      + ", ".join(repr(a) for a in self.regimes.arms))
            return False
        return True

    def _measured(self, value, lo, hi, n, kind, what, metric, cells) -> Measured:
        spec = METRICS.get(metric)
        m = Measured(value, lo, hi, n, kind, what, spec.decimals if spec else 1,
                     spec.unit if spec else "")
        self._cells_of[id(m)] = cells
        return m

    # -- values -------------------------------------------------------------
    def metric(self, name: str, arm: str, concurrency: int, chip: str | None = None) -> Measured:
        chip_id = self._chip(chip)
        ok = self._metric_ok(name) and self._arm_ok(arm) and chip_id is not None
        cell = self.cells.get((chip_id, arm, int(concurrency), name)) if ok else None
        what = f"{name} of {arm} at concurrency {concurrency} on {self.chip_names.get(chip_id, chip)}"
        if cell is None:
            return self._measured(None, None, None, 0, "value", what, name, set())
        return self._measured(cell.mean, cell.lo, cell.hi, cell.n_rounds, "value", what, name,
                              {(chip_id, arm, int(concurrency))})

    def compare(self, metric: str, arm: str, base: str, concurrency: int, chip: str | None,
                kind: str) -> Measured:
        chip_id = self._chip(chip)
        what = (f"{metric} of {arm} vs {base} at concurrency {concurrency} on "
                f"{self.chip_names.get(chip_id, chip)}")
        if not (self._metric_ok(metric) and self._arm_ok(arm) and self._arm_ok(base)) or chip_id is None:
            return self._measured(None, None, None, 0, kind, what, metric, set())
        rows = self.reader.round_values(self.experiment, self.quick, metric, self.as_of)
        c = int(concurrency)
        on = {r: v for ch, a, k, r, v in rows if (ch, a, k) == (chip_id, arm, c) and v is not None}
        off = {r: v for ch, a, k, r, v in rows if (ch, a, k) == (chip_id, base, c) and v}
        pairs = [on[r] / off[r] for r in sorted(on.keys() & off.keys())]
        cells = {(chip_id, arm, c), (chip_id, base, c)}
        if not pairs:
            return self._measured(None, None, None, 0, kind, what, metric, cells)
        shift = 1.0 if kind == "change" else 0.0
        value = (sum(on.values()) / len(on)) / (sum(off.values()) / len(off)) - shift
        lo, hi = min(pairs) - shift, max(pairs) - shift
        return self._measured(value, min(lo, value), max(hi, value), len(pairs), kind, what,
                              metric, cells)

    def claim(self, stated: object, measured: object) -> Markup:
        line = caller_line()
        if not isinstance(measured, Measured):
            self.fail(f"claim({stated!r}, ...) needs a value from metric(), gain(), ratio(), "
                      "traffic_speed() or traffic_gain()", line)
            return Markup.escape(str(stated))
        self.claim_cells |= self._cells_of.get(id(measured), set())
        verdict = judge(len(self.verdicts) + 1, str(stated), measured,
                        None if line is None else line + self.line_offset)
        self.verdicts.append(verdict)
        if not verdict.ok:
            self.failures.append(Failure(self.key, verdict.line, verdict.failure_message()))
        return self.token(str(claim_link(verdict)), str(stated), block=False)
