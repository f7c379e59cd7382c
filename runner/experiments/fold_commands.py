"""The `runner fold` verb: a cut-off run's one-cell measurement folders folded into one
(the work is runner/store/fold.py's). Folders a post names (its `data:` pin, in any
Markdown file under --posts) are left as they are. Bad input is one readable line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.experiments.commands import DEFAULT_DB, _err

POSTS = Path("reports")


def add_fold_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Fold the one-cell measurement folders a cut-off run left (same experiment, chip, "
        "code version and declaration) into one folder, as a run that ends writes it."
    )
    p.add_argument("experiment", nargs="?", help="only this experiment's folders (default: every experiment)")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"database (default {DEFAULT_DB})")
    p.add_argument(
        "--posts",
        type=Path,
        default=POSTS,
        help=f"folder of the posts whose pinned folders stay as they are (default {POSTS})",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would fold, change nothing")


def named_in_posts(posts: Path):
    """Whether some Markdown file under `posts` mentions a folder name (a pin names a
    folder in full, and folder names are unique)."""
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(posts.rglob("*.md"))]
    return lambda name: any(name in t for t in texts)


def main_fold(args: argparse.Namespace) -> int:
    from runner.store import measurements
    from runner.store.cell_folders import remove_folder
    from runner.store.fold import fold_group, plan_fold
    from runner.store.store import Store, StoreError

    root = measurements.folder_of(args.db)
    if not root.is_dir():
        _err(f"error: {root}: no measurement folders beside the database {args.db}")
        return 2
    if not args.posts.is_dir():
        _err(f"error: --posts {args.posts}: not a folder")
        return 2
    try:
        plan = plan_fold(root, args.experiment, named_in_posts(args.posts))
        if args.experiment is not None and args.experiment not in plan.experiments:
            _err(f"error: no measurement folder under {root} holds experiment {args.experiment!r}")
            return 2
        for name in plan.pinned:
            print(f"kept {name}: a post under {args.posts} names it")
        if not plan.groups and not plan.leftovers:
            scope = f"of {args.experiment} " if args.experiment else ""
            alike = "an experiment, chip, code version and declaration"
            print(f"nothing to fold: no two one-cell folders {scope}share {alike}")
            return 0
        if args.dry_run:
            for folder, holder in plan.leftovers:
                print(f"would remove {folder.name}: its run is already in {holder}")
            for g in plan.groups:
                print(f"would fold {g.describe()}: {g.folders[0].name} .. {g.folders[-1].name}")
            return 0
        measurements.sync_database(args.db)  # the database must hold every folder's runs
        with Store.open(args.db) as st:  # held throughout: no run writes cell folders meanwhile
            for folder, holder in plan.leftovers:
                remove_folder(folder)
                print(f"removed {folder.name}: its run is already in {holder}")
            for g in plan.groups:
                folded = fold_group(st, root, g)
                print(f"folded {g.describe()} into {folded.name} ({len(g.run_ids)} runs)")
    except StoreError as e:
        _err(f"error: {e}")
        return 2
    return 0
