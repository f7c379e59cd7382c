"""The unseen-text prompt set: Python code from third-party packages the project installs,
which neither the checkpoints nor their drafters were trained on (training reads the
standard library only, `train/corpus.py`), for drafting measured off its training corpus.

- The packages are fixed (`PACKAGES`, all installed by `make`): their `.py` files in path
  order are cut into line-aligned chunks (`prompts.line_chunks`), an evenly spaced subset
  kept. The set was fixed before any drafter was trained against it and is never trained on.
- Versions differ between machines, so the set is not pinned by bytes: `fingerprint` (the
  packages' versions and a hash of the chosen texts) goes beside every figure measured on it.
- A package that is missing is one `PromptsError` naming it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

from .prompts import Prompt, PromptsError, line_chunks

# distribution name -> import name
PACKAGES = {
    "jinja2": "jinja2",
    "click": "click",
    "markdown": "markdown",
    "mkdocs": "mkdocs",
    "pyyaml": "yaml",
    "markdown-it-py": "markdown_it",
}
NAME = "unseen"


def package_root(import_name: str) -> Path:
    spec = importlib.util.find_spec(import_name)
    if spec is None or not spec.submodule_search_locations:
        raise PromptsError(
            f"unseen-text prompts: package {import_name!r} is not installed (run `make` to install it)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def unseen_prompts(limit: int = 300) -> list[Prompt]:
    """Up to `limit` line-aligned chunks of 1000-1600 characters, named `package/path:line`."""
    texts = []
    for import_name in PACKAGES.values():
        root = package_root(import_name)
        for f in sorted(root.rglob("*.py")):
            text = f.read_bytes().decode("utf-8", errors="ignore")
            texts.append((f"{import_name}/{f.relative_to(root).as_posix()}", text))
    return line_chunks(texts, limit=limit)


def fingerprint(prompts: list[Prompt]) -> str:
    """'jinja2 3.1.6, click 8.5.1, ...; 300 prompts sha256 1a2b3c4d5e6f'."""
    versions = []
    for dist in PACKAGES:
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist} ?")
    digest = hashlib.sha256("\0".join(p.id + "\0" + p.text for p in prompts).encode()).hexdigest()
    return f"{', '.join(versions)}; {len(prompts)} prompts sha256 {digest[:12]}"
