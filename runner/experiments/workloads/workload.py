"""The seeded workload: an unbounded, deterministic stream of prompts, read per closed-loop
client (prompt(client, i)) or by request id (prompt_of(request_id), for open-loop
arrivals).

- Prompts come from held-out text (the checkpoint's heldout.jsonl, or a JSONL file of
  {"id", "text"} objects, read by `runner/prompts.py`; or `"unseen"`, third-party code no
  checkpoint was trained on, `runner/unseen_text.py`) tokenised with the checkpoint's
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

from runner import unseen_text
from runner.experiments.declaration import Workload
from runner.experiments.workloads.datasets import DatasetError, is_dataset, read_dataset
from runner.prompts import PromptsError, read_prompts


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


def source_texts(workload: Workload, source: Path) -> list[str]:
    if workload.prompts == unseen_text.NAME:
        try:
            return [p.text for p in unseen_text.unseen_prompts()]
        except PromptsError as e:
            raise WorkloadError(str(e)) from None
    return read_texts(source)


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


class _Dataset:
    """A request dataset (datasets.py), tokenised: each request's prompt ids (cut to
    prompt_tokens' high end) and output length, in a seeded order; records whose prompt
    is shorter than prompt_tokens' low end are left out, as benchmark tools filter them."""

    def __init__(self, workload: Workload, seed: int, source: Path, tokenizer):
        for refused, why in (
            (workload.arrivals == "script", 'arrivals = "script" (each entry gives its own prompt)'),
            (workload.shared_prefix_tokens > 0, "shared_prefix_tokens (each record is its own prompt)"),
        ):
            if refused:
                raise WorkloadError(f"{source}: a request dataset cannot serve {why}")
        try:
            records = read_dataset(source)
        except DatasetError as e:
            raise WorkloadError(str(e)) from None
        prompts = tokenizer.encode_batch([r.prompt for r in records], add_special_tokens=False)
        outputs = tokenizer.encode_batch([r.output_text or "" for r in records], add_special_tokens=False)
        low, high = workload.prompt_tokens
        self.items = [
            (tuple(p.ids[:high]), r.output_tokens if r.output_tokens is not None else len(o.ids))
            for r, p, o in zip(records, prompts, outputs)
            if len(p.ids) >= low
        ]
        self.items = [(p, n) for p, n in self.items if n >= 1]
        if not self.items:
            raise WorkloadError(
                f"{source}: no record has a prompt of at least {low} tokens (prompt_tokens) and an output"
            )
        random.Random(seed).shuffle(self.items)

    def prompt(self, request_id: int) -> list[int]:
        return list(self.items[request_id % len(self.items)][0])

    def new_tokens(self, request_id: int) -> int:
        return self.items[request_id % len(self.items)][1]


class PromptStream:
    """prompt(client, i) = the token ids of client's i-th request, for any i >= 0."""

    def __init__(self, workload: Workload, seed: int, checkpoint: Path, width: int):
        if width < 1:
            raise ValueError(f"a prompt stream is at least one client wide, got {width}")
        source = prompt_source(workload, checkpoint)
        tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
        self.width = width
        self._new_dist, self._max_new = workload.new_tokens_dist, workload.max_new_tokens
        self._new_rng, self._new_tokens = random.Random(seed * 1_000_003 + 28), []
        dataset = workload.prompts != unseen_text.NAME and is_dataset(source)
        self._data = _Dataset(workload, seed, source, tokenizer) if dataset else None
        if self._data is not None:
            return
        encoded = tokenizer.encode_batch(source_texts(workload, source), add_special_tokens=False)
        self._text = _TokenStream([e.ids for e in encoded], source)
        self._rng = random.Random(seed)
        self._shared = self._text.take(
            self._rng.randrange(len(self._text.docs)), workload.shared_prefix_tokens
        )
        self._order = list(range(len(self._text.docs)))
        self._rng.shuffle(self._order)
        self._span, self._prompt_dist = workload.prompt_tokens, workload.prompt_dist
        # Fail here, before any cell, when the longest prompt cannot be made from the text.
        self._text.take(0, self._span[1] - len(self._shared))
        self._lengths: list[int] = []
        self._prompts: dict[tuple[int, int], list[int]] = {}  # built once, replayed by every arm and round

    def request_id(self, client: int, i: int) -> int:
        if not 0 <= client < self.width or i < 0:
            raise ValueError(f"no request ({client}, {i}) in a stream {self.width} clients wide")
        return i * self.width + client

    def length(self, request_id: int) -> int:
        if self._data is not None:
            return len(self._data.prompt(request_id))
        while len(self._lengths) <= request_id:
            dist = self._prompt_dist
            self._lengths.append(dist.draw(self._rng) if dist else self._rng.randint(*self._span))
        return self._lengths[request_id]

    def new_tokens(self, request_id: int) -> int:
        """How many tokens request `request_id` asks for: its dataset record's output
        length, a draw from max_new_tokens' distribution (its own seeded sequence), or
        max_new_tokens; never more than max_new_tokens (--quick lowers it)."""
        if self._data is not None:
            return min(self._data.new_tokens(request_id), self._max_new)
        if self._new_dist is None:
            return self._max_new
        while len(self._new_tokens) <= request_id:
            self._new_tokens.append(self._new_dist.draw(self._new_rng))
        return min(self._new_tokens[request_id], self._max_new)

    def prompt(self, client: int, i: int) -> list[int]:
        return self.prompt_of(self.request_id(client, i))

    def prompt_of(self, request_id: int, length: int | None = None) -> list[int]:
        """Request `request_id`'s prompt: the seeded length unless `length` is given (the
        whole prompt, shared prefix included, which must leave it tokens of its own)."""
        if request_id < 0:
            raise ValueError(f"request ids are >= 0, got {request_id}")
        if self._data is not None:
            return self._data.prompt(request_id)
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
