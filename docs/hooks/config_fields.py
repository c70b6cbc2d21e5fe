"""mkdocs hook: the config-field table of ``models.md``, generated at build time.

The marker ``<!-- config-fields -->`` in docs/models.md is replaced by
``fpgaserve.server.engine.config_support.reference_markdown()``: the same table the server's
load warnings come from, so the page cannot drift from what the server does. Needs
``fpgaserve`` importable in the Python that runs mkdocs.
"""

from __future__ import annotations

MARKER = "<!-- config-fields -->"


def render() -> str:
    from fpgaserve.server.engine.config_support import reference_markdown

    return reference_markdown()


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
