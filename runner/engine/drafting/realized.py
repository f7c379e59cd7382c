"""What drafting has paid in the passes it ran: each width's tokens committed per unit of
pass time, by draft length, decayed, over every decode pass whatever its regime.

The adaptive policy's veto. Its side-by-side cost model (draft_cost.py) compares steady
passes only, and a warm-up's timings leave out what drafting costs around its passes (a
backlog flushed after passes without drafts, the host's share); either can make drafting
look cheaper than it is. A draft length whose realized rate at a width is below what the
width's passes without drafts realized is therefore not taken there: drafting is never
kept where it has been losing, nor measured there again by an exploring window (each
costs a few slow passes) until its rate is stale: STALE_AFTER passes of the width
without one of its own, when it may be explored afresh.
"""

from __future__ import annotations

from typing import Optional

MEMORY = 0.98  # each pass of a (width, k) keeps this share of the earlier ones' weight
MIN_PASSES = 8  # passes of a (width, k) before its rate is trusted
STALE_AFTER = 256  # passes of a width without one of a draft length k > 0: its rate is forgotten


class RealizedRates:
    def __init__(self) -> None:
        self._tokens: dict[tuple[int, int], float] = {}
        self._ns: dict[tuple[int, int], float] = {}
        self._passes: dict[tuple[int, int], int] = {}
        self._seen: dict[int, int] = {}  # passes of each width, counted or not
        self._last: dict[tuple[int, int], int] = {}  # the width's pass count at (width, k)'s latest

    def add(self, width: int, k: int, tokens: int, duration_ns: int, counted: bool = True) -> None:
        """One decode pass of the regime k (counted: a pure one, draft_policy.py)."""
        self._seen[width] = self._seen.get(width, 0) + 1
        if not counted:
            return
        key = (width, k)
        self._tokens[key] = MEMORY * self._tokens.get(key, 0.0) + tokens
        self._ns[key] = MEMORY * self._ns.get(key, 0.0) + duration_ns
        self._passes[key] = self._passes.get(key, 0) + 1
        self._last[key] = self._seen[width]

    def ran(self, width: int) -> bool:
        """Has a pass of this width run, whatever its k, counted or not?"""
        return width in self._seen

    def rate(self, width: int, k: int) -> Optional[float]:
        """Tokens per second, or None before MIN_PASSES passes (or once stale, k > 0)."""
        key = (width, k)
        if self._passes.get(key, 0) < MIN_PASSES or not self._ns[key]:
            return None
        if k and self._seen[width] - self._last[key] > STALE_AFTER:
            return None
        return self._tokens[key] / self._ns[key] * 1e9

    def best_paying(self, width: int) -> Optional[int]:
        """The draft length of highest realized rate at this width, among those that
        realized more than its passes without drafts (None: none did, or no bar yet)."""
        plain = self.rate(width, 0)
        rates = {k: self.rate(width, k) for w, k in self._passes if w == width and k}
        paying = {k: r for k, r in rates.items() if r is not None and plain is not None and r > plain}
        return max(sorted(paying), key=paying.__getitem__) if paying else None

    def veto(self, width: int, k: int) -> str:
        """Why k may not be kept at this width ('' when it may)."""
        if k == 0:
            return ""
        plain, drafting = self.rate(width, 0), self.rate(width, k)
        if plain is None or drafting is None or drafting >= plain:
            return ""
        return f"k {k} realized {drafting:.0f} tok/s at width {width}, passes without drafts {plain:.0f}"
