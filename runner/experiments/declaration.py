"""An experiment declaration (`reports/experiments/<name>.toml`) -> an Experiment.

- Every problem (TOML syntax, unknown key, wrong type, a concurrency list without 1 or
  the ceiling, a knob the engine rejects, a missing model) is collected and raised
  together as one DeclarationError whose lines each name the file, the key and the
  reason. Nothing runs before a declaration is valid.
- The model is resolved to its directory once (`Experiment.checkpoint`); relative paths
  (model, workload.prompts) are taken from the current directory.
- It builds no workload and runs no cell.
"""

from __future__ import annotations

import dataclasses
import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from runner.experiments import declaration_toml
from runner.experiments.validation.experiment import check
from runner.experiments.validation.sequential import DEFAULT_CONTENTION_LIMIT
from runner.experiments.validation.workload import DEFAULT_MIN_CELL_SECONDS, DEFAULT_MIN_CELL_TOKENS
from runner.experiments.workloads.lengths import LengthDist
from runner.publish.stats.sequential import looks
from runner.publish.stats.verdicts import DEFAULT_BAND
from runner.runtimes import knobs as runtime_knobs
from runner.runtimes.knobs import DEFAULT_RUNTIME

AA_SUFFIX = "-aa"  # `--aa ARM`: experiment NAME-aa, arms ARM and ARM-aa


@dataclass(frozen=True)
class DeclarationIssue:
    file: str
    key: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.reason}"


