"""Prompt files: JSONL of {"id", "text"} objects, such as a checkpoint's heldout.jsonl.

- The one reader and writer of that format, outside `train/` so that measuring (the
  workload, benches, the demo) does not depend on the training package.
- Training writes a checkpoint's held-out prompts with `write_prompts`; the workload
  reads them, or any such file a declaration names, with `read_prompts`.
- A bad file is one `PromptsError` naming the file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


def write_prompts(prompts: list[Prompt], path: Path) -> None:
    with path.open("w") as f:
        for p in prompts:
            f.write(json.dumps({"id": p.id, "text": p.text}) + "\n")


class PromptsError(ValueError):
    """An unusable prompts file; the message names the file (and line)."""


def read_prompts(path: Path) -> list[Prompt]:
    """The prompts of a JSONL file of {"id", "text"} objects, such as a checkpoint's
    heldout.jsonl (the one reader of that format; blank lines are skipped). A record
    without an id is named by its file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise PromptsError(f"{path}: cannot read prompts: {e}") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptsError(f"{path}:{number}: not a JSON object ({e.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise PromptsError(f"{path}:{number}: expected an object with a string 'text'")
        prompts.append(Prompt(str(record.get("id", f"{path.name}:{number}")), record["text"]))
    return prompts


def line_chunks(
    named_texts: list[tuple[str, str]], min_chars: int = 1000, max_chars: int = 1600, limit: int = 300
) -> list[Prompt]:
    """Line-aligned chunks of roughly min..max characters, named `file:first_line`.

    Chunks are taken in file order; when there are more than `limit`, an evenly spaced
    subset is kept so that every file can contribute."""
    chunks: list[Prompt] = []
    for name, text in named_texts:
        buf, start_line = [], 1
        for i, line in enumerate(text.splitlines(keepends=True), start=1):
            buf.append(line)
            if sum(map(len, buf)) >= min_chars:
                body = "".join(buf)[:max_chars]
                if body.strip():
                    chunks.append(Prompt(f"{name}:{start_line}", body))
                buf, start_line = [], i + 1
    if len(chunks) > limit:
        step = (len(chunks) - 1) / max(limit - 1, 1)
        picks = sorted({round(i * step) for i in range(limit)})
        chunks = [chunks[i] for i in picks]
    return chunks
