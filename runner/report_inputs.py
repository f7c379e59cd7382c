"""What `make report` works on: the mkdocs config's docs_dir and database, the
experiments the site's posts name (front matter `experiment:` or `experiments:`, read
the way the generator reads them), and their declarations in `<docs_dir>/experiments/`.

Every problem (a post naming experiments wrongly, an experiment without a declaration,
an invalid declaration) is collected and raised together as one ReportError whose lines
name the file and the field. This module reads files only; it measures nothing.
"""

from __future__ import annotations

from pathlib import Path


class ReportError(Exception):
    """Bad input (posts, declarations, config, unreadable data): one readable message."""


def site_paths(config_file: Path) -> tuple[Path, Path]:
    """The config's docs_dir and the DuckDB file its `bothrows` plugin reads."""
    from mkdocs.config import load_config
    from mkdocs.exceptions import ConfigurationError

    if not config_file.is_file():
        raise ReportError(f"{config_file}: no such mkdocs config file")
    try:
        cfg = load_config(str(config_file))
    except ConfigurationError as e:
        raise ReportError(f"{config_file}: {e}") from None
    if cfg.plugins.get("bothrows") is None:
        raise ReportError(f"{config_file}: plugins: the `bothrows` plugin is not configured")
    from runner.publish.site.plugin import database_of

    return Path(cfg.docs_dir), database_of(cfg)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def named_experiments(docs_dir: Path) -> dict[str, list[tuple[Path, str]]]:
    """Experiment name -> (post, front matter field) naming it, over every page, sorted."""
    from mkdocs.utils.meta import get_data

    from runner.publish.site.frontmatter import experiments_of, is_data_post

    named: dict[str, list[tuple[Path, str]]] = {}
    problems = []
    for path in sorted(docs_dir.rglob("*.md")):
        try:
            _, meta = get_data(path.read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError) as e:
            problems.append(f"{_shown(path)}: cannot be read: {e}")
            continue
        if not is_data_post(meta):
            continue
        names, bad = experiments_of(meta)
        problems += [f"{_shown(path)}: {p}" for p in bad]
        field = "experiments" if "experiments" in meta else "experiment"
        for name in names:
            named.setdefault(name, []).append((path, field))
    if problems:
        raise ReportError("\n  ".join(["posts name experiments wrongly:", *problems]))
    return dict(sorted(named.items()))


def declarations(named: dict[str, list[tuple[Path, str]]], folder: Path) -> dict[str, tuple[Path, object]]:
    """Experiment name -> (declaration path, Experiment); every problem in one error."""
    from runner.experiments.declaration import DeclarationError, load

    found, problems = {}, []
    for name, posts in named.items():
        path = folder / f"{name}.toml"
        if not path.is_file():
            problems += [
                f"{_shown(post)}: front matter field '{field}': experiment {name!r} has "
                f"no declaration ({_shown(path)} does not exist)"
                for post, field in posts
            ]
            continue
        try:
            found[name] = (path, load(path))
        except DeclarationError as e:
            problems += [f"{path} is not a valid experiment declaration:", *(f"  {i}" for i in e.issues)]
    if problems:
        raise ReportError("\n  ".join(["the posts' experiments cannot be measured:", *problems]))
    return found
