"""The seeded workload: an unbounded, deterministic stream of prompts, read per closed-loop
client (prompt(client, i)) or by request id (prompt_of(request_id), for open-loop
arrivals).

- Prompts come from held-out text (the checkpoint's heldout.jsonl, or a JSONL file of
  {"id", "text"} objects, read by `runner/prompts.py`) tokenised with the checkpoint's
  tokenizer.json. With shared_prefix_tokens = N, every prompt starts with the same N
  tokens, taken from one held-out text chosen by the seed.
- Request ids: a stream is `width` clients wide (the experiment's largest concurrency),
  and client c's i-th request has request_id = i * width + c, so ids stay unique however
  many requests a time-sized cell issues, and (client, i) = (id % width, id // width).
- A prompt is a function of (seed, request_id) alone: its length is the request_id-th
  draw from `random.Random(seed)` over the inclusive range (drawn in id order, so asking
  out of order changes nothing), its text starts at the request_id-th document of a
  seeded shuffle (a text too short for its length is joined with the texts that follow
  it). So every arm, round and concurrency level replays the same prompt for the same
  (client, i).
- It does not talk to the engine.
"""

from __future__ import annotations

import random
from pathlib import Path

from tokenizers import Tokenizer

from runner.prompts import PromptsError, read_prompts

from .declaration import Workload


class WorkloadError(Exception):
    """Unusable prompt source; the message names the file (and line)."""


def read_texts(path: Path) -> list[str]:
    """The texts of a JSONL prompt file, read by the one reader of that format."""
    try:
        texts = [p.text for p in read_prompts(path)]
    except PromptsError as e:
        raise WorkloadError(str(e)) from None
    if not texts:
        raise WorkloadError(f"{path}: holds no prompts")
    return texts


def prompt_source(workload: Workload, checkpoint: Path) -> Path:
    return checkpoint / "heldout.jsonl" if workload.prompts == "heldout" else Path(workload.prompts)


class _TokenStream:
    """Held-out documents as token lists; `take(start, n)` joins consecutive documents
    (wrapping around) when one is too short."""

    def __init__(self, docs: list[list[int]], source: Path):
        self.docs = [d for d in docs if d]
        self.total = sum(len(d) for d in self.docs)
        if not self.docs:
            raise WorkloadError(f"{source}: every text tokenises to nothing")
        self.source = source

    def take(self, start: int, n: int) -> list[int]:
        if n > self.total:
            raise WorkloadError(
                f"{self.source}: a {n}-token prompt needs more text than the "
                f"whole file holds ({self.total} tokens)"
            )
        out: list[int] = []
        doc = start
        while len(out) < n:
            out.extend(self.docs[doc % len(self.docs)][: n - len(out)])
            doc += 1
        return out


class PromptStream:
    """prompt(client, i) = the token ids of client's i-th request, for any i >= 0."""

    def __init__(self, workload: Workload, seed: int, checkpoint: Path, width: int):
        if width < 1:
            raise ValueError(f"a prompt stream is at least one client wide, got {width}")
        source = prompt_source(workload, checkpoint)
        tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
        encoded = tokenizer.encode_batch(read_texts(source), add_special_tokens=False)
        self._text = _TokenStream([e.ids for e in encoded], source)
        self._rng = random.Random(seed)
        self.width = width
        self._shared = self._text.take(
            self._rng.randrange(len(self._text.docs)), workload.shared_prefix_tokens
        )
        self._order = list(range(len(self._text.docs)))
        self._rng.shuffle(self._order)
        self._span = workload.prompt_tokens
        # Fail here, before any cell, when the longest prompt cannot be made from the text.
        self._text.take(0, self._span[1] - len(self._shared))
        self._lengths: list[int] = []
        self._prompts: dict[tuple[int, int], list[int]] = {}  # built once, replayed by every arm and round

    def request_id(self, client: int, i: int) -> int:
        if not 0 <= client < self.width or i < 0:
            raise ValueError(f"no request ({client}, {i}) in a stream {self.width} clients wide")
        return i * self.width + client

    def length(self, request_id: int) -> int:
        while len(self._lengths) <= request_id:
            self._lengths.append(self._rng.randint(*self._span))
        return self._lengths[request_id]

    def prompt(self, client: int, i: int) -> list[int]:
        return self.prompt_of(self.request_id(client, i))

    def prompt_of(self, request_id: int, length: int | None = None) -> list[int]:
        """Request `request_id`'s prompt: the seeded length unless `length` is given (the
        whole prompt, shared prefix included, which must leave it tokens of its own)."""
        if request_id < 0:
            raise ValueError(f"request ids are >= 0, got {request_id}")
        n = self.length(request_id) if length is None else length
        key = (request_id, n)
        if key not in self._prompts:
            own = n - len(self._shared)
            if own < 1:
                raise WorkloadError(
                    f"a {n}-token prompt leaves no tokens after the {len(self._shared)}-token shared prefix"
                )
            self._prompts[key] = self._shared + self._text.take(
                self._order[request_id % len(self._order)], own
            )
        return self._prompts[key]
