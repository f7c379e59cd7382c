"""The rules of a declaration's sequential-design keys: `equivalence` (the band within
which a change is "level", a percentage such as "10%"), `max_rounds` (the most rounds a
run adds, at least `rounds`) and `budget` (how long the run may measure before it adds no
more rounds, counted from its start; the declared rounds always finish; "20m",
"90s", "1h30m"), `contention_limit` (the CPU share other processes or the hypervisor
may take from a cell before it is measured again, "15%" by default, "off" for none), and
`restart_every` (every arm's runtime started afresh every that many rounds; by default
once an invocation).
They return problems, never raise, and know no file names.
"""

from __future__ import annotations

import re

from runner.publish.stats.verdicts import DEFAULT_BAND, parse_band

SEQUENTIAL_KEYS = ("equivalence", "max_rounds", "budget", "contention_limit", "restart_every")
DEFAULT_CONTENTION_LIMIT = 0.15
_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*$")


def parse_duration(text: object) -> float | None:
    """'20m', '90s', '1h30m', '1.5h' -> seconds; None when it is none of these or zero."""
    if not isinstance(text, str) or not text.strip():
        return None
    m = _DURATION.match(text)
    if not m or not any(m.groups()):
        return None
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    seconds = h * 3600 + mi * 60 + s
    return seconds if seconds > 0 else None


def check_sequential(c, doc: dict, rounds: int | None) -> dict:
    """equivalence (a fraction), max_rounds (0: the declared rounds, a fixed design),
    budget_s (None: no limit), contention_limit and restart_every (0: never) from the
    top-level keys; problems go to the checker `c`."""
    out = {
        "equivalence": DEFAULT_BAND,
        "max_rounds": 0,
        "budget_s": None,
        "contention_limit": DEFAULT_CONTENTION_LIMIT,
        "restart_every": c.value(doc, "restart_every", "", "int", default=0, minimum=1),
    }
    if "contention_limit" in doc:
        raw = doc["contention_limit"]
        limit = parse_band(raw) if isinstance(raw, str) and raw != "off" else None
        if raw == "off":
            out["contention_limit"] = None
        elif limit is None:
            c.bad("contention_limit", f'expected a percentage such as "15%" or "off", got {raw!r}')
        else:
            out["contention_limit"] = limit
    if "equivalence" in doc:
        band = parse_band(doc["equivalence"]) if isinstance(doc["equivalence"], str) else None
        if band is None:
            c.bad(
                "equivalence",
                f'expected a percentage between 0% and 100% such as "10%", got {doc["equivalence"]!r}',
            )
        else:
            out["equivalence"] = band
    max_rounds = c.value(doc, "max_rounds", "", "int", default=0, minimum=1)
    if max_rounds and rounds is not None and max_rounds < rounds:
        c.bad("max_rounds", f"must be at least rounds ({rounds}), got {max_rounds}")
    elif max_rounds:
        out["max_rounds"] = max_rounds
    if "budget" in doc:
        seconds = parse_duration(doc["budget"])
        if seconds is None:
            c.bad("budget", f'expected a duration such as "20m", "90s" or "1h30m", got {doc["budget"]!r}')
        else:
            out["budget_s"] = seconds
    return out
