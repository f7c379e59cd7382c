"""An Experiment written back as a TOML declaration that parses to the same Experiment:
what `--aa` copies, the tests' round trips and `make report`'s fixtures write. Writes
text only; `declaration.py` reads it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from runner.experiments.validation.sequential import DEFAULT_CONTENTION_LIMIT
from runner.publish.stats.verdicts import DEFAULT_BAND, band_text


def write(exp) -> str:
    """An Experiment as the TOML declaration it parses from (round-trips)."""
    lines = [
        f"title = {_toml(exp.title)}",
        f"model = {_toml(exp.model)}",
        f"seed = {exp.seed}",
        f"rounds = {exp.rounds}",
        *([f"max_rounds = {exp.max_rounds}"] if exp.max_rounds else []),
        *([f"equivalence = {_toml(band_text(exp.equivalence))}"] if exp.equivalence != DEFAULT_BAND else []),
        *([f"budget = {_toml(f'{exp.budget_s:g}s')}"] if exp.budget_s else []),
        *(
            [f"contention_limit = {_toml(_limit_text(exp.contention_limit))}"]
            if exp.contention_limit != DEFAULT_CONTENTION_LIMIT
            else []
        ),
        *([f"restart_every = {exp.restart_every}"] if exp.restart_every else []),
        f"concurrency = {_toml(list(exp.concurrency))}",
        "",
    ] + _workload_toml(exp.workload)
    lines += ["", "[engine]"] + [f"{k} = {_toml(v)}" for k, v in exp.engine.items()]
    for arm, knobs in exp.arms.items():
        if exp.workload.aa and arm == exp.aa_copy:
            continue  # `aa = true` adds it again
        lines += ["", f"[arms.{_toml(arm)}]"] + [f"{k} = {_toml(v)}" for k, v in knobs.items()]
    return "\n".join(lines) + "\n"


def _workload_toml(w) -> list[str]:
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


def _limit_text(limit: float | None) -> str:
    return "off" if limit is None else band_text(limit)
