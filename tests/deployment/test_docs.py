"""The README and the docs site keep their promises: the README stays short, and every
performance figure in the README and in docs/performance.md sits in a section that names the
benchmark command producing it (a script that exists) and the date it was measured.

``mkdocs build --strict`` (the test command) checks the site's links; this checks what a
link checker cannot."""

from __future__ import annotations

import re

from support.server_process import ROOT

# a throughput or latency figure: a number with the unit the benchmarks print
FIGURE = re.compile(r"\d[\d,.]*\s*(?:M\s+)?(?:infer/s|rows/s|events/s|µs\b|ms per event)")
COMMAND = re.compile(r"python (tests/benchmarks/bench_\w+\.py)")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def _sections(path) -> dict[str, str]:
    """Level-2 sections of a Markdown file by title (the text before the first one as '')."""
    parts = re.split(r"^## (.+)$", path.read_text(), flags=re.MULTILINE)
    return {"": parts[0], **dict(zip(parts[1::2], parts[2::2]))}


def _check_figures_have_command_and_date(path) -> int:
    figures = 0
    for title, text in _sections(path).items():
        if not FIGURE.search(text):
            continue
        figures += len(FIGURE.findall(text))
        commands = COMMAND.findall(text)
        assert commands, f"{path.name} section {title!r} quotes figures without the command that produced them"
        for script in commands:
            assert (ROOT / script).is_file(), f"{path.name} section {title!r} names {script}, which does not exist"
        assert DATE.search(text), f"{path.name} section {title!r} quotes figures without the date they were measured"
    return figures


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; reference material belongs in docs/"


def test_readme_figures_have_command_and_date():
    assert _check_figures_have_command_and_date(ROOT / "README.md") > 0


def test_performance_page_figures_have_command_and_date():
    assert _check_figures_have_command_and_date(ROOT / "docs" / "performance.md") > 0
