"""`runner build` (mkdocs build --strict into site/) and `runner audit` (every claim of
every post with its recomputed value and verdict; exit 1 on any failure).

Bad input (a missing mkdocs.yml, an invalid config) is one readable line on stderr and
exit code 2, never a traceback. Rendering itself lives in `post.py`.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort, ConfigurationError, PluginError
from mkdocs.utils.meta import get_data

from runner.publish.plugin import line_offset
from runner.publish.across import plain
from runner.publish.post import experiments_of, is_data_post, render_post


def add_build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-file", "-f", default="mkdocs.yml", help="mkdocs config (default mkdocs.yml)")
    p.add_argument("--site-dir", "-d", default=None, help="output folder (default: the config's site_dir)")
    p.add_argument("--no-strict", action="store_true",
                   help="render gaps as 'not measured' and failed claims as marked, without failing")


def add_audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-file", "-f", default="mkdocs.yml", help="mkdocs config (default mkdocs.yml)")
    p.add_argument("--database", default=None, help="DuckDB file (default: the plugin's `database`)")
    p.add_argument("--chip", default=None,
                   help="judge every claim on this chip's newest data instead of each post's home "
                        "(the exit code then reflects that chip)")


def _config(args, **overrides):
    path = Path(args.config_file)
    if not path.is_file():
        raise ConfigurationError("no such mkdocs config file")
    return load_config(str(path), **overrides)


def main_build(args) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)-7s %(message)s")
    try:
        overrides = {"strict": not args.no_strict}
        if args.site_dir:
            overrides["site_dir"] = args.site_dir
        cfg = _config(args, **overrides)
        build(cfg)
    except (ConfigurationError, PluginError) as e:
        print(f"runner build: {args.config_file}: {e}", file=sys.stderr)
        return 2
    except Abort as e:
        print(f"runner build: {e}", file=sys.stderr)
        return 1
    print(f"runner build: site written to {cfg.site_dir}")
    return 0


def _database(cfg, args) -> Path:
    if args.database:
        return Path(args.database)
    plugin = cfg.plugins.get("bothrows")
    db = Path(plugin.config.database if plugin else "reports/data/runs.duckdb")
    return db if db.is_absolute() else Path(cfg.config_file_path).resolve().parent / db


def main_audit(args) -> int:
    try:
        cfg = _config(args)
    except ConfigurationError as e:
        print(f"runner audit: {args.config_file}: {e}", file=sys.stderr)
        return 2
    docs, db, failed, posts = Path(cfg.docs_dir), _database(cfg, args), 0, 0
    for path in sorted(docs.rglob("*.md")):
        source = path.read_text(encoding="utf-8-sig")
        try:
            body, meta = get_data(source)
        except Exception as e:  # a broken front matter is that file's failure
            print(f"{path}: front matter cannot be read: {e}")
            failed += 1
            continue
        if not is_data_post(meta):
            continue
        posts += 1
        key = path.relative_to(docs).as_posix()
        post = render_post(body, meta, key=key, db_path=db, line_offset=line_offset(source, body),
                           declarations=docs / "experiments", judge_chip=args.chip)
        where = f"judged on {args.chip!r}'s newest data" if args.chip else f"home: {post.home_label}"
        print(f"== {key} (experiments {', '.join(experiments_of(meta)[0]) or '?'}; {where})")
        for v in post.verdicts:
            print(f"  {key}:{v.line or 1}  {v.stated!r:>10}  measured {v.measured.text():>12}  "
                  f"95% [{v.measured.interval_text() or 'none'}]  "
                  f"{'ok  ' if v.ok else 'FAIL'}  {v.reason}")
            for col in post.columns:
                other = col.verdicts.get(v.number)
                print(f"      on {col.label}: {other.measured.text() if other else 'not measured'}  "
                      f"[{other.measured.interval_text() if other else ''}]  {plain(other)}")
        verdict_msgs = {v.failure_message() for v in post.verdicts}
        for f in post.failures:
            if f.message not in verdict_msgs:
                print(f"  {f.describe()}  FAIL")
        failed += len(post.failures)
    print(f"runner audit: {posts} post(s), {failed} failure(s)")
    return 1 if failed else 0
