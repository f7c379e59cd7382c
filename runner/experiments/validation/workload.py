"""The rules of a declaration's [workload] table: prompts, lengths, cell minimums, how
requests arrive (`arrivals`, `script`) and the service-level objective (`slo`).

`check_workload(c, table, concurrency)` reads the table into the keyword arguments of
declaration.Workload (script entries as dicts), reporting every problem through the
checker `c` (validate._Checker) as (key, reason) and never raising. Which keys a table
needs depends on its arrivals form:

    closed   requests_per_client, prompt_tokens, max_new_tokens required; no script
    poisson  prompt_tokens, max_new_tokens required; requests_per_client optional (1); no script
    script   script required; max_new_tokens optional (each entry's default); no
             requests_per_client or prompt_tokens (each entry gives its own length)

When the arrivals key itself is bad, the form-dependent rules are skipped, so that one
mistake is one error (the arrivals' and script's rules are `validate_arrivals.py`'s).
`check_context` runs once the checkpoint is known: every prompt
plus its new tokens must fit the model's max_position_embeddings. This module does not
know file names (declaration.py adds them) and imports no model code.
"""

from __future__ import annotations

import json
from pathlib import Path

from runner.experiments.validation.arrivals import (
    MAX_CELL_SECONDS,
    check_arrivals,
    check_script,
    positive_number,
)
from runner.experiments.workloads import lengths

WORKLOAD_KEYS = (
    "prompts",
    "requests_per_client",
    "prompt_tokens",
    "max_new_tokens",
    "temperature",
    "shared_prefix_tokens",
    "min_cell_seconds",
    "min_cell_tokens",
    "arrivals",
    "script",
    "slo",
    "aa",
    "allow_short",
)
SLO_KEYS = ("ttft_ms", "tpot_ms")
# Defaults sized so that every cell holds at least 2 s of timed work (one figure of a cell
# is then an average over many passes, not a handful).
DEFAULT_MIN_CELL_SECONDS = 2.5
DEFAULT_MIN_CELL_TOKENS = 0
DEFAULT_OPEN_REQUESTS = 1  # poisson: at least requests_per_client x concurrency arrivals
# Upper bounds that only catch typos (a cell of an hour, a billion tokens, a script of a
# day's traffic, a rate no engine here could meet by a factor of thousands).
MAX_CELL_TOKENS = 10**8
MAX_SLO_MS = 3_600_000.0


def check_workload(c, table: dict | None, concurrency: list[int] | None) -> dict:
    if table is None:
        return {}
    p = "workload."
    c.unknown(table, p, WORKLOAD_KEYS)
    form, rate, rates, burstiness = check_arrivals(c, table.get("arrivals", "closed"), p + "arrivals")
    w = {
        "prompts": c.value(table, "prompts", p, "str"),
        "temperature": c.value(table, "temperature", p, "number", default=0.0, minimum=0),
        "shared_prefix_tokens": c.value(table, "shared_prefix_tokens", p, "int", default=0, minimum=0),
        "aa": c.value(table, "aa", p, "bool", default=False),
        "min_cell_seconds": c.value(
            table,
            "min_cell_seconds",
            p,
            "number",
            minimum=0,
            default=DEFAULT_MIN_CELL_SECONDS,
            maximum=MAX_CELL_SECONDS,
        ),
        "min_cell_tokens": c.value(
            table,
            "min_cell_tokens",
            p,
            "int",
            minimum=0,
            default=DEFAULT_MIN_CELL_TOKENS,
            maximum=MAX_CELL_TOKENS,
        ),
        "arrivals": form or "closed",
        "rate": rate,
        "rates": rates,
        "burstiness": burstiness,
        "allow_short": _allow_short(c, table, p),
    }
    w.update(_slo(c, table, p))
    scripted = form == "script"
    for key, why in (
        (
            "requests_per_client",
            "the cell plays the script once, then again until min_cell_seconds and min_cell_tokens hold",
        ),
        ("prompt_tokens", "each script entry gives its own prompt_tokens"),
    ):
        if scripted and key in table:
            c.bad(p + key, f'not used with arrivals = "script" ({why}); remove it')
    if form in ("closed", "poisson") and "script" in table:
        c.bad(p + "script", f'only with arrivals = "script" (arrivals is {form!r})')
    # Required of closed-loop clients only: an open-loop cell has a default request minimum.
    w["requests_per_client"] = (
        1
        if scripted
        else c.value(
            table,
            "requests_per_client",
            p,
            "int",
            minimum=1,
            **({} if form == "closed" else {"default": DEFAULT_OPEN_REQUESTS}),
        )
    )
    # A table draws each request's lengths (lengths.py); the bounds stand in for the fixed values.
    dists = {k: _dist(c, table, p, k, scripted) for k in ("prompt_tokens", "max_new_tokens")}
    w["prompt_dist"], w["new_tokens_dist"] = dists["prompt_tokens"], dists["max_new_tokens"]
    mnt = (
        dists["max_new_tokens"].max
        if dists["max_new_tokens"]
        else c.value(
            table,
            "max_new_tokens",
            p,
            "int",
            minimum=1,
            **({"default": None} if scripted or form is None else {}),
        )
    )
    if scripted:
        w["script"] = check_script(
            c,
            table.get("script"),
            p + "script",
            mnt,
            "max_new_tokens" in table,
            w["shared_prefix_tokens"],
            concurrency,
        )
        entries = w["script"] or ()
        w["prompt_tokens"] = (
            (min(e["prompt_tokens"] for e in entries), max(e["prompt_tokens"] for e in entries))
            if entries
            else None
        )
        w["max_new_tokens"] = (
            mnt if mnt is not None else (max(e["max_new_tokens"] for e in entries) if entries else None)
        )
        return w
    w["script"], w["max_new_tokens"] = (), mnt
    w["prompt_tokens"] = _span(c, table, p, w["shared_prefix_tokens"], required=form is not None)
    return w


