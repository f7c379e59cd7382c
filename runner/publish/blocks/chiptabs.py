"""One chip at a time: a block that holds more than one chip becomes content tabs.

- One tab per chip, the post's home chip first and labelled as home; the rest in the
  block's chip order. One chip: the content alone, no tab bar.
- The HTML is material's content tabs (pymdownx.tabbed, alternate style), so the theme's
  `content.tabs.link` feature switches every tab set of the page whose label matches:
  a chip picked once is picked everywhere. Hidden tabs stay in the page's HTML (search,
  the claims table and downloads still find every chip).
- Ids come from the post's token prefix and the block number: deterministic, unique.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from runner.publish.blocks.templating import render_block

HOME_SUFFIX = " (home)"


@dataclass(frozen=True, slots=True)
class ChipPane:
    chip_id: str
    name: str  # the chip's label on the page
    html: str


def tab_label(name: str, chip_id: str, home: str | None) -> str:
    return name + HOME_SUFFIX if chip_id == home else name


def chip_tabs(panes: list[ChipPane], home: str | None, set_id: str) -> Markup:
    """panes in any order; set_id: unique on the page (letters, digits, '-')."""
    if len(panes) == 1:
        return Markup(panes[0].html)
    ordered = sorted(panes, key=lambda p: p.chip_id != home)
    return Markup(
        render_block(
            "chip_tabs.html",
            set_id=set_id,
            tabs=[
                {"label": tab_label(p.name, p.chip_id, home), "chip": p.name, "html": Markup(p.html)}
                for p in ordered
            ],
        )
    )
