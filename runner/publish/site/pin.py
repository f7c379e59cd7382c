"""`runner pin POST`: write a post's front matter `data:` from the measurement folders its
claims read today, so later data (the same day's re-measurement included) never changes
what it is judged on.

- The folders are those of the post's home data (home.py: each cell's earliest run up to
  its date) on every chip a claim reads, for every experiment the post names.
- Only the `data:` entry of the front matter changes; the rest of the file stays byte for
  byte. A post with a failing claim or no data is refused (exit 2), nothing written.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace
from pathlib import Path

from mkdocs.utils.meta import get_data

from runner.publish.sql.reader import QueryError, Reader
from runner.publish.site.commands import _config, _database, _sync
from runner.publish.site.frontmatter import is_data_post
from runner.publish.site.plugin import line_offset
from runner.publish.site.post import render_post
from runner.store.store import StoreError

_FRONT = re.compile(r"\A(---\s*\n)(.*?\n)(---\s*\n)", re.DOTALL)
_DATA = re.compile(r"^data:.*\n(?:[ \t]+-.*\n)*", re.MULTILINE)


def add_pin_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Pin a post's judged data to the measurement folders its claims read today."
    p.add_argument("post", type=Path, help="the post's Markdown file")
    p.add_argument("--config-file", "-f", default="mkdocs.yml", help="mkdocs config (default mkdocs.yml)")
    p.add_argument("--database", default=None, help="DuckDB file (default: the plugin's `database`)")


def with_pin(source: str, folders: list[str]) -> str:
    """The post's text with its front matter's `data:` entry set to the folders."""
    m = _FRONT.match(source)
    entry = "data:\n" + "".join(f"  - {f}\n" for f in folders)
    meta = _DATA.sub("", m.group(2))
    return source[: m.start(2)] + meta + entry + source[m.end(2) :]


def folders_read(post, db: Path) -> list[str]:
    """The home data's folders on each chip the post's claims read, per experiment."""
    unpinned = replace(post.home, data=None).cutoff()
    chips: dict[str, set[str]] = {}
    for experiment, chip, _arm, _conc in post.claim_cells:
        chips.setdefault(experiment, set()).add(chip)
    with Reader(db) as reader:
        out = set()
        for experiment, on in chips.items():
            quick = reader.quick_choice(experiment)
            out |= set(reader.judging.folders_of_chips(experiment, bool(quick), unpinned, on))
    return sorted(out)


def main_pin(args) -> int:
    from mkdocs.exceptions import ConfigurationError

    try:
        cfg = _config(args)
    except ConfigurationError as e:
        print(f"runner pin: {args.config_file}: {e}", file=sys.stderr)
        return 2
    docs, db = Path(cfg.docs_dir), _database(cfg, args)
    path = args.post
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        print(f"runner pin: {path}: cannot read the post ({getattr(e, 'strerror', None) or e})", file=sys.stderr)
        return 2
    body, meta = get_data(source)
    if not _FRONT.match(source) or not is_data_post(meta):
        print(
            f"runner pin: {path}: not a data-bearing post (front matter names no experiment)", file=sys.stderr
        )
        return 2
    try:
        _sync(db, "runner pin")
        key = path.resolve().relative_to(docs.resolve()).as_posix()
        post = render_post(
            body,
            meta,
            key=key,
            db_path=db,
            line_offset=line_offset(source, body),
            declarations=docs / "experiments",
        )
        if post.failures or post.home is None or post.home.chip_id is None:
            for f in post.failures:
                print(f"runner pin: {f.describe()}", file=sys.stderr)
            print(f"runner pin: {path}: its claims do not all hold; nothing pinned", file=sys.stderr)
            return 2
        folders = folders_read(post, db)
    except (StoreError, QueryError, ValueError) as e:
        print(f"runner pin: {path}: {e}", file=sys.stderr)
        return 2
    if not folders:
        print(f"runner pin: {path}: no claim reads a measurement folder; nothing pinned", file=sys.stderr)
        return 2
    path.write_text(with_pin(source, folders), encoding="utf-8")
    print(f"runner pin: {path}: data pinned to {len(folders)} measurement folder(s)")
    return 0
