"""The seeded workload: which prompt token ids each closed-loop client sends, in order.

Prompts come from held-out text (the checkpoint's heldout.jsonl, or a JSONL file of
{"id", "text"} objects) tokenised with the checkpoint's tokenizer.json. Every prompt
length is drawn from the inclusive range with `random.Random(seed)`; a text too short
for its length is joined with the texts that follow it. With shared_prefix_tokens = N,
every prompt starts with the same N tokens, taken from one held-out text chosen by the
seed. Client c always gets the same list, so every arm and every concurrency level
replays the same prompts in the same order. This module does not talk to the engine.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer

from .declaration import Workload


class WorkloadError(Exception):
    """Unusable prompt source; the message names the file (and line)."""


def read_texts(path: Path) -> list[str]:
    texts = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"{path}: cannot read prompts: {e}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkloadError(f"{path}:{number}: not a JSON object ({e.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise WorkloadError(f"{path}:{number}: expected an object with a string 'text'")
        texts.append(record["text"])
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
            raise WorkloadError(f"{self.source}: a {n}-token prompt needs more text than the "
                                f"whole file holds ({self.total} tokens)")
        out: list[int] = []
        doc = start
        while len(out) < n:
            out.extend(self.docs[doc % len(self.docs)][: n - len(out)])
            doc += 1
        return out


def build_prompts(workload: Workload, seed: int, checkpoint: Path, clients: int) -> list[list[list[int]]]:
    """prompts[client][i] = the token ids of client's i-th request."""
    source = prompt_source(workload, checkpoint)
    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    encoded = tokenizer.encode_batch(read_texts(source), add_special_tokens=False)
    stream = _TokenStream([e.ids for e in encoded], source)
    rng = random.Random(seed)
    shared = stream.take(rng.randrange(len(stream.docs)), workload.shared_prefix_tokens)
    order = list(range(len(stream.docs)))
    rng.shuffle(order)
    low, high = workload.prompt_tokens
    prompts, k = [], 0
    for _ in range(clients):
        mine = []
        for _ in range(workload.requests_per_client):
            length = rng.randint(low, high)
            mine.append(shared + stream.take(order[k % len(order)], length - len(shared)))
            k += 1
        prompts.append(mine)
    return prompts
