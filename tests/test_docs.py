"""The documentation holds: every DAG file it shows loads, and its configuration page lists
every setting.

A DAG file is a ```python block of README.md or docs/*.md that makes a DAG (``DAG(`` or
``@dag``); each is written to a folder of its own files and parsed as ``dagrun dags list``
parses a dags folder, so an example that no longer imports (a renamed option, a missing
import) fails here, not in a reader's hands. The configuration page is written by the
MkDocs hook in ``docs/hooks.py`` from ``dagrun.settings``.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import click
import pytest

from dagrun import settings
from dagrun.parsing import parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A fenced Python block, possibly indented (inside a list item); its body up to the fence.
FENCE = re.compile(r"^([ \t]*)```python[^\n]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
MAKES_A_DAG = re.compile(r"\bDAG\(|^\s*@dag\b", re.M)


def dag_blocks() -> dict[str, str]:
    """Each DAG file the docs show, by ``page:line``."""
    found = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            source = textwrap.dedent(match.group(2))
            if MAKES_A_DAG.search(source):
                line = text.count("\n", 0, match.start()) + 1
                found[f"{page.relative_to(ROOT)}:{line}"] = source
    return found


BLOCKS = dag_blocks()


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, parser.FileResult]:
    """Every block parsed at once (a few parse children for all of them), by block name."""
    folder = tmp_path_factory.mktemp("doc_dags")
    paths = {}
    for number, (where, source) in enumerate(BLOCKS.items()):
        path = folder / f"block_{number}.py"
        path.write_text(source, encoding="utf-8")
        paths[where] = str(path)
    results = parser.parse_files(parser.discover(folder), timeout=60.0)
    return {where: results[path] for where, path in paths.items()}


def test_the_docs_show_dag_files_from_every_part():
    """The search finds the examples (a regex that matched nothing would pass every test
    below): the README's DAG, and those of the authoring and Airflow pages."""
    pages = {where.rsplit(":", 1)[0] for where in BLOCKS}
    assert {"README.md", "docs/authoring.md", "docs/airflow.md"} <= pages
    assert len(BLOCKS) >= 15


@pytest.mark.parametrize("where", sorted(BLOCKS))
def test_a_dag_file_in_the_docs_loads(parsed: dict[str, parser.FileResult], where: str):
    result = parsed[where]
    assert result.error is None, f"{where}: {result.error}"
    assert result.dags, f"{where}: the block makes no DAG"


def heading_ids(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub and the site's table of contents make
    them (lower case, punctuation dropped, spaces as dashes), or as ``{ #id }`` gives."""
    ids = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M):
        given = re.search(r"\{ #([\w-]+) \}", heading)
        slug = re.sub(r"[^\w\s-]", "", heading).strip().lower()
        ids.add(given.group(1) if given else re.sub(r"\s+", "-", slug))
    return ids


def test_the_readme_links_into_the_docs_by_relative_paths_that_exist():
    links = re.findall(r"\]\((docs/[^)\s]+)\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(links) >= 10
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).is_file(), f"README links to {path}, which does not exist"
        if anchor:
            assert anchor in heading_ids(ROOT / path), f"README links to {link}: no such heading"


def load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Page:
    """What the hook reads of an MkDocs page: its file's path in docs/."""

    def __init__(self, src_uri: str):
        self.file = type("File", (), {"src_uri": src_uri})()


def test_the_configuration_page_lists_every_setting():
    hooks = load_hooks()
    source = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    page = hooks.on_page_markdown(source, page=_Page("configuration.md"))
    assert hooks.MARKER not in page
    for setting in settings.SETTINGS:
        row = next((line for line in page.splitlines() if f"| `{setting.name}` |" in line), "")
        assert row, f"{setting.name} is missing from the configuration page"
        assert f"`{setting.variable}`" in row
        assert setting.help.split("`")[0].strip() in row


def test_the_hook_leaves_other_pages_alone_and_refuses_a_page_without_its_marker():
    hooks = load_hooks()
    assert hooks.on_page_markdown("# x\n", page=_Page("concepts.md")) == "# x\n"
    with pytest.raises(ValueError, match="marker"):
        hooks.on_page_markdown("# Configuration\n", page=_Page("configuration.md"))


def test_an_escaped_pipe_in_a_table_cell_shows_as_a_pipe_and_nowhere_else():
    hooks = load_hooks()
    html = '<td><code>--state success\\|failed</code></td><pre>grep "a\\|b"</pre>'
    shown = hooks.on_page_content(html)
    assert shown == '<td><code>--state success|failed</code></td><pre>grep "a\\|b"</pre>'


def command_paths(command: click.Command, ctx: click.Context) -> list[str]:
    """``dagrun``, ``dagrun dags``, ``dagrun dags list``, ...: every command under ``cli``."""
    found = [ctx.command_path]
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                found += command_paths(sub, click.Context(sub, info_name=name, parent=ctx))
    return found


@pytest.mark.slow
def test_the_site_builds_with_every_command_and_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """``mkdocs build --strict`` (as CI runs it): no broken link, and the generated pages
    hold every command of the CLI and every setting."""
    pytest.importorskip("mkdocs_click")
    from dagrun.cli import cli

    # Looking a parsing command up forks parse children for the dags folder: none for this.
    monkeypatch.setenv("DAGRUN_DAGS_FOLDER", str(tmp_path / "no_dags"))
    site = tmp_path / "site"
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    done = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = (site / "cli" / "index.html").read_text(encoding="utf-8")
    for path in command_paths(cli, click.Context(cli, info_name="dagrun")):
        assert f'id="{path.replace(" ", "-")}"' in reference, f"{path} is not in the reference"
    configuration = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    for setting in settings.SETTINGS:
        assert f"<code>{setting.name}</code>" in configuration
