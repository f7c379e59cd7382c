"""What drafting has paid in the passes it ran: each width's tokens committed per unit of
pass time, by draft length, over the width's recent decode passes whatever their regime.

The adaptive policy's veto. Its side-by-side cost model (draft_cost.py) compares steady
passes only, and a warm-up's timings leave out what drafting costs around its passes (a
backlog flushed after passes without drafts, the host's share); either can make drafting
look cheaper than it is. A draft length whose realized rate at a width is below what the
width's passes without drafts realized is therefore not taken there: drafting is never
kept where it has been losing, nor measured there again by an exploring window (each
costs a few slow passes) while its rate stands.

Two rates only compare when they were measured in about the same time: a VM's speed can
move by half from one minute to the next, and a length measured in a slow spell against
passes without drafts measured in a fast one (or the reverse) was vetoed, or kept, for the
machine's sake. So every pass of a width ages all of that width's rates (MEMORY), the one
it belongs to included; a rate whose weight has aged below LAPSE is forgotten. Then the
policy measures passes without drafts afresh before it keeps drafting (the bar lapses
every few hundred passes of drafting), and a vetoed length may be explored again. A pass
far slower than its regime's mean (a neighbour's burst on a shared machine) counts as
CLIP times that mean, so one burst in a short window does not veto a length.
"""

from __future__ import annotations

from typing import Optional

MEMORY = 0.99  # each pass of a width keeps this share of the weight of the width's earlier ones
MIN_PASSES = 8  # passes of a (width, k) since its rate last lapsed before it is trusted
LAPSE = 0.5  # a rate whose aged weight (in passes) falls below this is forgotten
CLIP = 3.0  # a counted pass's duration is at most this many times its regime's mean


class RealizedRates:
    def __init__(self) -> None:
        self._tokens: dict[tuple[int, int], float] = {}
        self._ns: dict[tuple[int, int], float] = {}
        self._weight: dict[tuple[int, int], float] = {}
        self._passes: dict[tuple[int, int], int] = {}  # since the rate last lapsed
        self._seen: set[int] = set()  # widths that have run a pass, counted or not

    def add(self, width: int, k: int, tokens: int, duration_ns: int, counted: bool = True) -> None:
        """One decode pass of the regime k (counted: a pure one, draft_policy.py)."""
        self._seen.add(width)
        for key in [key for key in self._weight if key[0] == width]:
            self._tokens[key] *= MEMORY
            self._ns[key] *= MEMORY
            self._weight[key] *= MEMORY
            if self._weight[key] < LAPSE:
                self._forget(key)
        if not counted:
            return
        key = (width, k)
        if key in self._weight and self._passes[key] >= MIN_PASSES:
            duration_ns = min(duration_ns, CLIP * self._ns[key] / self._weight[key])
        self._tokens[key] = self._tokens.get(key, 0.0) + tokens
        self._ns[key] = self._ns.get(key, 0.0) + duration_ns
        self._weight[key] = self._weight.get(key, 0.0) + 1.0
        self._passes[key] = self._passes.get(key, 0) + 1

    def _forget(self, key: tuple[int, int]) -> None:
        for d in (self._tokens, self._ns, self._weight, self._passes):
            del d[key]

    def ran(self, width: int) -> bool:
        """Has a pass of this width run, whatever its k, counted or not?"""
        return width in self._seen

    def rate(self, width: int, k: int) -> Optional[float]:
        """Tokens per second, or None before MIN_PASSES passes since it last lapsed."""
        key = (width, k)
        if self._passes.get(key, 0) < MIN_PASSES or not self._ns[key]:
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
