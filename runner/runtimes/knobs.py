"""Which knobs each runtime has, their defaults, and the checks a declaration runs on them.

`runtime` picks the runtime of an arm (default "bothrows", our engine, whose knobs are
EngineConfig's and are checked by the engine itself). The other runtimes have the knobs
below; any other knob in such an arm is a declaration error naming the knob and the
runtime. `max_batch_size` is every runtime's batch ceiling: for `openai` it states the
server's own limit (the runner cannot set it), and it is required there.
`check(runtime, knobs, checkpoint)` returns the effective knobs (defaults filled in: what
a run stores as its knobs) and every problem as (knob, reason); it never raises and
imports no model code.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

from runner.engine.config import EngineConfig, parse_bytes

DEFAULT_RUNTIME = "bothrows"
RUNTIMES = ("bothrows", "mlx-lm", "mlx-lm-server", "openai")
DEFAULT_CEILING = EngineConfig().max_batch_size
MLX_LM_PREFILL_STEP = 2048  # mlx-lm's own default prefill step (BatchGenerator, server)
MLX_LM_DRAFT_TOKENS = 3  # mlx_lm.server's default --num-draft-tokens
READ_TIMEOUT_S = 60.0  # a server that sends nothing for this long has stopped

_REQUIRED = object()
# runtime -> knob -> default (_REQUIRED: must be given; None: absent unless given)
KNOBS: dict[str, dict[str, object]] = {
    "mlx-lm": {
        "max_batch_size": DEFAULT_CEILING,
        "prefill_chunk": MLX_LM_PREFILL_STEP,
        "draft_model": None,
        "num_draft_tokens": None,
    },
    "mlx-lm-server": {
        "max_batch_size": DEFAULT_CEILING,
        "prefill_chunk": MLX_LM_PREFILL_STEP,
        "prefix_cache_bytes": 0,
        "draft_model": None,
        "num_draft_tokens": None,
        "read_timeout_s": READ_TIMEOUT_S,
    },
    "openai": {
        "base_url": _REQUIRED,
        "max_batch_size": _REQUIRED,
        "served_model": None,
        "read_timeout_s": READ_TIMEOUT_S,
        # send ignore_eos and min_tokens (runtimes/fair.py); false for a server refusing them
        "exact_length": True,
    },
}
ENGINE_KNOBS = tuple(EngineConfig.__dataclass_fields__)


def knob_names(runtime: str) -> tuple[str, ...]:
    return ("runtime",) + (ENGINE_KNOBS if runtime == DEFAULT_RUNTIME else tuple(KNOBS[runtime]))


def ceiling(knobs: dict) -> int:
    """An arm's batch ceiling from its merged knobs (valid ones: check() ran)."""
    return int(knobs.get("max_batch_size", DEFAULT_CEILING))


def not_a_knob(runtime: str, knob: str) -> str:
    others = [r for r in RUNTIMES if r != runtime and knob in knob_names(r)]
    where = f"; it is a knob of {', '.join(others)}" if others else ""
    return f"runtime {runtime!r} has no knob {knob!r}{where} (its knobs: {', '.join(knob_names(runtime))})"


def check(runtime: str, knobs: dict, checkpoint: Path | None) -> tuple[dict, list[tuple[str, str]]]:
    """Effective knobs of a non-bothrows arm (with "runtime") and its problems."""
    spec = KNOBS[runtime]
    problems: list[tuple[str, str]] = []
    out: dict = {"runtime": runtime}
    for knob in knobs:
        if knob != "runtime" and knob not in spec:
            problems.append((knob, not_a_knob(runtime, knob)))
    for knob, default in spec.items():
        if knob not in knobs:
            if default is _REQUIRED:
                problems.append(
                    (
                        knob,
                        f"runtime {runtime!r} needs {knob}"
                        + (
                            " (the server's own batch limit, which the runner cannot set: the regimes "
                            "need the ceiling)"
                            if knob == "max_batch_size"
                            else ""
                        ),
                    )
                )
            elif default is not None:
                out[knob] = default
            continue
        value, why = _value(knob, knobs[knob], checkpoint)
        if why:
            problems.append((knob, why))
        else:
            out[knob] = value
    if "num_draft_tokens" in knobs and "draft_model" not in knobs:
        problems.append(("num_draft_tokens", "needs draft_model (the model that drafts)"))
    if "draft_model" in out and "num_draft_tokens" not in out:
        out["num_draft_tokens"] = MLX_LM_DRAFT_TOKENS
    if "draft_model" in out and checkpoint is not None:
        why = _same_vocabulary(checkpoint, draft_path(out["draft_model"]))
        if why:
            problems.append(("draft_model", why))
    return out, problems


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _value(knob: str, v, checkpoint: Path | None) -> tuple[object, str | None]:
    if knob in ("max_batch_size", "prefill_chunk", "num_draft_tokens"):
        return (v, None) if _positive_int(v) else (None, f"expected a positive integer, got {v!r}")
    if knob == "read_timeout_s":
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 3600
        return (float(v), None) if ok else (None, f"expected seconds in (0, 3600], got {v!r}")
    if knob == "prefix_cache_bytes":
        try:
            return parse_bytes(v, knob), None
        except ValueError as e:
            return None, str(e)
    if knob == "exact_length":
        return (v, None) if isinstance(v, bool) else (None, f"expected true or false, got {v!r}")
    if knob == "served_model":
        ok = isinstance(v, str) and v.strip()
        return (v, None) if ok else (None, f"expected the model name the server serves, got {v!r}")
    if knob == "base_url":
        return _base_url(v)
    if knob == "draft_model":
        return _draft(v)
    raise AssertionError(knob)


def _base_url(v) -> tuple[object, str | None]:
    example = "e.g. 'http://127.0.0.1:8080/v1'"
    if not isinstance(v, str):
        return None, f"expected a URL, {example}, got {v!r}"
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None, f"expected an http(s) URL with a host, {example}, got {v!r}"
    try:
        parts.port
    except ValueError:
        return None, f"the port of {v!r} is not a number"
    if parts.query or parts.fragment:
        return None, f"expected the API's base URL without query or fragment, {example}, got {v!r}"
    return v.rstrip("/"), None


def draft_path(name: str) -> Path:
    """The draft model's directory: a shipped model's name or a path, as `model` is."""
    from runner.engine.checkpoint import resolve_checkpoint

    return resolve_checkpoint(name)


def _draft(v) -> tuple[object, str | None]:
    # Kept as written (a name such as "tiny"), so a run's knobs name no machine's paths.
    if not isinstance(v, str) or not v.strip():
        return None, f"expected a shipped model name or a checkpoint directory, got {v!r}"
    path = draft_path(v)
    if not (path / "config.json").is_file():
        return None, f"no shipped model or checkpoint directory named {v!r} (looked at {path})"
    return v, None


def _same_vocabulary(target: Path, draft: Path) -> str | None:
    """A draft must share the target's tokenizer: mlx-lm only warns when it does not."""
    try:
        sizes = [json.loads((p / "config.json").read_text())["vocab_size"] for p in (target, draft)]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"cannot compare the vocabularies of {target} and {draft}: {e}"
    if sizes[0] != sizes[1]:
        return (
            f"{draft} has a vocabulary of {sizes[1]} tokens and the model {sizes[0]}: a draft "
            "must share the model's tokenizer"
        )
    return None
