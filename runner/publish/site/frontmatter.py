"""What a post's front matter and path say, read the same way by every caller.

- Which experiments a post names (`experiment:` or `experiments: [a, b]`), with the
  problems of a malformed field; whether it is a data post at all.
- What the experiment's declaration says that a post needs (its arms in file order, the
  first being the default base, its model, and the band within which a change is
  "level", `equivalence`), when the declaration is readable here.
- Where a post's downloads go in the site.
- Used by `post.py`, the plugin, `runner audit` and `make report` (`report_inputs.py`);
  it renders and queries nothing.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from runner.publish.stats.verdicts import DEFAULT_BAND, parse_band


def downloads_folder(src_uri: str) -> str:
    stem = src_uri[:-3] if src_uri.endswith(".md") else src_uri
    return "downloads/" + re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-")


def experiments_of(meta: dict) -> tuple[list[str], list[str]]:
    """The post's experiments (front matter `experiments:` or `experiment:`) and problems."""
    many, one = meta.get("experiments"), meta.get("experiment")
    if many is not None:
        if not isinstance(many, list) or not many or not all(isinstance(e, str) and e for e in many):
            return [], ["front matter field 'experiments' must be a non-empty list of experiment names"]
        return list(dict.fromkeys(many)), []
    if not isinstance(one, str) or not one:
        return [], ["front matter field 'experiment' must name an experiment"]
    return [one], []


def is_data_post(meta: dict) -> bool:
    return "experiment" in meta or "experiments" in meta


def declaration_doc(declarations: Path | None, experiment: str) -> dict | None:
    """The experiment's declaration as parsed TOML; None when it is not readable here."""
    path = declarations / f"{experiment}.toml" if declarations else None
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, tomllib.TOMLDecodeError):
        return None


def declared(declarations: Path | None, experiment: str) -> tuple[tuple[str, ...], str]:
    """The arms of the experiment's declaration in file order (the default base is the
    first) and its model; ((), experiment) when the declaration is not readable here."""
    doc = declaration_doc(declarations, experiment)
    if doc is None:
        return (), experiment
    arms, model = doc.get("arms", {}), doc.get("model", experiment)
    return (tuple(arms) if isinstance(arms, dict) else ()), str(model)


def declared_band(declarations: Path | None, experiment: str) -> float:
    """The declaration's `equivalence` as a fraction (default 10%; the declaration's own
    check refuses a malformed one before anything is measured)."""
    doc = declaration_doc(declarations, experiment) or {}
    return parse_band(doc.get("equivalence", "")) or DEFAULT_BAND
