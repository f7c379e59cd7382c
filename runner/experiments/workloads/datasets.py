"""Request datasets: `workload.prompts` naming a JSONL file of requests, not of texts.

Two forms, told apart line by line by their keys:

    ShareGPT   {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}
               ("role"/"content" keys and "user"/"assistant" roles are read too): the
               first user turn is the prompt, and the first assistant turn after it,
               tokenised, is that request's output length
    plain      {"prompt": "...", "output_tokens": 57}

(A file of {"id", "text"} lines is held-out text, read by workload.py as before.)
Every malformed line is a DatasetError naming the file, the line and the field. This
module tokenises nothing; workload.py does, with the checkpoint's tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

USER_ROLES = ("human", "user")
ASSISTANT_ROLES = ("gpt", "assistant", "chatgpt", "bard", "model")


class DatasetError(Exception):
    """A malformed request dataset: the message names the file, the line and the field."""


@dataclass(frozen=True)
class DataRequest:
    line: int  # where it is in its file, for messages
    prompt: str
    output_tokens: int | None  # plain form
    output_text: str | None  # ShareGPT form: counted once tokenised


def is_dataset(path: Path) -> bool:
    """Whether the file's first record is a request (ShareGPT or plain) rather than a text."""
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    record = json.loads(line)
                    return isinstance(record, dict) and ("conversations" in record or "prompt" in record)
    except (OSError, UnicodeDecodeError, ValueError):
        return False  # the text reader reports what is wrong with the file
    return False


def read_dataset(path: Path) -> list[DataRequest]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: cannot read the dataset: {e}") from None
    out = [_request(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
    if not out:
        raise DatasetError(f"{path}: holds no requests")
    return out


def _request(path: Path, n: int, line: str) -> DataRequest:
    def bad(field: str, why: str) -> DatasetError:
        return DatasetError(f"{path}:{n}: field {field!r}: {why}")

    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}:{n}: not a JSON object ({e.msg})") from None
    if not isinstance(record, dict):
        raise DatasetError(f"{path}:{n}: expected a JSON object, got {type(record).__name__}")
    if "conversations" in record:
        return _sharegpt(record["conversations"], n, bad)
    if "prompt" not in record:
        raise DatasetError(
            f"{path}:{n}: expected a ShareGPT record ('conversations') or a plain one "
            f"('prompt' and 'output_tokens'), got keys {sorted(record)}"
        )
    prompt, out = record["prompt"], record.get("output_tokens")
    if not isinstance(prompt, str) or not prompt.strip():
        raise bad("prompt", f"expected non-empty text, got {prompt!r:.60}")
    if isinstance(out, bool) or not isinstance(out, int) or out < 1:
        raise bad("output_tokens", f"expected a positive integer, got {out!r}")
    return DataRequest(n, prompt, out, None)


def _sharegpt(turns, n: int, bad) -> DataRequest:
    if not isinstance(turns, list):
        raise bad("conversations", f"expected a list of turns, got {type(turns).__name__}")
    prompt = None
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise bad(f"conversations[{i}]", "expected an object with 'from' and 'value'")
        role, text = turn.get("from", turn.get("role")), turn.get("value", turn.get("content"))
        if not isinstance(role, str) or not isinstance(text, str):
            raise bad(f"conversations[{i}]", "expected string 'from' and 'value' (or 'role' and 'content')")
        if prompt is None and role in USER_ROLES:
            if not text.strip():
                raise bad(f"conversations[{i}].value", "the first user turn is empty")
            prompt = text
        elif prompt is not None and role in ASSISTANT_ROLES:
            if not text.strip():
                raise bad(f"conversations[{i}].value", "the first assistant turn is empty")
            return DataRequest(n, prompt, None, text)
    raise bad("conversations", "needs a user turn followed by an assistant turn")
