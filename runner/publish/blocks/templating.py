"""The one place that touches jinja2: the sandbox that renders a post's body and the
environment that renders our own block templates from `templates/blocks/`.

A post body can call only the functions handed to it; attribute access is limited to
Measured fields and plain str/number/list/dict values, there is no loader (no include or
import), and anything undefined or refused raises instead of printing nothing.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from runner.publish.stats.claims import Measured

TEMPLATES_DIR = Path(__file__).resolve().parents[3] / "templates"
BLOCKS_DIR = TEMPLATES_DIR / "blocks"
OVERRIDES_DIR = TEMPLATES_DIR / "overrides"
ASSETS_DIR = TEMPLATES_DIR / "assets"
_PLAIN_TYPES = (str, int, float, bool, list, tuple, dict)
_MEASURED_FIELDS = frozenset(Measured.__slots__) | {"text", "interval_text"}

TemplateProblem = (jinja2.TemplateError, SecurityError)


class PostSandbox(ImmutableSandboxedEnvironment):
    """Sandboxed, autoescaping, strict: the environment for untrusted post bodies."""

    def __init__(self) -> None:
        super().__init__(
            autoescape=True, undefined=jinja2.StrictUndefined, loader=jinja2.FunctionLoader(lambda name: None)
        )
        self.globals.clear()
        self.filters = {
            k: v for k, v in self.filters.items() if k not in ("attr", "map", "xmlattr", "pprint")
        }

    def is_safe_attribute(self, obj, attr, value) -> bool:
        if isinstance(obj, Measured):
            return attr in _MEASURED_FIELDS
        return type(obj) in _PLAIN_TYPES and super().is_safe_attribute(obj, attr, value)


def render_post_body(body: str, functions: dict) -> str:
    """Render a post body with only `functions` in scope. Raises TemplateProblem."""
    env = PostSandbox()
    return env.from_string(body).render(**functions)


_blocks = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(BLOCKS_DIR)),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=False,
)


def render_block(name: str, **context) -> str:
    """Render one of our block templates (trusted); returns HTML with no blank lines."""
    html = _blocks.get_template(name).render(**context)
    return "\n".join(line for line in html.splitlines() if line.strip())


def template_line(template_frame_globals: dict, f_lineno: int) -> int | None:
    """Map a compiled-template frame's line to the template source line."""
    tmpl = template_frame_globals.get("__jinja_template__")
    return tmpl.get_corresponding_lineno(f_lineno) if tmpl is not None else None
