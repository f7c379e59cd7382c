"""Writes the shipped request dataset (reports/experiments/data/heldout-requests.jsonl):
plain {"prompt", "output_tokens"} lines made from tiny's held-out corpus, so that
dataset workloads run offline.

Each held-out text (in a seeded order, the first COUNT) is cut at a seeded token: the
text before the cut is the prompt (16 to 256 tokens, lognormal around 64), and the
number of tokens after it, at most 256, is the request's output length (what the
text's author went on to write). Run: `python -m runner.experiments.workloads.make_dataset`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer

from runner.engine.checkpoint import resolve_checkpoint
from runner.experiments.workloads.lengths import LengthDist
from runner.prompts import read_prompts

OUT = Path("reports/experiments/data/heldout-requests.jsonl")
COUNT, SEED = 64, 28
PROMPT = LengthDist("lognormal", 16, 256, 64.0, 0.6)
MAX_OUTPUT = 256


def main(out: Path = OUT) -> None:
    tiny = resolve_checkpoint("tiny")
    tokenizer = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    texts = [p.text for p in read_prompts(tiny / "heldout.jsonl")]
    rng = random.Random(SEED)
    rng.shuffle(texts)
    lines = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        cut = PROMPT.draw(rng)
        if len(ids) <= cut + 1:
            continue
        prompt = tokenizer.decode(ids[:cut], skip_special_tokens=False)
        lines.append(json.dumps({"prompt": prompt, "output_tokens": min(MAX_OUTPUT, len(ids) - cut)}))
        if len(lines) == COUNT:
            break
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} requests to {out}")


if __name__ == "__main__":
    main()
