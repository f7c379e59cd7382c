"""`runner build` (mkdocs build --strict into site/) and `runner audit` (every claim of
every post with its recomputed value and verdict; exit 1 on any failure).

Bad input (a missing mkdocs.yml, an invalid config) is one readable line on stderr and
exit code 2, never a traceback. Rendering itself lives in `post.py`.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from datetime import timezone
from pathlib import Path
from types import SimpleNamespace

from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort, ConfigurationError, PluginError
from mkdocs.utils.meta import get_data

from runner.publish.sql.reader import QueryError, Reader
from runner.publish.site.across import plain
from runner.publish.site.frontmatter import experiments_of, is_data_post
from runner.publish.stats.intervals import rounds_for_half_width
from runner.publish.site.plugin import database_of, line_offset
from runner.publish.site.post import render_post
from runner.store.store import StoreError


def add_build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-file", "-f", default="mkdocs.yml", help="mkdocs config (default mkdocs.yml)")
    p.add_argument("--site-dir", "-d", default=None, help="output folder (default: the config's site_dir)")
    p.add_argument(
        "--no-strict",
        action="store_true",
        help="render gaps as 'not measured' and failed claims as marked, without failing",
    )


def add_audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-file", "-f", default="mkdocs.yml", help="mkdocs config (default mkdocs.yml)")
    p.add_argument("--database", default=None, help="DuckDB file (default: the plugin's `database`)")
    p.add_argument(
        "--aa",
        metavar="EXPERIMENT",
        default=None,
        help="instead: the A/A check of EXPERIMENT (made by runner run NAME --aa ARM, or declaring two "
        "identical arms): "
        "the share of cells whose interval includes no change",
    )
    p.add_argument(
        "--capacity",
        metavar="EXPERIMENT",
        default=None,
        help="instead: every arm's capacity under the declared SLO on a rate sweep, with its "
        "interval and the attainment at each rate (exit 1 when there is none to compute)",
    )
    p.add_argument(
        "--attainment",
        type=float,
        default=0.9,
        help="with --capacity: the share of requests that must meet the SLO (default 0.9)",
    )
    p.add_argument(
        "--predict",
        metavar="EXPERIMENT",
        default=None,
        help="instead: the pass-cost model of EXPERIMENT held out, each concurrency predicted "
        "from the others (exit 1 when a held-out error exceeds 20%%)",
    )
    p.add_argument(
        "--chip",
        default=None,
        help="judge every claim on this chip's newest data instead of each post's home "
        "(the exit code then reflects that chip)",
    )


def _config(args, **overrides):
    path = Path(args.config_file)
    if not path.is_file():
        raise ConfigurationError("no such mkdocs config file")
    return load_config(str(path), **overrides)


def main_build(args) -> int:
    return build_site(Path(args.config_file), args.site_dir, strict=not args.no_strict)


def build_site(config_file: Path, site_dir: str | Path | None = None, strict: bool = True) -> int:
    """Load the measurement folders into the database, then mkdocs build. Unless
    SOURCE_DATE_EPOCH is already set, it is set to the newest finish time of any complete
    run, so the dates mkdocs writes (sitemap lastmod, its gzip header) come from the data,
    never from the clock of the machine that builds: the same data, the same bytes."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)-7s %(message)s")
    try:
        overrides = {"strict": strict}
        if site_dir:
            overrides["site_dir"] = str(site_dir)
        cfg = _config(SimpleNamespace(config_file=str(config_file)), **overrides)
        db = database_of(cfg)
        _sync(db, "runner build")
        _source_date_epoch(db)
        build(cfg)
    except (ConfigurationError, PluginError, StoreError) as e:
        print(f"runner build: {config_file}: {e}", file=sys.stderr)
        return 2
    except Abort as e:
        print(f"runner build: {e}", file=sys.stderr)
        return 1
    print(f"runner build: site written to {cfg.site_dir}")
    return 0


def _measured(reader: Reader, experiment: str) -> None:
    """An experiment named on the command line that has no complete runs is bad input."""
    if reader.quick_choice(experiment) is None:
        raise QueryError(f"experiment {experiment!r} has no complete runs in {reader.path}")


def _sync(db: Path, who: str) -> None:
    from runner.store.measurements import sync_database

    loaded = sync_database(db)
    if loaded is not None and loaded.rebuilt:
        print(f"{who}: {loaded.describe()}")


