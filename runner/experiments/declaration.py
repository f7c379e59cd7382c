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
from typing import Any

from runner.experiments.lengths import LengthDist
from runner.experiments.validation.experiment import check
from runner.experiments.validation.workload import DEFAULT_MIN_CELL_SECONDS, DEFAULT_MIN_CELL_TOKENS
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
    prompts: str  # "heldout" or a JSONL path
    requests_per_client: int  # the least each client sends in a cell (poisson: x concurrency)
    prompt_tokens: tuple[int, int]  # inclusive range (script: the entries' shortest and longest)
    max_new_tokens: int  # (script: the entries' default, else their longest)
    temperature: float = 0.0
    shared_prefix_tokens: int = 0  # every prompt starts with the same tokens
    # A cell keeps sending requests until both hold (then lets the ones in flight finish).
    min_cell_seconds: float = DEFAULT_MIN_CELL_SECONDS
    min_cell_tokens: int = DEFAULT_MIN_CELL_TOKENS
    arrivals: str = "closed"  # "closed" | "poisson" | "script" (runner/experiments/arrivals.py)
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
        lines = [
            f"title = {_toml(self.title)}",
            f"model = {_toml(self.model)}",
            f"seed = {self.seed}",
            f"rounds = {self.rounds}",
            f"concurrency = {_toml(list(self.concurrency))}",
            "",
        ] + _workload_toml(self.workload)
        lines += ["", "[engine]"] + [f"{k} = {_toml(v)}" for k, v in self.engine.items()]
        for arm, knobs in self.arms.items():
            if self.workload.aa and arm == self.aa_copy:
                continue  # `aa = true` adds it again
            lines += ["", f"[arms.{_toml(arm)}]"] + [f"{k} = {_toml(v)}" for k, v in knobs.items()]
        return "\n".join(lines) + "\n"


def _workload_toml(w: Workload) -> list[str]:
    """[workload] with its keys for its arrivals form, then [workload.slo] and the script."""
    scripted = w.arrivals == "script"
    keys = (
        ["prompts"]
        + ([] if scripted else ["requests_per_client", "prompt_tokens"])
        + ["max_new_tokens", "temperature", "shared_prefix_tokens", "min_cell_seconds", "min_cell_tokens"]
    )
    dists = {"prompt_tokens": w.prompt_dist, "max_new_tokens": w.new_tokens_dist}
    lines = ["[workload]"] + [
        f"{k} = {dists[k].to_toml() if dists.get(k) else _toml(list(v) if isinstance(v, tuple) else v)}"
        for k in keys
        for v in [getattr(w, k)]
    ]
    if w.aa:
        lines.append("aa = true")
    process = "gamma" if w.burstiness is not None else "poisson"
    rate = _toml(list(w.rates)) if w.rates else repr(w.rate)
    extra = f", burstiness = {w.burstiness!r}" if w.burstiness is not None else ""
    lines.append(
        "arrivals = "
        + (
            f'{{ process = "{process}", rate = {rate}{extra} }}'
            if w.arrivals == "poisson"
            else _toml(w.arrivals)
        )
    )
    if w.allow_short:
        lines.append("allow_short = true")
    slo = [(k, getattr(w, f"slo_{k}")) for k in ("ttft_ms", "tpot_ms")]
    if any(v is not None for _, v in slo):
        lines += ["", "[workload.slo]"] + [f"{k} = {v!r}" for k, v in slo if v is not None]
    for e in w.script:
        lines += ["", "[[workload.script]]"] + [
            f"{k} = {_toml(v)}" for k, v in dataclasses.asdict(e).items() if v is not None
        ]
    return lines


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return (
            '"'
            + "".join(
                _TOML_ESCAPES.get(ch, f"\\u{ord(ch):04x}" if ord(ch) < 0x20 or ch == "\x7f" else ch)
                for ch in value
            )
            + '"'
        )
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


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
