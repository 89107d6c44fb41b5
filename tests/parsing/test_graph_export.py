"""Tests for dagrun.parsing.graph_export: a DAG with nested groups as JSON, DOT and Mermaid."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dagrun.parsing import loader
from dagrun.parsing.graph_export import RENDERERS, to_dot, to_json, to_mermaid
from dagrun.parsing.spec import DagSpec, TaskSpec
from tests.helpers import bare_spec, write_dag

GROUPED = """
    from dagrun import DAG, BashTask, TaskGroup

    with DAG("grouped"):
        start = BashTask("start", command="echo")
        with TaskGroup("ingest") as ingest:
            extract = BashTask("extract", command="echo", retries=2, pool="db")
            with TaskGroup("clean") as clean:
                BashTask("dedupe", command="echo") >> BashTask("end", command="echo")
            extract >> clean
        start >> ingest >> BashTask("report", command="echo", trigger_rule="all_done")
"""
ORDER = ["start", "ingest.extract", "ingest.clean.dedupe", "ingest.clean.end", "report"]
EDGES = [
    ["start", "ingest.extract"],
    ["ingest.extract", "ingest.clean.dedupe"],
    ["ingest.clean.dedupe", "ingest.clean.end"],
    ["ingest.clean.end", "report"],
]


@pytest.fixture
def spec(dags_dir: Path) -> DagSpec:
    path = write_dag(dags_dir, "grouped.py", GROUPED)
    specs, error = loader.load_file(str(path))
    assert error is None
    return specs[0]


def test_json_lists_tasks_in_order_with_groups_and_both_directions(spec):
    document = json.loads(to_json(spec))
    assert set(document) == {"dag_id", "tasks", "edges", "labels"}
    assert document["dag_id"] == "grouped"
    assert [t["task_id"] for t in document["tasks"]] == ORDER
    assert document["edges"] == EDGES
    extract, report = document["tasks"][1], document["tasks"][4]
    assert extract == {
        "task_id": "ingest.extract",
        "group": "ingest",
        "kind": "bash",
        "upstream": ["start"],
        "downstream": ["ingest.clean.dedupe"],
        "trigger_rule": "all_success",
        "retries": 2,
        "pool": "db",
        "is_setup": False,
        "is_teardown": False,
    }
    assert (report["group"], report["downstream"]) == (None, [])
    assert report["trigger_rule"] == "all_done"
    assert document["tasks"][2]["group"] == "ingest.clean"


def cluster_body(dot: str, label: str) -> str:
    """The text of the cluster with ``label``, from its opening line to its closing brace."""
    lines = dot.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f'label="{label}";') - 1
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == indent + "}")
    return "\n".join(lines[start : end + 1])


def test_dot_draws_nested_clusters_and_every_edge(spec):
    dot = to_dot(spec)
    assert dot.startswith('digraph "grouped" {\n  rankdir=LR;')
    assert dot.endswith("}")
    assert len(re.findall(r"subgraph cluster_\d+ \{", dot)) == 2
    ingest = cluster_body(dot, "ingest")
    clean = cluster_body(dot, "ingest.clean")
    assert clean in ingest
    assert '"ingest.extract";' in ingest
    assert '"ingest.extract";' not in clean
    assert '"ingest.clean.dedupe";' in clean and '"ingest.clean.end";' in clean
    assert '"start";' not in ingest and '"start";' in dot
    edges = re.findall(r'^  "([^"]+)" -> "([^"]+)";$', dot, re.MULTILINE)
    assert [list(e) for e in edges] == EDGES
    assert dot.count("{") == dot.count("}")


def test_mermaid_draws_nested_subgraphs_with_safe_ids(spec):
    mermaid = to_mermaid(spec)
    lines = mermaid.splitlines()
    assert lines[0] == "flowchart LR"
    nodes = dict(re.findall(r'^\s*(\w+)\["([^"]+)"\]$', mermaid, re.MULTILINE))
    assert sorted(nodes.values()) == sorted(ORDER)
    assert all(re.fullmatch(r"[A-Za-z]\w*", node) for node in nodes)
    by_task = {task_id: node for node, task_id in nodes.items()}
    edges = re.findall(r"^  (\w+) --> (\w+)$", mermaid, re.MULTILINE)
    assert [[nodes[a], nodes[b]] for a, b in edges] == EDGES
    opened = [line.strip() for line in lines if line.strip().startswith("subgraph")]
    assert [re.sub(r"^subgraph \w+ ", "", s) for s in opened] == ['["ingest"]', '["ingest.clean"]']
    assert sum(line.strip() == "end" for line in lines) == 2
    clean_at = lines.index(next(line for line in lines if '["ingest.clean"]' in line))
    dedupe_at = lines.index(
        next(line for line in lines if by_task["ingest.clean.dedupe"] + "[" in line)
    )
    assert lines[dedupe_at].startswith(" " * 6)  # inside both subgraphs
    assert clean_at < dedupe_at
    assert lines[dedupe_at + 2].strip() == "end"  # after ...end, the clean subgraph closes


def test_a_dag_without_groups_draws_no_clusters(dags_dir: Path):
    path = write_dag(
        dags_dir,
        "flat.py",
        """
        from dagrun import DAG, BashTask

        with DAG("flat"):
            BashTask("a", command="echo") >> BashTask("end", command="echo")
        """,
    )
    spec = loader.load_file(str(path))[0][0]
    assert "subgraph" not in to_dot(spec)
    assert to_mermaid(spec).splitlines() == [
        "flowchart LR",
        '  t0["a"]',
        '  t1["end"]',
        "  t0 --> t1",
    ]


def test_quotes_and_backslashes_are_escaped():
    """Ids cannot hold them today (dagrun.authoring.dag.SAFE_ID); the drawings must not break if a
    spec ever does."""
    odd = 'say "hi" \\'
    spec = bare_spec(TaskSpec(task_id=odd, kind="bash", upstream=()), dag_id="odd")
    assert '  "say \\"hi\\" \\\\";' in to_dot(spec).splitlines()
    assert '  t0["say #quot;hi#quot; \\"]' in to_mermaid(spec).splitlines()


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_each_renderer_ends_without_a_blank_line(spec, fmt):
    assert not RENDERERS[fmt](spec).endswith("\n")


def test_a_teardowns_edge_from_its_setup_is_dashed(dags_dir: Path):
    path = write_dag(
        dags_dir,
        "paired.py",
        """
        from dagrun import DAG, BashTask

        with DAG("paired"):
            make = BashTask("make", command="echo").as_setup()
            drop = BashTask("drop", command="echo")
            make >> BashTask("use", command="echo") >> drop.as_teardown(setups=make)
        """,
    )
    spec = loader.load_file(str(path))[0][0]
    dot = to_dot(spec).splitlines()
    assert '  "make" -> "drop" [style=dashed];' in dot
    assert '  "make" -> "use";' in dot and '  "use" -> "drop";' in dot
    mermaid = to_mermaid(spec).splitlines()
    assert mermaid[-3:] == ["  t0 --> t1", "  t0 -.-> t2", "  t1 --> t2"]
    tasks = {t["task_id"]: t for t in json.loads(to_json(spec))["tasks"]}
    assert (tasks["make"]["is_setup"], tasks["drop"]["is_teardown"]) == (True, True)
    assert not (tasks["use"]["is_setup"] or tasks["use"]["is_teardown"])


def test_an_edge_label_is_drawn_on_its_edge_in_every_format(dags_dir: Path):
    path = write_dag(
        dags_dir,
        "labelled.py",
        """
        from airflow import DAG
        from airflow.operators.empty import EmptyOperator
        from airflow.utils.edgemodifier import Label

        with DAG("labelled", schedule=None):
            check = EmptyOperator(task_id="check")
            check >> Label("rows > 0") >> EmptyOperator(task_id="load")
            check >> EmptyOperator(task_id="alert")
        """,
    )
    spec = loader.load_file(str(path))[0][0]
    assert spec.edge_labels == (("check", "load", "rows > 0"),)
    dot = to_dot(spec).splitlines()
    assert '  "check" -> "load" [label="rows > 0"];' in dot and '  "check" -> "alert";' in dot
    assert '  t0 -->|"rows > 0"| t1' in to_mermaid(spec).splitlines()
    assert json.loads(to_json(spec))["labels"] == [["check", "load", "rows > 0"]]