def _source_date_epoch(db: Path) -> None:
    if "SOURCE_DATE_EPOCH" in os.environ:
        print(f"runner build: SOURCE_DATE_EPOCH={os.environ['SOURCE_DATE_EPOCH']} (already set)")
        return
    if not db.is_file():
        return
    with Reader(db) as reader:
        newest = reader.run_summary().newest
    if newest is not None:
        epoch = int(newest.replace(tzinfo=timezone.utc).timestamp())
        os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
        print(
            f"runner build: SOURCE_DATE_EPOCH={epoch} ({newest:%Y-%m-%d %H:%M} UTC, the newest "
            "run's finish time), so every machine builds the same site"
        )


def _database(cfg, args) -> Path:
    return Path(args.database) if args.database else database_of(cfg)


NARROW = 0.25  # a bound nearer no change than this share of the width holds narrowly


def rounds_plan(v) -> str:
    """For a claim that fails or holds narrowly: the rounds that would halve its interval's
    width, from the measured spread ("" for the others and for a figure without interval)."""
    m = v.measured
    if m.lo is None or m.hi is None or m.hi <= m.lo or math.isinf(m.hi - m.lo):  # an open bound: no width
        return ""
    point = m.no_change()
    narrow = point is not None and min(abs(m.lo - point), abs(m.hi - point)) < NARROW * (m.hi - m.lo)
    if v.ok and not narrow:
        return ""
    rounds = rounds_for_half_width(m.n_rounds)
    why = "fails" if not v.ok else "holds narrowly"
    if rounds is None:
        return f"{why}; no round count up to 1000 halves the interval of {m.n_rounds} rounds"
    return (
        f"{why}: {rounds} rounds instead of {m.n_rounds} would halve the interval's width "
        f"({m.format(m.hi - m.lo) if m.kind != 'change' else f'{(m.hi - m.lo) * 100:.1f} points'} now), "
        "the rounds' spread taken as measured"
    )


def main_audit(args) -> int:
    try:
        cfg = _config(args)
    except ConfigurationError as e:
        print(f"runner audit: {args.config_file}: {e}", file=sys.stderr)
        return 2
    docs, db, failed, posts = Path(cfg.docs_dir), _database(cfg, args), 0, 0
    try:
        _sync(db, "runner audit")
        if getattr(args, "aa", None):
            from runner.publish.stats.aa import report

            with Reader(db) as reader:
                lines, _ = report(reader, args.aa)
            print("\n".join(lines))
            return 0
        if getattr(args, "capacity", None):
            from runner.publish.site import capacity_audit

            if not 0 < args.attainment <= 1:
                print(
                    f"runner audit: --attainment is a share in (0, 1], got {args.attainment}", file=sys.stderr
                )
                return 2
            with Reader(db) as reader:
                _measured(reader, args.capacity)
                lines, found = capacity_audit.audit_lines(reader, args.capacity, args.attainment)
            print("\n".join(lines))
            return 0 if found else 1
        if getattr(args, "predict", None):
            from runner.publish.stats.predict import audit_lines

            with Reader(db) as reader:
                _measured(reader, args.predict)
                lines, over = audit_lines(reader, args.predict)
            print("\n".join(lines))
            return 1 if over else 0
    except (StoreError, QueryError) as e:
        print(f"runner audit: {e}", file=sys.stderr)
        return 2
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
        post = render_post(
            body,
            meta,
            key=key,
            db_path=db,
            line_offset=line_offset(source, body),
            declarations=docs / "experiments",
            judge_chip=args.chip,
        )
        where = f"judged on {args.chip!r}'s newest data" if args.chip else f"home: {post.home_label}"
        print(f"== {key} (experiments {', '.join(experiments_of(meta)[0]) or '?'}; {where})")
        for v in post.verdicts:
            print(
                f"  {key}:{v.line or 1}  {v.stated!r:>10}  measured {v.measured.text():>12}  "
                f"95% [{v.measured.interval_text() or 'none'}]  "
                f"{'ok  ' if v.ok else 'FAIL'}  {v.reason}"
            )
            plan = rounds_plan(v)
            if plan:
                print(f"      {plan}")
            for col in post.columns:
                other = col.verdicts.get(v.number)
                print(
                    f"      on {col.label}: {other.measured.text() if other else 'not measured'}  "
                    f"[{other.measured.interval_text() if other else ''}]  {plain(other)}"
                )
        verdict_msgs = {v.failure_message() for v in post.verdicts}
        for f in post.failures:
            if f.message not in verdict_msgs:
                print(f"  {f.describe()}  FAIL")
        failed += len(post.failures)
    print(f"runner audit: {posts} post(s), {failed} failure(s)")
    return 1 if failed else 0
