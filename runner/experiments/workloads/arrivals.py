"""When an open-loop cell's requests arrive, and which requests they are: a seeded Poisson
process (`arrivals = { process = "poisson", rate = R }`) or a script (`arrivals = "script"`).

A schedule is built fresh for each cell, so every arm, round and concurrency level gets
the same arrivals: the same request ids at the same cell-relative times, with the same
prompts, lengths, labels and sampling seeds. The executor (openloop.py) asks it what is
due, when the next arrival is, and tells it when requests finish.

Request ids, and so prompts (workload.PromptStream.prompt_of):

    poisson  the cell's k-th arrival is request k (k = 0, 1, ...), with the stream's k-th
             prompt (its seeded length and text, as a closed-loop request_id k has).
             Arrival 0 comes at t = 0, arrival k + 1 an exponential gap of mean 1/rate
             after arrival k, the gaps drawn from random.Random("poisson:<seed>")
             (poisson_gaps). It keeps arriving while needs_more holds at the arrival's
             time, with the cell's request minimum requests_per_client x concurrency.
    script   entry j (in declared order, counting every entry, whatever its lane) of
             play p is request p * len(script) + j, with the stream's text for that id
             at the entry's prompt_tokens. At concurrency c only the entries with
             lane < c are sent (client = lane). Play 0 starts at t = 0; when every
             request of play p has finished, play p + 1 starts at the last one's finish
             time if needs_more holds (counting plays, at least one), with new ids and
             so the next prompts of the stream, the same lengths, labels and lanes.

This module does not talk to a runtime or the store.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterator

from runner.experiments.cell import needs_more
from runner.experiments.declaration import Workload
from runner.experiments.workloads.workload import PromptStream

NS = 1_000_000_000
POISSON_CLIENT = 0  # one arrival process: every Poisson request is client 0


@dataclass(frozen=True)
class Arrival:
    request_id: int
    at_ns: int  # cell-relative: when it arrives (a wait for a free slot comes after)
    client: int
    prompt: list[int]
    max_new_tokens: int
    label: str | None = None


def poisson_gaps(seed: int, rate: float) -> Iterator[int]:
    """The inter-arrival gaps in ns, gap k between arrivals k and k + 1."""
    rng = random.Random(f"poisson:{seed}")  # a str seed is hashed with sha512: stable
    while True:
        yield round(rng.expovariate(rate) * NS)


def gamma_gaps(seed: int, rate: float, burstiness: float) -> Iterator[int]:
    """Gamma-distributed gaps with mean 1/rate and shape `burstiness` (vLLM's meaning: 1 is
    exponential, i.e. Poisson; below 1 the same rate comes in bursts). Seeded by the seed
    and the rate alone, so every arm gets the same arrivals at each rate."""
    rng = random.Random(f"gamma:{seed}")
    while True:
        yield round(rng.gammavariate(burstiness, 1.0 / (rate * burstiness)) * NS)


class Poisson:
    def __init__(self, w: Workload, seed: int, concurrency: int, stream: PromptStream):
        self._w, self._stream = w, stream
        self._least = w.requests_per_client * concurrency
        self._gaps = (
            poisson_gaps(seed, w.rate) if w.burstiness is None else gamma_gaps(seed, w.rate, w.burstiness)
        )
        self._k, self._at = 0, 0
        self.done = False

    def _more(self, tokens: int) -> bool:
        # Monotone in time and tokens: once it fails it fails for every later arrival.
        if not self.done and not needs_more(self._w, self._k, self._at, tokens, least=self._least):
            self.done = True
        return not self.done

    def due(self, now_ns: int, tokens: int) -> list[Arrival]:
        out = []
        while self._at <= now_ns and self._more(tokens):
            out.append(
                Arrival(
                    self._k,
                    self._at,
                    POISSON_CLIENT,
                    self._stream.prompt_of(self._k),
                    self._stream.new_tokens(self._k),
                )
            )
            self._k += 1
            self._at += next(self._gaps)
        return out

    def next_ns(self, tokens: int) -> int | None:
        return self._at if self._more(tokens) else None

    def finished(self, request_id: int, done_ns: int) -> None:
        """(Poisson arrivals do not wait on finishes.)"""


class Script:
    def __init__(self, w: Workload, seed: int, concurrency: int, stream: PromptStream):
        self._w, self._stream = w, stream
        self._size = len(w.script)
        # Sent in time order; entries at the same time in declared order.
        self._entries = sorted(
            ((round(e.at * NS), j, e) for j, e in enumerate(w.script) if e.lane < concurrency),
            key=lambda x: (x[0], x[1]),
        )
        self._play, self._offset, self._next = 0, 0, 0
        self._open: set[int] = set()  # the current play's requests not yet finished
        self._last_done = 0
        self.done = not self._entries

    def due(self, now_ns: int, tokens: int) -> list[Arrival]:
        out = []
        while not self.done and self._next < len(self._entries):
            at, j, e = self._entries[self._next]
            if self._offset + at > now_ns:
                break
            k = self._play * self._size + j
            out.append(
                Arrival(
                    k,
                    self._offset + at,
                    e.lane,
                    self._stream.prompt_of(k, e.prompt_tokens),
                    e.max_new_tokens,
                    e.label,
                )
            )
            self._open.add(k)
            self._next += 1
        return out

    def next_ns(self, tokens: int) -> int | None:
        """The next entry's time; None while a play waits on its requests, or when done."""
        if self.done:
            return None
        if self._next < len(self._entries):
            return self._offset + self._entries[self._next][0]
        if self._open:
            return None
        if not needs_more(self._w, self._play + 1, self._last_done, tokens, least=1):
            self.done = True
            return None
        self._play, self._offset, self._next = self._play + 1, self._last_done, 0
        return self._offset + self._entries[0][0]

    def finished(self, request_id: int, done_ns: int) -> None:
        self._open.discard(request_id)
        self._last_done = max(self._last_done, done_ns)


SCHEDULES = {"poisson": Poisson, "script": Script}


def schedule(w: Workload, seed: int, concurrency: int, stream: PromptStream) -> Poisson | Script:
    return SCHEDULES[w.arrivals](w, seed, concurrency, stream)


def describe(w: Workload) -> str:
    """How the cell's requests arrive, for the progress lines."""
    if w.arrivals == "poisson":
        kind = "poisson" if w.burstiness is None else f"gamma (burstiness {w.burstiness:g})"
        return f"{kind} arrivals at {w.rate:g} requests/s"
    if w.arrivals == "script":
        return f"a script of {len(w.script)} entr{'y' if len(w.script) == 1 else 'ies'}"
    return "closed-loop clients"


def min_requests(w: Workload, concurrency: int) -> int:
    """The fewest requests a cell sends (its progress target): closed loop and Poisson
    requests_per_client x concurrency, a script one play at this concurrency."""
    if w.arrivals == "script":
        return sum(e.lane < concurrency for e in w.script)
    return w.requests_per_client * concurrency
