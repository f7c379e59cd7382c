"""The key-by-key rules of an experiment declaration.

`check(doc)` takes the parsed TOML and returns the checked values plus every problem as
(key, reason), never raising on bad input: types, ranges, unknown keys, the rule that
concurrency holds 1 and each arm's ceiling (max_batch_size), each arm's knobs for its
`runtime` (our engine's through EngineConfig and Engine.check_knobs, the other runtimes'
through runner.runtimes.knobs; attributed to `engine.<knob>` or `arms.<arm>.<knob>`),
the model and prompt files; the [workload] table's own rules (arrivals, script, slo)
are validate_workload.py's. It does not know file names; declaration.py adds them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from runner.engine import EngineConfig
from runner.engine.checkpoint import resolve_checkpoint
from runner.experiments.validation.sequential import SEQUENTIAL_KEYS, check_sequential
from runner.experiments.validation.workload import check_context, check_workload
from runner.runtimes import knobs as runtime_knobs
from runner.runtimes.knobs import DEFAULT_RUNTIME, RUNTIMES

TOP_KEYS = ("title", "model", "seed", "rounds", "concurrency", "workload", "engine", "arms", *SEQUENTIAL_KEYS)
DEFAULT_ROUNDS = 3  # rounds enough for an interval
ARM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
_KNOB = re.compile(r"engine knob (\w+)|unknown engine knob\(s\) \['(\w+)'|^(\w+):")
_REQUIRED = object()


class _Checker:
    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def bad(self, key: str, reason: str) -> None:
        if (key, reason) not in self.problems:
            self.problems.append((key, reason))

    def unknown(self, table: dict, prefix: str, allowed: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                self.bad(prefix + key, f"unknown key (known: {', '.join(allowed)})")

    def value(
        self,
        table: dict,
        key: str,
        prefix: str,
        kind: str,
        default: Any = _REQUIRED,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> Any:
        if key not in table:
            if default is _REQUIRED:
                self.bad(prefix + key, "required key is missing")
            return None if default is _REQUIRED else default
        v = table[key]
        ok = {
            "int": isinstance(v, int) and not isinstance(v, bool),
            "number": (
                isinstance(v, (int, float))
                and not isinstance(v, bool)
                and (not isinstance(v, float) or math.isfinite(v))
                and abs(v) < 1e300
            ),
            "str": isinstance(v, str) and v.strip() != "",
            "table": isinstance(v, dict),
            "bool": isinstance(v, bool),
        }[kind]
        if not ok:
            want = {
                "int": "an integer",
                "number": "a finite number",
                "str": "a non-empty string",
                "table": "a table",
                "bool": "true or false",
            }[kind]
            self.bad(prefix + key, f"expected {want}, got {v!r}")
            return None
        if minimum is not None and v < minimum:
            self.bad(prefix + key, f"must be >= {minimum:g}, got {v!r}")
            return None
        if maximum is not None and v > maximum:
            self.bad(prefix + key, f"must be <= {maximum:g}, got {v!r}")
            return None
        return float(v) if kind == "number" else v

    def int_list(self, table: dict, key: str, prefix: str, minimum: int) -> list[int] | None:
        v = table.get(key)
        if key not in table:
            self.bad(prefix + key, "required key is missing")
        elif (
            not isinstance(v, list)
            or not v
            or any(isinstance(x, bool) or not isinstance(x, int) or x < minimum for x in v)
        ):
            self.bad(prefix + key, f"expected a non-empty list of integers >= {minimum}, got {v!r}")
        else:
            return v
        return None


def check(doc: dict) -> tuple[dict, list[tuple[str, str]]]:
    c = _Checker()
    c.unknown(doc, "", TOP_KEYS)
    out = {
        "title": c.value(doc, "title", "", "str"),
        "model": c.value(doc, "model", "", "str"),
        "seed": c.value(doc, "seed", "", "int", minimum=0),
        "rounds": c.value(doc, "rounds", "", "int", default=DEFAULT_ROUNDS, minimum=1),
    }
    out.update(check_sequential(c, doc, out["rounds"]))
    concurrency = c.int_list(doc, "concurrency", "", 1)
    if concurrency and len(set(concurrency)) != len(concurrency):
        c.bad("concurrency", f"values must be distinct, got {concurrency}")
        concurrency = None
    out["concurrency"] = tuple(concurrency or ())
    out["workload"] = check_workload(c, c.value(doc, "workload", "", "table"), concurrency)
    engine = _knob_table(c, c.value(doc, "engine", "", "table", default={}), "engine.")
    arms = {}
    for name, table in (c.value(doc, "arms", "", "table") or {}).items():
        if not ARM_NAME.match(name):
            c.bad(f"arms.{name}", "arm names use letters, digits, '_' and '-' only")
        elif not isinstance(table, dict):
            c.bad(f"arms.{name}", f"expected a table of engine knobs, got {table!r}")
        else:
            arms[name] = _knob_table(c, table, f"arms.{name}.")
    if "arms" in doc and isinstance(doc["arms"], dict) and not doc["arms"]:
        c.bad("arms", "declare at least one arm, e.g. [arms.base]")
    out["engine"], out["arms"] = engine, arms
    out["checkpoint"] = checkpoint = _checkpoint(c, out["model"])
    _arm_knobs(c, engine, arms, concurrency, checkpoint)
    _prompts(c, out["workload"], checkpoint)
    check_context(c, out["workload"], checkpoint)
    return out, c.problems


def _knob_table(c: _Checker, table: dict | None, prefix: str) -> dict:
    """The table's knobs of a valid kind; which knobs an arm may have depends on its
    runtime, so names and values are checked per arm (_arm_knobs)."""
    knobs = {}
    for knob, value in (table or {}).items():
        if not isinstance(value, (str, int, float, bool)):
            c.bad(prefix + knob, f"expected a string, number or boolean, got {value!r}")
            continue
        knobs[knob] = value
    return knobs


def _engine_knobs(c: _Checker, merged: dict, where) -> dict:
    """Our engine's knobs one by one (a bad one is reported and left out, so that the
    whole-config checks still run on the rest and every problem is reported together)."""
    valid = {}
    for knob, value in merged.items():
        try:
            EngineConfig.from_kwargs(**{knob: value})
        except ValueError as e:
            other = [r for r in RUNTIMES if r != DEFAULT_RUNTIME and knob in runtime_knobs.KNOBS[r]]
            c.bad(where(knob), runtime_knobs.not_a_knob(DEFAULT_RUNTIME, knob) if other else str(e))
            continue
        valid[knob] = value
    return valid


def _checkpoint(c: _Checker, model: str | None) -> Path | None:
    if model is None:
        return None
    path = resolve_checkpoint(model)
    missing = [f for f in ("config.json", "tokenizer.json") if not (path / f).is_file()]
    if not path.is_dir():
        c.bad("model", f"no shipped model or checkpoint directory named {model!r} (looked at {path})")
    elif missing:
        c.bad("model", f"{path} is not a checkpoint: missing {', '.join(missing)}")
    else:
        return path
    return None


def _arm_knobs(
    c: _Checker, engine: dict, arms: dict, concurrency: list[int] | None, checkpoint: Path | None
) -> None:
    from runner.engine import Engine  # pulls in MLX: only once the cheap checks are done

    for arm, own in arms.items():
        merged = {**engine, **own}

        def where(knob: str | None) -> str:
            return (
                f"arms.{arm}.{knob}" if knob in own else f"engine.{knob}" if knob in engine else f"arms.{arm}"
            )

        def blame(e: ValueError) -> None:
            m = _KNOB.search(str(e))
            c.bad(where(next((g for g in m.groups() if g), None) if m else None), str(e))

        runtime = merged.pop("runtime", DEFAULT_RUNTIME)
        if runtime not in RUNTIMES:
            c.bad(where("runtime"), f"unknown runtime {runtime!r} (known: {', '.join(RUNTIMES)})")
            continue
        if runtime != DEFAULT_RUNTIME:
            _, problems = runtime_knobs.check(runtime, merged, checkpoint)
            for knob, reason in problems:  # a missing knob is the arm's to add
                if knob in engine and knob not in own:
                    reason += f" (arm {arm!r})"  # a shared knob: say which arm it fails in
                c.bad(where(knob) if knob in merged else f"arms.{arm}.{knob}", reason)
            ceiling = (
                None if any(k == "max_batch_size" for k, _ in problems) else runtime_knobs.ceiling(merged)
            )
        else:
            merged = _engine_knobs(c, merged, where)
            try:
                ceiling = EngineConfig.from_kwargs(**merged).max_batch_size
            except ValueError as e:
                blame(e)
                continue
            if checkpoint is not None:
                try:
                    Engine.check_knobs(checkpoint, **merged)
                except ValueError as e:
                    blame(e)
        if concurrency and ceiling is not None:
            for level, why in ((1, "1 (one sequence)"), (ceiling, "the ceiling")):
                if level not in concurrency:
                    c.bad(
                        "concurrency",
                        f"must contain {why}: {level} for arm {arm!r} "
                        f"(max_batch_size {ceiling}), got {concurrency}",
                    )


def _prompts(c: _Checker, workload: dict, checkpoint: Path | None) -> None:
    prompts = workload.get("prompts")
    if prompts is None:
        return
    if prompts == "heldout":
        if checkpoint is not None and not (checkpoint / "heldout.jsonl").is_file():
            c.bad("workload.prompts", f"{checkpoint} has no heldout.jsonl; give a JSONL path instead")
    elif prompts == "unseen":
        from runner.prompts import PromptsError
        from runner.unseen_text import PACKAGES, package_root

        try:
            for name in PACKAGES.values():
                package_root(name)
        except PromptsError as e:
            c.bad("workload.prompts", str(e))
    elif not Path(prompts).is_file():
        c.bad("workload.prompts", f"'heldout', 'unseen' or a JSONL file; {prompts!r} does not exist")
