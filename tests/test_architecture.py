"""The tree's shape, checked: stages in folders, no import cycle, modules that stay readable.

import-linter (``lint-imports`` in CI, contracts in ``pyproject.toml``) keeps the stages'
arrows pointing one way; these tests keep what its contracts cannot say.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest

import dagrun

PACKAGE = Path(__file__).resolve().parents[1] / "dagrun"
STAGES = {"timing", "authoring", "parsing", "store", "runtime", "webapp", "airflow", "cli"}
#: Modules left directly in ``dagrun/``: the public API and the leaves every stage shares.
MOST_PLAIN_MODULES = 8
MOST_LINES = 600
#: The one exception: every statement that claims, leases or transitions state lives in the
#: catalogue, so the concurrency story reads in one place; that rule outranks the length.
LONGER = {"store/statements.py": 720}


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    """dagrun's imports, function-level ones included, ``TYPE_CHECKING`` ones left out."""
    found = grimp.build_graph("dagrun", exclude_type_checking_imports=True)
    graph = nx.DiGraph()
    for module in found.modules:
        graph.add_node(module)
        for imported in found.find_modules_directly_imported_by(module):
            graph.add_edge(module, imported)
    return graph


def test_no_module_takes_part_in_an_import_cycle(graph):
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert cycles == []


def test_every_stage_is_a_folder_and_few_plain_modules_are_left_at_the_top():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= STAGES and {"timing", "parsing", "store", "runtime"} <= folders
    plain = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(plain) <= MOST_PLAIN_MODULES, plain


def test_no_module_is_longer_than_a_few_hundred_lines():
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines()))
        > LONGER.get(str(path.relative_to(PACKAGE)), MOST_LINES)
    }
    assert long == {}


#: The import paths the README, DESIGN and the example DAGs tell users to write.
DOCUMENTED = {
    "dagrun": list(dagrun.__all__),
    "dagrun.sensors": [
        "ExternalTaskMarker",
        "ExternalTaskSensor",
        "FileSensor",
        "PokeReturnValue",
        "TimeDeltaSensor",
    ],
    "dagrun.sample_data": ["customers", "raw_sales"],
    "dagrun.store": ["Store"],
    "dagrun.webapp": ["WebApp", "make_web_server"],
}


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_every_documented_import_path_still_works(module):
    """Moving modules into stage folders must not move what users import."""
    code = f"from {module} import {', '.join(DOCUMENTED[module])}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_public_api_names_what_it_exports():
    assert set(dagrun.__all__) >= {"DAG", "task", "BashTask", "partition", "notify", "Variable"}
    assert dagrun.partition.__module__ == "dagrun.runtime.partitions"


def test_every_dataclass_says_what_it_is():
    """A docstring per dataclass: for its reader, and because ``dataclass`` builds one from
    ``inspect.signature`` for a class without, at every import of its module."""
    import dataclasses
    import importlib
    import inspect
    import pkgutil

    undocumented = []
    for found in pkgutil.walk_packages(dagrun.__path__, "dagrun."):
        if found.name == "dagrun.__main__":
            continue
        module = importlib.import_module(found.name)
        undocumented += [
            f"{module.__name__}.{name}"
            for name, value in vars(module).items()
            if inspect.isclass(value)
            and dataclasses.is_dataclass(value)
            and value.__module__ == module.__name__
            and value.__doc__.startswith(name + "(")
        ]
    assert undocumented == []