def _span(c, table: dict, p: str, shared: int | None, required: bool) -> tuple[int, int] | None:
    if "prompt_tokens" not in table and not required:
        return None
    given = table.get("prompt_tokens")
    span = (
        ([given["min"], given["max"]] if _dist(None, table, p, "prompt_tokens", False) else None)
        if isinstance(given, dict)
        else c.int_list(table, "prompt_tokens", p, 1)
    )
    if span is not None and (len(span) != 2 or span[0] > span[1]):
        c.bad(p + "prompt_tokens", f"expected an inclusive range [low, high] with low <= high, got {span}")
        span = None
    if span and shared is not None and shared >= span[0]:
        c.bad(
            p + "shared_prefix_tokens",
            f"must be below the shortest prompt ({span[0]} tokens) "
            f"so that every prompt has its own tokens, got {shared}",
        )
    return tuple(span) if span else None


def _slo(c, table: dict, p: str) -> dict:
    slo = c.value(table, "slo", p, "table", default={}) or {}
    c.unknown(slo, p + "slo.", SLO_KEYS)
    return {f"slo_{k}": positive_number(c, slo, k, p + "slo.", MAX_SLO_MS) for k in SLO_KEYS}


def check_context(c, w: dict, checkpoint: Path | None) -> None:
    """Every prompt plus its new tokens within the model's max_position_embeddings (the
    engine refuses longer requests; better here than in the middle of a run)."""
    if checkpoint is None:
        return
    try:
        limit = int(json.loads((checkpoint / "config.json").read_text())["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # the checkpoint checks report an unreadable config
    if w.get("script"):
        for i, e in enumerate(w["script"]):
            if e["prompt_tokens"] + e["max_new_tokens"] > limit:
                c.bad(
                    f"workload.script[{i}].prompt_tokens",
                    f"{e['prompt_tokens']} prompt + {e['max_new_tokens']} new tokens exceed the "
                    f"model's max_position_embeddings ({limit})",
                )
    elif w.get("prompt_tokens") and w.get("max_new_tokens"):
        high, new = w["prompt_tokens"][1], w["max_new_tokens"]
        if high + new > limit:
            c.bad(
                "workload.prompt_tokens",
                f"the longest prompt ({high}) + max_new_tokens ({new}) "
                f"exceeds the model's max_position_embeddings ({limit})",
            )


def _allow_short(c, table: dict, p: str) -> bool:
    """allow_short = true: claims may stand on cells whose requests came back shorter than
    asked (a runtime that stops at end-of-sequence); by default such claims fail."""
    v = table.get("allow_short", False)
    if not isinstance(v, bool):
        c.bad(p + "allow_short", f"expected true or false, got {v!r}")
        return False
    return v


def _dist(c, table: dict, p: str, key: str, scripted: bool):
    """The key's distribution when it is a table (None otherwise, or when it is wrong: the
    problem goes to the checker `c`, when given)."""
    value = table.get(key)
    if not isinstance(value, dict):
        return None
    if scripted:
        if c is not None:
            c.bad(p + key, 'a distribution is not used with arrivals = "script" (each entry gives its own)')
        return None
    dist, problem = lengths.parse(value, p + key)
    if problem and c is not None:
        c.bad(*problem)
    return dist
