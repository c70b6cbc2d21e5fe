"""mkdocs hook: the CLI reference page (``cli.md``), generated from the server's own parser.

The page is built at ``mkdocs build`` time from ``fpgaserve.server.cli.build_parser()`` by reading
the argparse actions (flags, default, help), so it cannot drift from ``fpgaserve --help``; it is
added as a generated file and never committed. fpgaserve must be importable (the editable install
of the test command, or ``PYTHONPATH``): a missing package fails the build, as it should.
"""

from __future__ import annotations

import argparse
import html

PAGE = "cli.md"

INTRO = """# Command line

Generated from `fpgaserve.server.cli.build_parser()` when the site is built; `fpgaserve --help`
prints the same. The command line is tritonserver's: the image installs the same program as
`tritonserver`, and command lines written for Triton (SuperSONIC's values, cmsTriton) run
unchanged. Both `--flag=value` and `--flag value` parse; booleans take `true|on|1|false|off|0`
in any case, as Triton's do; an unknown flag is an error, as in Triton. Flags of tritonserver that
mean nothing here are accepted and each one given logs one warning line with the reason shown in
the last table. `fpgaserve pack` (see [pack](pack.md)) and `fpgaserve doctor` (see
[FPGA cards](hls4ml.md#fpga-cards)) are subcommands with their own `--help`.
"""


def _cell(text: str) -> str:
    """Text as one Markdown table cell: HTML and the table's own syntax escaped."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|").replace("*", "\\*")


def _default(action: argparse.Action) -> str:
    if action.required:
        return "(required)"
    if action.default is None or action.default is argparse.SUPPRESS or action.default == []:
        return ""
    if isinstance(action, argparse._StoreTrueAction):  # a switch: off unless given
        return "off"
    if isinstance(action.default, bool):  # spelled as the command line takes it
        return f"`{str(action.default).lower()}`"
    return f"`{action.default}`"


def _flags(action: argparse.Action) -> str:
    """The flag's spellings, each with the value it takes, as argparse names it in --help."""
    if action.nargs == 0:
        value = ""
    elif action.metavar is not None:
        value = " " + str(action.metavar)
    elif action.choices:
        value = " " + "|".join(map(str, action.choices))
    else:
        value = " " + action.dest.upper()
    # a pipe inside a code span does not split a table cell (Python-Markdown's tables)
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def render() -> str:
    """The page's Markdown: one table per argument group (flag, default, meaning)."""
    from fpgaserve.server.cli import build_parser

    parser = build_parser()
    parts = [INTRO]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.option_strings and a.help is not argparse.SUPPRESS]
        if not actions:
            continue
        parts.append(f"\n## {group.title[0].upper() + group.title[1:]}\n")
        if group.description:
            parts.append(_cell(group.description) + "\n")
        parts.append("| flag | default | meaning |\n|---|---|---|")
        parts.extend(f"| {_flags(a)} | {_default(a)} | {_cell(a.help or '')} |" for a in actions)
    return "\n".join(parts) + "\n"


def on_files(files, config):
    """mkdocs event: add the generated page to the site's files (nav refers to it as cli.md)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files
