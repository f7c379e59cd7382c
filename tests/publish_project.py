"""Shared helpers for the generator's tests: tiny real mkdocs projects (their own
mkdocs.yml, posts and database) built in-process.

- Test files import what they use: `from publish_project import build_site, post_text`.
- The session-wide fixture database is `conftest.py`'s `fixture_db` fixture.
"""

from __future__ import annotations

import logging
import textwrap
from dataclasses import dataclass
from pathlib import Path

from fixture_db import EXPERIMENT
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

from runner.publish.site.plugin import database_of
from runner.store.measurements import sync_database

POST = """\
---
date: 2026-11-20
experiment: {experiment}
updates:
  - date: 2026-11-21
    text: "Checked <script>alert(1)</script> and **bold** text."
---
# Speculative decoding on the fixture

Solo on M1, MTP is {{{{ claim("{stated}",
    gain("decode_tps", arm="on", base="off", concurrency=1, chip="Fixture M1")) }}}} on decode.

{{{{ regime_table(["prefill_tps", "decode_tps", "aggregate_tps",
    "drafted_passes", "acceptance", "state_mb"]) }}}}

{{{{ chart("decode_tps", x="concurrency") }}}}

{{{{ drafted_by_width_chart() }}}}

The author's own <kbd>markup</kbd> stays markup.
"""


def post_text(stated: str = "+25%", experiment: str = EXPERIMENT) -> str:
    return POST.format(stated=stated, experiment=experiment)


MKDOCS_YML = """\
site_name: fixture site
docs_dir: docs
theme:
  name: material
  font: false
plugins:
  - blog
  - bothrows:
      database: {database}
markdown_extensions:
  - admonition
  - tables
  - toc:
      permalink: true
"""


@dataclass
class BuildResult:
    ok: bool
    warnings: list[str]
    site: Path


def write_project(root: Path, database: Path, posts: dict[str, str]) -> Path:
    (root / "docs" / "blog" / "posts").mkdir(parents=True, exist_ok=True)
    (root / "docs" / "index.md").write_text("# Fixture site\n")
    (root / "docs" / "blog" / "index.md").write_text("# Blog\n")
    for name, text in posts.items():
        (root / "docs" / "blog" / "posts" / name).write_text(text)
    config = root / "mkdocs.yml"
    config.write_text(MKDOCS_YML.format(database=database))
    return config


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def build_site(config_file: Path, *, strict: bool = True, site: Path | None = None) -> BuildResult:
    site = site or config_file.parent / "site"
    handler = _Collect()
    logging.getLogger("mkdocs").addHandler(handler)
    try:
        cfg = load_config(str(config_file), strict=strict, site_dir=str(site))
        sync_database(database_of(cfg))  # as `runner build` does: the folders, if any
        try:
            build(cfg)
            ok = True
        except Abort:
            ok = False
    finally:
        logging.getLogger("mkdocs").removeHandler(handler)
    return BuildResult(ok, handler.messages, site)


def dedent(text: str) -> str:
    return textwrap.dedent(text)
