"""mkdocs hook: the CLI reference page (``cli.md``), generated at build time.

The page is ``fpgaserve.server.flags.reference_markdown()``: a table rendered from the same
flag declarations the ``fpgaserve`` parser is built from, so the docs cannot drift from the
command line. A hand-written ``docs/cli.md``, if any, is replaced. Needs ``fpgaserve``
importable in the Python that runs mkdocs (installed, or its parent folder on PYTHONPATH).
"""

from __future__ import annotations

from mkdocs.structure.files import File, Files

PAGE = "cli.md"


def render() -> str:
    """The page's Markdown (also what the tests read)."""
    from fpgaserve.server.flags import reference_markdown

    return reference_markdown()


def on_files(files: Files, config) -> Files:
    existing = files.get_file_from_path(PAGE)
    if existing is not None:
        files.remove(existing)
    files.append(File.generated(config, PAGE, content=render()))
    return files
