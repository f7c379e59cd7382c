"""The `bothrows` mkdocs plugin: renders every post that names an `experiment` (or
`experiments`), swaps its placeholder tokens for HTML after Markdown, ships plotly.min.js,
our CSS and JS and each post's downloads into the site, lists every post with its
headline pair where a page holds `<!-- bothrows:posts -->`, and reports every failure
together at the end of the build.

In strict mode (`mkdocs build --strict`, `runner build`) each failure is a warning, so
mkdocs aborts after the build as it does for its own warnings; without strict mode
the page still renders, with "not measured" rows and failed claims marked.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import plotly
from mkdocs.config import config_options as c
from mkdocs.config.base import Config
from mkdocs.plugins import BasePlugin, get_plugin_logger
from mkdocs.structure.files import File, Files

from runner.publish.site.frontmatter import is_data_post
from runner.publish.site.post import RenderedPost, render_post
from runner.publish.site.provenance import write_downloads
from runner.publish.blocks.templating import ASSETS_DIR, OVERRIDES_DIR, render_block

log = get_plugin_logger("bothrows")
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PLOTLY_URI = "assets/bothrows/plotly.min.js"
CSS_URI = "assets/bothrows/bothrows.css"
JS_URI = "assets/bothrows/bothrows.js"
EXCERPT_SEPARATOR = "<!-- more -->"
POSTS_MARKER = "<!-- bothrows:posts -->"  # a page holding it lists every post with its pair
_TOKEN = re.compile(r"(?P<tok>BOTHROWS[0-9A-F]{8}N\d{4}Z)")
_BLOCK_TOKEN = re.compile(r"<p>(?P<tok>BOTHROWS[0-9A-F]{8}N\d{4}Z)</p>")


DEFAULT_DATABASE = "reports/data/runs.duckdb"


class BothrowsConfig(Config):
    database = c.Type(str, default=DEFAULT_DATABASE)


def line_offset(source: str, body: str) -> int:
    """Lines before the body in the source file (the front matter), so that failures name
    file lines, not body lines."""
    return source[: len(source) - len(body)].count("\n") if source.endswith(body) else 0


def database_of(config) -> Path:
    """The DuckDB file a loaded mkdocs config's `bothrows` plugin reads (relative paths
    from the config file's folder): the one place the database path is resolved."""
    plugin = config.plugins.get("bothrows")
    db = Path(plugin.config.database if plugin else DEFAULT_DATABASE)
    return db if db.is_absolute() else Path(config.config_file_path or ".").resolve().parent / db


class BothrowsPlugin(BasePlugin[BothrowsConfig]):
    def on_config(self, config):
        self.db_path = database_of(config)
        self.rendered: dict[str, RenderedPost] = {}
        self.pages: dict[str, str] = {}  # token -> src_uri of the page that owns it
        self.listed: dict[str, tuple[str, str, str]] = {}  # post src_uri -> (date, title, url)
        # our theme override goes after the author's custom_dir, before the theme itself
        # (on_config runs again on every `mkdocs serve` rebuild: insert once)
        dirs = config.theme.dirs
        if str(OVERRIDES_DIR) not in dirs:
            dirs.insert(1 if config.theme.custom_dir else 0, str(OVERRIDES_DIR))
        return config

    def on_files(self, files: Files, config):
        for f in list(files):
            if Path(f.abs_src_path or "").resolve() == self.db_path.resolve() or f.src_uri.endswith(
                (".duckdb", ".duckdb.wal")
            ):
                files.remove(f)
        files.append(File.generated(config, PLOTLY_URI, abs_src_path=str(PLOTLY_JS)))
        files.append(File.generated(config, CSS_URI, abs_src_path=str(ASSETS_DIR / "bothrows.css")))
        files.append(File.generated(config, JS_URI, abs_src_path=str(ASSETS_DIR / "bothrows.js")))
        return files

    def on_page_markdown(self, markdown, page, config, files):
        meta = page.meta or {}
        if not is_data_post(meta):
            return markdown
        key = page.file.src_uri
        try:
            source = Path(page.file.abs_src_path).read_text(encoding="utf-8-sig")
        except OSError:
            source = ""
        result = render_post(
            markdown,
            meta,
            key=key,
            db_path=self.db_path,
            page_url=page.url,
            line_offset=line_offset(source, markdown),
            declarations=Path(config.docs_dir) / "experiments",
        )
        self.rendered[key] = result
        for tok in result.blocks:
            self.pages[tok] = key
        # the blog's excerpt of a post without a separator is the whole post; end it
        # before the provenance and audit sections, whose links only work on the post
        if EXCERPT_SEPARATOR not in result.markdown:
            return result.markdown.replace(
                "\n## Provenance\n", f"\n{EXCERPT_SEPARATOR}\n\n## Provenance\n", 1
            )
        return result.markdown

    def _swap(self, html: str, owner: str | None) -> str:
        """Tokens of the page's own post become their HTML; tokens of other posts (the
        blog's excerpts) become plain text, since their links only work on the post."""
        if not self.pages or "BOTHROWS" not in html:
            return html

        def replace(m: re.Match) -> str:
            tok = m.group("tok")
            post = self.rendered.get(self.pages.get(tok, ""))
            if post is None:
                return m.group(0)
            return post.blocks[tok] if self.pages[tok] == owner else post.inline_text.get(tok, "")

        html = _BLOCK_TOKEN.sub(replace, html)
        return _TOKEN.sub(replace, html)

    def on_page_content(self, html, page, config, files):
        if page.file.src_uri in self.rendered:
            day = str((page.meta or {}).get("date", ""))
            self.listed[page.file.src_uri] = (day, page.title or page.file.src_uri, page.url)
        return self._swap(html, page.file.src_uri)

    def on_post_page(self, output, page, config):
        if POSTS_MARKER in output:  # every post is rendered by now: list them with their pairs
            output = output.replace(POSTS_MARKER, self._post_list(page.url))
        return self._swap(output, page.file.src_uri)

    def _post_list(self, from_url: str) -> str:
        here = from_url if from_url.endswith("/") else posixpath.dirname(from_url)
        entries = [
            (title, posixpath.relpath(url or ".", here or ".") + "/", self.rendered[key].headline)
            for key, (_, title, url) in sorted(
                self.listed.items(), key=lambda kv: (kv[1][0], kv[1][1]), reverse=True
            )
        ]
        return render_block("post_list.html", entries=entries)

    def on_post_build(self, config):
        site = Path(config.site_dir)
        for post in self.rendered.values():
            if post.downloads is not None:
                write_downloads(site, post.downloads)
        failures = sorted(
            (f for p in self.rendered.values() for f in p.failures),
            key=lambda f: (f.path, f.line or 0, f.message),
        )
        for f in failures:
            log.warning(f.describe())
        if failures:
            log.warning(f"{len(failures)} problem(s) in data-bearing posts (listed above)")
