"""Asking a server for exactly the tokens the workload asks for, and what ran a run.

- Fair lengths: every arm must generate the same number of tokens per request, or batch
  occupancy differs between arms. An OpenAI-compatible server is sent `ignore_eos` and
  `min_tokens` (vLLM's and SGLang's names) and a `logit_bias` banning the checkpoint's
  end-of-sequence ids (-1e9: never chosen), which is what mlx_lm.server (0.32) takes: it
  ignores the first two (unknown fields), so it stops only at max_tokens. A request that still
  comes back short is stored with its asked count (requests.asked_tokens), never hidden.
- Versions: the package an in-process runtime or a started server runs on
  (`package_version`), and a server's own word on its version (`GET /version`, as vLLM
  answers it, else the `system_fingerprint` its answers carry).
This module holds no request loop; openai.py and server.py call it.
"""

from __future__ import annotations

import http.client
import json
from importlib import metadata
from pathlib import Path

NEVER = -1e9  # an additive logit bias no real logit survives (finite: JSON has no infinity)
VERSION_PROBE_S = 2.0


def eos_token_ids(checkpoint: Path) -> tuple[int, ...]:
    """The end-of-sequence ids a server stops at: config.json's eos_token_id and the
    tokenizer's eos_token, as mlx-lm collects them."""
    ids: set[int] = set()
    try:
        config = json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    eos = config.get("eos_token_id")
    ids.update(int(e) for e in (eos if isinstance(eos, list) else [eos]) if isinstance(e, int))
    try:
        tok = json.loads((checkpoint / "tokenizer_config.json").read_text()).get("eos_token")
        vocab = json.loads((checkpoint / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return tuple(sorted(ids))
    tok = tok.get("content") if isinstance(tok, dict) else tok
    for added in vocab.get("added_tokens") or []:
        if tok is not None and added.get("content") == tok and isinstance(added.get("id"), int):
            ids.add(added["id"])
    model_vocab = (vocab.get("model") or {}).get("vocab")
    if isinstance(model_vocab, dict) and isinstance(model_vocab.get(tok), int):
        ids.add(model_vocab[tok])
    return tuple(sorted(ids))


def exact_length_fields(max_new_tokens: int) -> dict:
    """Request fields that ask an OpenAI-compatible server (vLLM, SGLang) for exactly
    max_new_tokens: do not stop at end-of-sequence, and not before max_new_tokens."""
    return {"ignore_eos": True, "min_tokens": int(max_new_tokens)}


def banned_eos_bias(eos_ids: tuple[int, ...]) -> dict:
    """mlx_lm.server's way to the same end: the end-of-sequence ids can never be chosen."""
    return {"logit_bias": {str(i): NEVER for i in eos_ids}} if eos_ids else {}


def package_version(distribution: str) -> str | None:
    """'mlx-lm 0.32.2' for an installed distribution; None when it is not installed."""
    try:
        return f"{distribution} {metadata.version(distribution)}"
    except metadata.PackageNotFoundError:
        return None


def probe_server_version(host: str, port: int | None, https: bool, root: str) -> str | None:
    """A server's version from GET <root>/version ({"version": ...}, vLLM's answer);
    None when it has no such endpoint or does not answer within VERSION_PROBE_S."""
    kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
    conn = kind(host, port, timeout=VERSION_PROBE_S)
    try:
        conn.request("GET", root.rstrip("/") + "/version")
        resp = conn.getresponse()
        body = resp.read(4096)
        if resp.status != 200:
            return None
        answer = json.loads(body)
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()
    version = answer.get("version") if isinstance(answer, dict) else None
    return str(version)[:100] if isinstance(version, (str, int, float)) and str(version) else None
