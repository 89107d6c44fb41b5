"""A DAG's graph as JSON, Graphviz DOT or Mermaid, for ``dagrun dags show --format``.

Pure functions over a :class:`DagSpec`: tasks in the spec's topological order, task groups
(``TaskSpec.group``) as nested clusters, edges from each task's upstreams. Each returns the
whole text to print, so the command only picks one and any other view can reuse them.

The JSON document: ``{"dag_id", "tasks": [{"task_id", "group", "kind", "upstream",
"downstream", "trigger_rule", "retries", "pool", "is_setup", "is_teardown"}], "edges":
[[upstream, downstream], ...], "labels": [[upstream, downstream, label], ...]}``, tasks and
edges in topological order. The drawings show a teardown's edge from its setup dashed, as
Airflow's graph does, and an edge's label (Airflow's ``Label``) on it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from dagrun.parsing.spec import DagSpec


def to_json(spec: DagSpec) -> str:
    """The document described above, indented: stable keys for scripts and diffs."""
    downstream: dict[str, list[str]] = {t.task_id: [] for t in spec.tasks}
    for t in spec.tasks:
        for up in t.upstream:
            downstream[up].append(t.task_id)
    document = {
        "dag_id": spec.dag_id,
        "tasks": [
            {
                "task_id": t.task_id,
                "group": t.group,
                "kind": t.kind,
                "upstream": list(t.upstream),
                "downstream": downstream[t.task_id],
                "trigger_rule": t.trigger_rule,
                "retries": t.retries,
                "pool": t.pool,
                "is_setup": t.is_setup,
                "is_teardown": t.is_teardown,
            }
            for t in spec.tasks
        ],
        "edges": [list(edge) for edge in _edges(spec)],
        "labels": [list(label) for label in spec.edge_labels],
    }
    return json.dumps(document, indent=2)


def to_dot(spec: DagSpec) -> str:
    """A Graphviz digraph, left to right; each group a ``cluster_<n>`` subgraph (Graphviz
    draws a box only around subgraphs so named) labelled with its path."""
    lines = [f"digraph {_dot_quote(spec.dag_id)} {{", "  rankdir=LR;", "  node [shape=box];"]
    clusters = itertools.count()

    def emit(group: GroupNode, indent: str) -> None:
        lines.extend(f"{indent}{_dot_quote(task_id)};" for task_id in group.tasks)
        for child in group.children.values():
            lines.append(f"{indent}subgraph cluster_{next(clusters)} {{")
            lines.append(f"{indent}  label={_dot_quote(child.path)};")
            emit(child, indent + "  ")
            lines.append(f"{indent}}}")

    emit(group_tree(spec), "  ")
    labels = spec.labels
    for up, down in _edges(spec):
        style = ["style=dashed"] if _paired(spec, up, down) else []
        if (up, down) in labels:
            style.append(f"label={_dot_quote(labels[up, down])}")
        shown = f" [{', '.join(style)}]" if style else ""
        lines.append(f"  {_dot_quote(up)} -> {_dot_quote(down)}{shown};")
    lines.append("}")
    return "\n".join(lines)


def to_mermaid(spec: DagSpec) -> str:
    """A Mermaid flowchart, left to right; each group a ``subgraph``. Node ids are ``t<n>``
    (the task's place in the order), its id the label: Mermaid ids cannot hold dots, and
    words such as ``end`` would close a block."""
    node = {t.task_id: f"t{i}" for i, t in enumerate(spec.tasks)}
    lines = ["flowchart LR"]
    subgraphs = itertools.count()

    def emit(group: GroupNode, indent: str) -> None:
        lines.extend(f"{indent}{node[t]}[{_mermaid_text(t)}]" for t in group.tasks)
        for child in group.children.values():
            lines.append(f"{indent}subgraph g{next(subgraphs)} [{_mermaid_text(child.path)}]")
            emit(child, indent + "  ")
            lines.append(f"{indent}end")

    emit(group_tree(spec), "  ")
    labels = spec.labels
    for up, down in _edges(spec):
        arrow = "-.->" if _paired(spec, up, down) else "-->"
        if (up, down) in labels:
            arrow += f"|{_mermaid_text(labels[up, down])}|"
        lines.append(f"  {node[up]} {arrow} {node[down]}")
    return "\n".join(lines)


#: ``dagrun dags show --format`` choices besides the default table.
RENDERERS: dict[str, Callable[[DagSpec], str]] = {
    "json": to_json,
    "dot": to_dot,
    "mermaid": to_mermaid,
}


@dataclass
class GroupNode:
    """A group's tasks and nested groups (the root stands for the DAG itself)."""

    path: str
    tasks: list[str] = field(default_factory=list)
    children: dict[str, GroupNode] = field(default_factory=dict)


def group_tree(spec: DagSpec) -> GroupNode:
    """The groups as a tree; groups and tasks in the order their first task comes. The
    exports and the web page's graph (``dagrun.webapp.graph_view``) draw the same tree."""
    root = GroupNode("")
    for t in spec.tasks:
        group = root
        for key in t.group.split(".") if t.group else ():
            path = f"{group.path}.{key}" if group.path else key
            group = group.children.setdefault(key, GroupNode(path))
        group.tasks.append(t.task_id)
    return root


def _edges(spec: DagSpec) -> Iterator[tuple[str, str]]:
    return ((up, t.task_id) for t in spec.tasks for up in t.upstream)


def _paired(spec: DagSpec, up: str, down: str) -> bool:
    """Whether the edge links a setup to its teardown (drawn dashed)."""
    return up in spec.setup_ids and down in spec.teardown_ids


def _dot_quote(text: str) -> str:
    """A DOT quoted string: inside one only ``"`` needs escaping, and a backslash, so that
    it is not read as an escape."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _mermaid_text(text: str) -> str:
    """A quoted Mermaid label; a ``"`` inside becomes the entity ``#quot;``."""
    return '"' + text.replace('"', "#quot;") + '"'
