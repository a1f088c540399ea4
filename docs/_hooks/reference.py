"""MkDocs hook: the pages generated from the code at build time, so they cannot drift.

* ``<!-- rlhls:cli -->`` becomes the command-line reference, walked from ``rlhls.cli.build_parser()``;
* ``<!-- rlhls:devices -->`` becomes the device catalogue, every figure with its source;
* mkdocstrings reads the package through a tree laid out as it is installed (``rlhls.designs`` is
  ``designs/`` in the repository), made in a temporary folder from pyproject's package-dir.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
CLI_MARK = "<!-- rlhls:cli -->"
DEVICES_MARK = "<!-- rlhls:devices -->"
_TREE = None


# -- the command line --------------------------------------------------------------------------


def _cell(text) -> str:
    # a table cell: no pipe, no line break, no [..] that autorefs would take for a link
    return (str(text).replace("|", "\\|").replace("\n", " ").replace("[", "\\[").replace("]", "\\]")
            .replace("<", "&lt;").replace(">", "&gt;"))


def _subcommands(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name), sub


def _option_rows(parser):
    rows = []
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if a.option_strings:
            name = ", ".join(a.option_strings)
            if a.nargs != 0:
                mv = a.metavar or a.dest.upper()
                name += " " + (mv if isinstance(mv, str) else " ".join(mv))
        else:
            name = a.metavar or a.dest
        bits = []
        if a.choices and not isinstance(a.choices, dict):
            bits.append("one of " + ", ".join(f"`{c}`" for c in a.choices))
        if a.default not in (None, False, [], argparse.SUPPRESS) and a.nargs != 0 and "default" not in (a.help or ""):
            bits.append(f"default `{a.default}`")
        if a.required and a.option_strings:
            bits.append("required")
        help_text = (a.help or "") % {"default": a.default, "prog": parser.prog} if a.help else ""
        rows.append(f"| `{_cell(name)}` | {_cell(help_text)}{' (' + '; '.join(bits) + ')' if bits else ''} |")
    return rows


def _usage(parser) -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # the same text on every terminal
    try:
        return parser.format_usage().strip()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def cli_markdown(parser=None) -> str:
    """The reference of every command and subcommand of ``parser`` (default: rlhls's own)."""
    if parser is None:
        from rlhls.cli import build_parser

        parser = build_parser()
    out = []

    def walk(p, path, summary, depth):
        children = list(_subcommands(p))
        out.append(f"{'#' * depth} `{path}`\n")
        if summary:
            out.append(f"{summary}\n")
        if p.description and p.description != summary:
            out.append(f"{p.description}\n")
        out.append(f"```text\n{_usage(p)}\n```\n")
        rows = _option_rows(p)
        if rows:
            out.append("| argument | what |\n|---|---|\n" + "\n".join(rows) + "\n")
        for name, help_text, sub in children:
            walk(sub, f"{path} {name}", help_text, min(depth + 1, 4) if depth < 3 else 4)

    out.append(f"```text\n{_usage(parser)}\n```\n")
    rows = _option_rows(parser)
    if rows:
        out.append("| argument | what |\n|---|---|\n" + "\n".join(rows) + "\n")
    out.append("| command | what it does |\n|---|---|")
    for name, help_text, _ in _subcommands(parser):
        out.append(f"| [`rlhls {name}`](#rlhls-{name}) | {_cell(help_text or '')} |")
    out.append("")
    for name, help_text, sub in _subcommands(parser):
        walk(sub, f"rlhls {name}", help_text, 2)
    return "\n".join(out)


# -- the device catalogue ----------------------------------------------------------------------


def devices_markdown() -> str:
    """Every catalogue device: its figures with value, unit, source and note, its links and notes."""
    from rlhls.designs.devices import DEVICES

    out = ["| device | board | part | family |\n|---|---|---|---|"]
    for dev in DEVICES.values():
        out.append(f"| [`{dev.id}`](#{dev.id}) | {_cell(dev.board)} | `{dev.part}` | {_cell(dev.family)} |")
    out.append("")
    for dev in DEVICES.values():
        out.append(f"## {dev.id}\n\n{dev.board}, `{dev.part}` ({dev.family})"
                   + (f"; also accepted as: {', '.join(f'`{a}`' for a in dev.aliases)}" if dev.aliases else "") + ".\n")
        for unit in dev.units.values():
            out.append(f"**{unit.name}**: {_cell(unit.description)}\n")
        out.append("| figure | value | unit | source | note |\n|---|---|---|---|---|")
        for path, fig in dev.figures():
            out.append(f"| `{path}` | {fig.value:g} | {_cell(fig.unit)} | {_cell(fig.source)} | {_cell(fig.note)} |")
        out.append("")
        if dev.notes:
            out.append("Notes on the figures:\n")
            out.extend(f"- {_cell(n)}" for n in dev.notes)
            out.append("")
    return "\n".join(out)


# -- the package as installed, for mkdocstrings ------------------------------------------------


def _package_dirs() -> dict:
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^"([\w.]+)"\s*=\s*"([^"]+)"', block, re.M))


def installed_tree(dest: Path) -> Path:
    """``dest/rlhls/...`` laid out as the installed package, of symbolic links into the repository."""
    for pkg, folder in sorted(_package_dirs().items()):
        target = dest.joinpath(*pkg.split("."))
        if target.is_symlink():  # inside a folder linked already (never write through a link)
            continue
        target.mkdir(parents=True, exist_ok=True)
        for entry in (ROOT / folder).iterdir():
            link = target / entry.name
            if entry.name != "__pycache__" and not link.exists():
                link.symlink_to(entry)
    return dest


@event_priority(100)  # before mkdocstrings makes its handlers
def on_config(config):
    global _TREE
    _TREE = Path(tempfile.mkdtemp(prefix="rlhls-docs-"))
    installed_tree(_TREE)
    plugin = config.plugins.get("mkdocstrings")
    if plugin is not None:
        plugin.config.handlers.setdefault("python", {})["paths"] = [str(_TREE)]
    return config


def on_page_markdown(markdown, page, config, files):
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_markdown())
    if DEVICES_MARK in markdown:
        markdown = markdown.replace(DEVICES_MARK, devices_markdown())
    return markdown


def on_shutdown():
    if _TREE is not None:
        shutil.rmtree(_TREE, ignore_errors=True)
