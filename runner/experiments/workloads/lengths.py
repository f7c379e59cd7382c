"""Seeded length distributions for a workload's prompt_tokens and max_new_tokens.

- `prompt_tokens = [low, high]` (as before) draws uniformly; so does
  `{ dist = "uniform", min = ..., max = ... }`.
- `{ dist = "lognormal", mean = ..., sigma = ..., min = ..., max = ... }`: lengths whose
  arithmetic mean is `mean` before clipping (log-space mu = ln(mean) - sigma^2 / 2) and
  whose log has standard deviation `sigma`, rounded and clipped to [min, max], the
  long-tailed shape of chat traffic.
- `max_new_tokens = N` asks every request for N tokens (as before); a table draws each
  request's count, N being the table's max.
`parse(value, key)` returns a LengthDist or one problem (key, reason); `draw(rng)` takes
one length from a random.Random. This module reads no files and runs nothing.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

DISTS = ("uniform", "lognormal")
KEYS = {"uniform": ("dist", "min", "max"), "lognormal": ("dist", "mean", "sigma", "min", "max")}
MAX_SIGMA = 5.0  # past this a lognormal is all clipping: a typo, not a workload
EXAMPLE = '{ dist = "lognormal", mean = 128, sigma = 0.6, min = 16, max = 512 }'


@dataclass(frozen=True)
class LengthDist:
    dist: str  # "uniform" | "lognormal"
    min: int
    max: int
    mean: float | None = None  # lognormal only
    sigma: float | None = None

    def draw(self, rng: random.Random) -> int:
        if self.dist == "uniform":
            return rng.randint(self.min, self.max)
        mu = math.log(self.mean) - self.sigma**2 / 2
        return min(self.max, max(self.min, round(math.exp(rng.gauss(mu, self.sigma)))))

    def to_toml(self) -> str:
        fields = [f'dist = "{self.dist}"']
        if self.dist == "lognormal":
            fields += [f"mean = {self.mean!r}", f"sigma = {self.sigma!r}"]
        return "{ " + ", ".join(fields + [f"min = {self.min}", f"max = {self.max}"]) + " }"


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse(value: dict, key: str) -> tuple[LengthDist | None, tuple[str, str] | None]:
    """A distribution table -> (LengthDist, None), or (None, (the key, why it is wrong))."""
    dist = value.get("dist")
    if dist not in DISTS:
        return None, (
            f"{key}.dist",
            f"expected one of {', '.join(repr(d) for d in DISTS)}, got {dist!r} (e.g. {EXAMPLE})",
        )
    unknown = sorted(set(value) - set(KEYS[dist]))
    if unknown:
        return None, (
            f"{key}.{unknown[0]}",
            f"not a key of a {dist} distribution (its keys: {', '.join(KEYS[dist])})",
        )
    for name in KEYS[dist][1:]:
        if name not in value:
            return None, (f"{key}.{name}", f"a {dist} distribution needs {name} (e.g. {EXAMPLE})")
    low, high = value["min"], value["max"]
    if not (_int(low) and _int(high) and 1 <= low <= high):
        return None, (f"{key}.min", f"expected integers 1 <= min <= max, got min = {low!r}, max = {high!r}")
    if dist == "uniform":
        return LengthDist(dist, low, high), None
    mean, sigma = value["mean"], value["sigma"]
    if not (_number(mean) and low <= mean <= high):
        return None, (f"{key}.mean", f"expected a number between min ({low}) and max ({high}), got {mean!r}")
    if not (_number(sigma) and 0 < sigma <= MAX_SIGMA):
        return None, (f"{key}.sigma", f"expected a number in (0, {MAX_SIGMA:g}], got {sigma!r}")
    return LengthDist(dist, low, high, float(mean), float(sigma)), None
