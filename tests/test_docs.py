"""The documentation: the site builds strictly (links, anchors, references, every page in the
navigation), the generated references follow the code, the README keeps its promises."""

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hook():
    spec = importlib.util.spec_from_file_location("rlhls_docs_reference", DOCS / "_hooks" / "reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _walk(parser, path="rlhls"):
    """(command path, parser) of the parser and every subcommand below it."""
    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _walk(sub, f"{path} {name}")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_site_builds_strictly_with_every_page_in_the_nav(site):
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # !!python/name tags and the like
    cfg = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)

    def pages(nav):
        for item in nav:
            if isinstance(item, str):
                yield item
            elif isinstance(item, dict):
                for v in item.values():
                    yield from ([v] if isinstance(v, str) else pages(v))

    in_nav = set(pages(cfg["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")
               if not str(p.relative_to(DOCS)).startswith(("_hooks", "examples"))}
    assert on_disk == in_nav
    for page in in_nav:
        html = site / (page[:-3].removesuffix("index") + ("/" if not page.endswith("index.md") else "")) / "index.html"
        assert html.is_file(), page


def test_built_cli_page_has_every_command_and_option(site):
    from rlhls.cli import build_parser

    html = (site / "reference" / "cli" / "index.html").read_text()
    for path, parser in _walk(build_parser()):
        assert path == "rlhls" or f"<code>{path}</code>" in html, path
        for a in parser._actions:
            for flag in a.option_strings:
                assert flag in html, (path, flag)


def test_cli_reference_is_generated_from_the_parser():
    """A subcommand or option added to the parser appears in the reference; nothing is typed twice."""
    from rlhls.cli import build_parser

    hook = _hook()
    parser = build_parser()
    text = hook.cli_markdown(parser)
    for path, p in _walk(parser):
        if path != "rlhls":
            assert f"`{path}`" in text
        for a in p._actions:
            for flag in a.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in text or f", {flag}" in text, (path, flag)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    new = sub.add_parser("frobnicate", help="a command added after the docs were written")
    new.add_argument("--widgets", type=int, default=7, help="how many widgets")
    text = hook.cli_markdown(parser)
    assert "## `rlhls frobnicate`" in text and "a command added after the docs were written" in text
    assert "| `--widgets WIDGETS` | how many widgets (default `7`) |" in text
    assert "[`rlhls frobnicate`](#rlhls-frobnicate)" in text


def test_device_reference_names_every_figure_and_its_source():
    from rlhls.designs.devices import DEVICES

    text = _hook().devices_markdown()
    for dev in DEVICES.values():
        assert f"## {dev.id}" in text
        for path, fig in dev.figures():
            assert f"| `{path}` | {fig.value:g} |" in text
            assert fig.source.replace("|", "\\|").replace("[", "\\[").replace("]", "\\]").replace(
                "<", "&lt;").replace(">", "&gt;") in text


def test_readme_is_short_links_into_the_docs_and_keeps_the_ci_command():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 160
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [l for l in links if not re.match(r"[a-z]+://", l)]
    assert any(l.startswith("docs/") for l in local)
    for link in local:
        assert (ROOT / link).exists(), link
    blocks = re.findall(r"```sh\n(.*?)\n```", readme, re.S)
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in blocks, "the README's test command is what .ci/run runs"
    assert ("python3 -m venv .venv && . .venv/bin/activate && pip install -e . && rlhls run heppo-ppo") in blocks


def test_every_example_file_is_shown_by_a_page():
    shown = set()
    for page in DOCS.rglob("*.md"):
        shown |= set(re.findall(r'^--8<-- "([^"]+)"', page.read_text(), re.M))
    for f in (DOCS / "examples").glob("*.py"):
        assert f.name in shown, f"{f.name} is run by the tests but shown by no page"
    for name in shown:
        assert (DOCS / "examples" / name).is_file() or (ROOT / "examples" / name).is_file(), name


def test_every_figure_is_remade_by_the_documented_script():
    script = (DOCS / "figures" / "regenerate.sh").read_text()
    pages = "\n".join(p.read_text() for p in DOCS.rglob("*.md"))
    figures = sorted(p.name for p in (DOCS / "figures").glob("*.png"))
    assert figures
    for name in figures:
        assert f"docs/figures/{name}" in script, f"{name}: no command in docs/figures/regenerate.sh makes it"
        assert f"figures/{name})" in pages, f"{name}: no page shows it"
    assert "regenerate.sh" in pages
