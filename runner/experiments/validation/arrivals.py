"""The rules of a declaration's `workload.arrivals` and `workload.script`: closed-loop,
Poisson or gamma arrivals (one rate, or a list of rates swept as a cell dimension) and
scripted entries. Problems go through the checker `c` (validate._Checker) as (key,
reason), never raised; `validate_workload.check_workload` calls these.
"""

from __future__ import annotations

# Upper bounds that only catch typos (as validate_workload's).
MAX_CELL_SECONDS = 3600.0
ARRIVALS = ("closed", "poisson", "script")
POISSON_KEYS = ("process", "rate", "burstiness")
PROCESSES = ("poisson", "gamma")  # gamma: burstiness 1 is Poisson, below 1 burstier (vLLM's meaning)
MAX_BURSTINESS = 100.0
MAX_SWEEP_RATES = 32
SCRIPT_KEYS = ("at", "prompt_tokens", "max_new_tokens", "label", "lane")
MAX_RATE = 10_000.0  # requests per second
MAX_SCRIPT_ENTRIES = 10_000
MAX_LABEL_CHARS = 32
_POISSON_EXAMPLE = '{ process = "poisson", rate = 2.5 }'


def positive_number(c, table: dict, key: str, prefix: str, maximum: float, required: bool = False):
    v = c.value(table, key, prefix, "number", maximum=maximum, **({} if required else {"default": None}))
    if v is not None and v <= 0:
        c.bad(prefix + key, f"must be > 0, got {table[key]!r}")
        return None
    return v


def check_arrivals(c, v, key: str) -> tuple[str | None, float | None, tuple[float, ...], float | None]:
    """(form, rate, swept rates, burstiness); (None, None, (), None) when the key is bad.
    A list of rates is a sweep (a cell dimension; `rate` is then its first)."""
    bad = (None, None, (), None)
    if isinstance(v, str) and v in ("closed", "script"):
        return v, None, (), None
    if v == "poisson":
        c.bad(key, f"poisson arrivals need a rate: arrivals = {_POISSON_EXAMPLE}")
        return bad
    if not isinstance(v, dict):
        c.bad(key, f'expected "closed", "script" or {_POISSON_EXAMPLE}, got {v!r}')
        return bad
    c.unknown(v, key + ".", POISSON_KEYS)
    process = v.get("process")
    if "process" not in v:
        c.bad(key + ".process", f"required key is missing (e.g. arrivals = {_POISSON_EXAMPLE})")
    elif process not in PROCESSES:
        c.bad(key + ".process", f'expected "poisson" or "gamma", got {process!r}')
    rates: tuple[float, ...] = ()
    if isinstance(v.get("rate"), list):
        rates = _rates(c, v["rate"], key + ".rate")
        rate = rates[0] if rates else None
    else:
        rate = positive_number(c, v, "rate", key + ".", MAX_RATE, required=True)
    burstiness = None
    if process == "gamma":
        burstiness = positive_number(c, v, "burstiness", key + ".", MAX_BURSTINESS, required=True)
    elif "burstiness" in v:
        c.bad(key + ".burstiness", 'only with process = "gamma" (Poisson arrivals have burstiness 1)')
    ok = process in PROCESSES and rate is not None and (process == "poisson" or burstiness is not None)
    return ("poisson", rate, rates, burstiness) if ok else bad


def _rates(c, v: list, key: str) -> tuple[float, ...]:
    """A sweep's rates: distinct positive numbers, at most MAX_SWEEP_RATES."""
    ok = (
        0 < len(v) <= MAX_SWEEP_RATES
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x <= MAX_RATE for x in v)
        and len(set(v)) == len(v)
    )
    if not ok:
        c.bad(
            key, f"expected 1 to {MAX_SWEEP_RATES} distinct rates in (0, {MAX_RATE:g}] requests/s, got {v!r}"
        )
        return ()
    return tuple(float(x) for x in v)


def check_script(
    c,
    v,
    key: str,
    default_new: int | None,
    declared_new: bool,
    shared: int | None,
    concurrency: list[int] | None,
) -> tuple[dict, ...] | None:
    """The entries as dicts of SCRIPT_KEYS (label None when not given); None when any is bad."""
    example = "[[workload.script]] tables, e.g. { at = 0.0, prompt_tokens = 64, lane = 0 }"
    if v is None:
        c.bad(key, f'arrivals = "script" needs a script: {example}')
        return None
    if not isinstance(v, list) or not v or not all(isinstance(e, dict) for e in v):
        c.bad(key, f"expected a non-empty list of {example}, got {v!r}")
        return None
    if len(v) > MAX_SCRIPT_ENTRIES:
        c.bad(key, f"at most {MAX_SCRIPT_ENTRIES} entries, got {len(v)}")
        return None
    lanes = max(concurrency) if concurrency else None
    entries, before = [], len(c.problems)
    for i, e in enumerate(v):
        p = f"{key}[{i}]."
        c.unknown(e, p, SCRIPT_KEYS)
        entry = {
            "at": c.value(e, "at", p, "number", minimum=0, maximum=MAX_CELL_SECONDS),
            "prompt_tokens": c.value(e, "prompt_tokens", p, "int", minimum=1),
            "max_new_tokens": default_new,
            "label": None,
            "lane": c.value(e, "lane", p, "int", default=0, minimum=0),
        }
        if "max_new_tokens" in e:
            entry["max_new_tokens"] = c.value(e, "max_new_tokens", p, "int", minimum=1)
        elif not declared_new:
            c.bad(
                p + "max_new_tokens",
                "required key is missing (or set workload.max_new_tokens for every entry)",
            )
        if "label" in e:
            label = e["label"]
            if not isinstance(label, str) or not label.strip() or len(label) > MAX_LABEL_CHARS:
                c.bad(
                    p + "label",
                    f"expected a non-empty string of at most {MAX_LABEL_CHARS} characters, got {label!r}",
                )
            else:
                entry["label"] = label
        if lanes is not None and entry["lane"] is not None and entry["lane"] >= lanes:
            c.bad(
                p + "lane",
                f"must be below the largest concurrency ({lanes}): lane {entry['lane']} would never be sent",
            )
        n = entry["prompt_tokens"]
        if n is not None and shared is not None and shared >= n:
            c.bad(
                p + "prompt_tokens",
                f"must be above workload.shared_prefix_tokens ({shared}) "
                f"so that every prompt has its own tokens, got {n}",
            )
        entries.append(entry)
    raw_lanes = [e.get("lane", 0) for e in v]
    if 0 not in raw_lanes and all(type(x) is int for x in raw_lanes):
        c.bad(key, "needs at least one entry with lane 0 (concurrency 1 sends lane 0 alone)")
    complete = all(v is not None for e in entries for k, v in e.items() if k != "label")
    return tuple(entries) if complete and len(c.problems) == before else None  # (a bad default: None)