class DeclarationError(Exception):
    def __init__(self, issues: list[DeclarationIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


@dataclass(frozen=True)
class ScriptEntry:
    """One request of a scripted workload: sent `at` seconds after its play starts, at
    every concurrency above its lane."""

    at: float
    prompt_tokens: int  # the whole prompt, shared prefix included
    max_new_tokens: int
    label: str | None = None  # stored with the request (requests.label)
    lane: int = 0


@dataclass(frozen=True)
class Workload:
    prompts: str  # "heldout", "unseen" (runner/unseen_text.py) or a JSONL path
    requests_per_client: int  # the least each client sends in a cell (poisson: x concurrency)
    prompt_tokens: tuple[int, int]  # inclusive range (script: the entries' shortest and longest)
    max_new_tokens: int  # (script: the entries' default, else their longest)
    temperature: float = 0.0
    shared_prefix_tokens: int = 0  # every prompt starts with the same tokens
    # A cell keeps sending requests until both hold (then lets the ones in flight finish).
    min_cell_seconds: float = DEFAULT_MIN_CELL_SECONDS
    min_cell_tokens: int = DEFAULT_MIN_CELL_TOKENS
    arrivals: str = "closed"  # "closed" | "poisson" | "script" (runner/experiments/workloads/arrivals.py)
    rate: float | None = None  # poisson: requests per second (a sweep's cell: its rate)
    rates: tuple[float, ...] = ()  # a rate sweep: each rate is a cell dimension (sweep.py)
    burstiness: float | None = None  # process = "gamma": 1 is Poisson, below 1 burstier
    script: tuple[ScriptEntry, ...] = ()
    slo_ttft_ms: float | None = None  # the declared service-level objective, stored per run
    slo_tpot_ms: float | None = None
    aa: bool = False  # the base arm's copy (ARM-aa) measured in every round like any arm
    allow_short: bool = False  # claims may stand on cells with requests shorter than asked
    # Seeded per-request lengths (lengths.py); None: uniform over prompt_tokens, and every
    # request asks for max_new_tokens. With one, prompt_tokens and max_new_tokens are its bounds.
    prompt_dist: LengthDist | None = None
    new_tokens_dist: LengthDist | None = None

    @property
    def max_context(self) -> int:
        """The longest context a cell reaches (a bound: what warm-up traces shapes up to)."""
        longest = max(
            [self.prompt_tokens[1] + self.max_new_tokens]
            + [e.prompt_tokens + e.max_new_tokens for e in self.script]
        )
        return longest + self.shared_prefix_tokens


@dataclass(frozen=True)
class Experiment:
    name: str
    source: str  # the file it came from
    sha256: str  # of the file's bytes: a changed declaration means new cells
    title: str
    model: str  # as written: "tiny" or a path
    checkpoint: Path  # the model's directory, resolved once (validate.py) for the whole run
    seed: int
    rounds: int
    concurrency: tuple[int, ...]
    workload: Workload
    engine: dict = field(default_factory=dict)  # knobs shared by every arm
    arms: dict = field(default_factory=dict)  # arm name -> its own knobs, in declared order
    quick: bool = False
    equivalence: float = DEFAULT_BAND  # a change within ±equivalence is "level"
    max_rounds: int = 0  # the most rounds measuring until decided reaches (0: rounds, fixed)
    budget_s: float | None = None  # how long adding rounds may take (None: no limit)
    contention_limit: float | None = DEFAULT_CONTENTION_LIMIT  # None: no cell is measured again
    restart_every: int = 0  # every arm's runtime started afresh every this many rounds (0: never)
    design: tuple[int, ...] = ()  # a look's rounds run under the whole design: its looks, fixed

    @property
    def schedule(self) -> tuple[int, ...]:
        """The round counts of the design's looks (one look: a fixed design): the declared
        rounds doubling up to max_rounds, kept when a look runs the experiment to more rounds."""
        return self.design or looks(self.rounds, max(self.max_rounds, self.rounds))

    @property
    def looks_text(self) -> str | None:
        """What each run stores of the design (runs.looks): None for a fixed design."""
        return ",".join(map(str, self.schedule)) if len(self.schedule) > 1 else None

    def until_decided(self, max_rounds: int | None = None, budget_s: float | None = None) -> "Experiment":
        """--until-decided: the declared design, or four times the rounds when the
        declaration names none; the budget given here replaces the declared one."""
        most = max_rounds or self.max_rounds or 4 * self.rounds
        return dataclasses.replace(self, max_rounds=most, budget_s=budget_s or self.budget_s)

    def knobs(self, arm: str) -> dict:
        """The arm's knobs as declared: [engine] overlaid by [arms.<arm>] (with `runtime`
        when the declaration names one)."""
        return {**self.engine, **self.arms[arm]}

    def runtime(self, arm: str) -> str:
        return self.knobs(arm).get("runtime", DEFAULT_RUNTIME)

    def runtime_knobs(self, arm: str) -> dict:
        """What the arm's runtime is started with: our engine's knobs as declared, another
        runtime's with its defaults filled in (what its runs store)."""
        knobs = self.knobs(arm)
        runtime = knobs.pop("runtime", DEFAULT_RUNTIME)
        if runtime == DEFAULT_RUNTIME:
            return knobs
        return runtime_knobs.check(runtime, knobs, self.checkpoint)[0]

    def ceiling(self, arm: str) -> int:
        return runtime_knobs.ceiling(self.knobs(arm))

    def shrunk(self) -> "Experiment":
        """--quick: one round, at most 2 requests per client of at most 16 new tokens, and no
        time or token minimum, so that a smoke test stays short."""
        w = self.workload
        script = tuple(dataclasses.replace(e, max_new_tokens=min(16, e.max_new_tokens)) for e in w.script)
        small = dataclasses.replace(
            w,
            requests_per_client=min(2, w.requests_per_client),
            max_new_tokens=min(16, w.max_new_tokens),
            script=script,
            min_cell_seconds=0.0,
            min_cell_tokens=0,
        )
        return dataclasses.replace(self, rounds=1, workload=small, quick=True)

    def aa(self, arm: str) -> "Experiment":
        """--aa ARM: the arm against an identical copy of itself, stored as experiment
        NAME-aa (so it never mixes with NAME's runs) with arms ARM and ARM-aa; every other
        key unchanged. Its sha256 derives from the file's and the arm's name, so editing
        the declaration (or choosing another arm) makes new cells, as for a declaration."""
        if arm not in self.arms:
            raise DeclarationError(
                [
                    DeclarationIssue(
                        self.source, "--aa", f"no arm named {arm!r}; the arms are {', '.join(self.arms)}"
                    )
                ]
            )
        copy = arm + AA_SUFFIX
        sha = hashlib.sha256(f"{self.sha256}\n--aa {arm}\n".encode()).hexdigest()
        return dataclasses.replace(
            self,
            name=self.name + AA_SUFFIX,
            sha256=sha,
            source=f"{self.source} --aa {arm}",
            arms={arm: dict(self.arms[arm]), copy: dict(self.arms[arm])},
        )

    @property
    def aa_copy(self) -> str | None:
        """The base (first) arm's copy that `[workload] aa = true` adds; None without it."""
        return next(iter(self.arms)) + AA_SUFFIX if self.workload.aa and self.arms else None

    def to_toml(self) -> str:
        """The declaration as TOML that parses back to this Experiment (declaration_toml.py)."""
        return declaration_toml.write(self)


def find_declaration(name_or_path: str, folder: Path = Path("reports/experiments")) -> Path:
    """A name (a file in `folder`) or a path to a .toml."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return p
    return folder / f"{name_or_path}.toml"


def load(path: str | Path) -> Experiment:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DeclarationError([DeclarationIssue(str(path), "(file)", e.strerror or str(e))]) from None
    return parse(data, source=str(path), name=path.stem)


def parse(data: bytes, source: str, name: str) -> Experiment:
    sha = hashlib.sha256(data).hexdigest()
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise DeclarationError([DeclarationIssue(source, "(file)", f"not UTF-8 text ({e.reason})")]) from None
    except tomllib.TOMLDecodeError as e:
        raise DeclarationError([DeclarationIssue(source, "(syntax)", f"invalid TOML: {e}")]) from None
    values, problems = check(doc)
    if problems:
        raise DeclarationError([DeclarationIssue(source, key, reason) for key, reason in problems])
    w = values["workload"]
    values["workload"] = Workload(**{**w, "script": tuple(ScriptEntry(**e) for e in w["script"])})
    if values["workload"].aa and values["arms"]:
        base = next(iter(values["arms"]))
        if base + AA_SUFFIX in values["arms"]:
            issue = f"adds arm {base + AA_SUFFIX!r} (the base arm's copy), which the declaration already has"
            raise DeclarationError([DeclarationIssue(source, "workload.aa", issue)])
        values["arms"] = {**values["arms"], base + AA_SUFFIX: dict(values["arms"][base])}
    return Experiment(name=name, source=source, sha256=sha, **values)
