"""How Airflow files shape a graph beyond ``>>``: ``chain``, ``chain_linear``,
``cross_downstream``, edge labels (``Label``, ``a >> Label("yes") >> b``) and Airflow's
``TaskGroup`` arguments.

Labels are kept on the DAG by edge (``DAG.edge_labels``) and reach the spec, where
``dags show`` and the graph views draw them; they never change what runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from dagrun.authoring import groups
from dagrun.authoring.dag import DAG, current_dag
from dagrun.authoring.dependencies import resolve
from dagrun.authoring.tasks import Task
from dagrun.errors import DagDefinitionError


class EdgeModifier:
    """A label on the edges it stands between: ``a >> Label("yes") >> b`` (either side a
    task, an output, a group or a list of them), ``b << Label("yes") << a``."""

    def __init__(self, label: str | None = None):
        self.label = label
        self._upstream: list[Task] = []
        self._downstream: list[Task] = []

    def __repr__(self) -> str:
        return f"Label({self.label!r})"

    def __rrshift__(self, other: Any) -> EdgeModifier:
        """``a >> label``: add ``a`` to the upstream side."""
        self._upstream += resolve(other, upstream=True)
        return self

    def __rshift__(self, other: Any) -> Any:
        """``label >> b``: the edges from the upstream side to ``b``, labelled."""
        self.link(self._upstream, resolve(other, upstream=False))
        return other

    def __rlshift__(self, other: Any) -> EdgeModifier:
        """``b << label``: add ``b`` to the downstream side."""
        self._downstream += resolve(other, upstream=False)
        return self

    def __lshift__(self, other: Any) -> Any:
        """``label << a``: the edges from ``a`` to the downstream side, labelled."""
        self.link(resolve(other, upstream=True), self._downstream)
        return other

    def link(self, upstream: Sequence[Task], downstream: Sequence[Task]) -> None:
        for down in downstream:
            for up in upstream:
                down.add_upstream(up)
                if self.label is not None:
                    down.dag.edge_labels[(up.task_id, down.task_id)] = str(self.label)


def Label(label: str) -> EdgeModifier:
    """An edge label."""
    return EdgeModifier(label)


def cross_downstream(from_tasks: Sequence[Any], to_tasks: Any) -> None:
    """Every task of ``from_tasks`` upstream of every task of ``to_tasks``."""
    for task in from_tasks:
        task >> to_tasks


def chain(*elements: Any) -> None:
    """Each element upstream of the next (Airflow's ``chain``): a task, group or output and
    a list link to every item of the list, two lists of one length pairwise; an edge label
    between two elements labels the edges it stands between."""
    for up, down in itertools.pairwise(elements):
        if _is_list(up) and _is_list(down):
            if len(up) != len(down):
                raise DagDefinitionError(
                    f"chain: neighbouring lists must have one length, not {len(up)} and {len(down)}"
                )
            for a, b in zip(up, down, strict=True):
                _connect(a, b)
        else:
            _connect(up, down)


def _is_list(value: Any) -> bool:
    return isinstance(value, list | tuple)


def _connect(up: Any, down: Any) -> None:
    """``up >> down`` where either side may be an edge label or a list."""
    if _is_list(down):
        for item in down:
            _connect(up, item)
    elif _is_list(up):
        for item in up:
            _connect(item, down)
    elif isinstance(down, EdgeModifier):
        down.__rrshift__(up)
    else:
        up >> down


def chain_linear(*elements: Any) -> None:
    """Every task of each element upstream of every task of the next (Airflow's
    ``chain_linear``: lists are fully connected, whatever their lengths)."""
    if len(elements) < 2:
        raise DagDefinitionError("chain_linear needs at least two elements")
    for up, down in itertools.pairwise(elements):
        for task in resolve(up, upstream=True):
            task >> down


class TaskGroup(groups.TaskGroup):
    """Airflow's ``TaskGroup``: ``parent_group`` and ``dag`` may be given, the UI's colours
    and tooltip are accepted, ``default_args`` apply to the tasks made in it, and with
    ``add_suffix_on_collision`` a taken id gets ``__1``, ``__2``..."""

    def __init__(
        self,
        group_id: str,
        prefix_group_id: bool = True,
        parent_group: groups.TaskGroup | None = None,
        dag: DAG | None = None,
        default_args: dict[str, Any] | None = None,
        tooltip: str = "",
        ui_color: str = "CornflowerBlue",
        ui_fgcolor: str = "#000",
        add_suffix_on_collision: bool = False,
        group_display_name: str = "",
    ):
        dag = dag or (parent_group.dag if parent_group else current_dag())
        if dag is None:
            raise DagDefinitionError(
                f"task group {group_id!r} created outside a DAG: use it inside `with DAG(...):`"
            )
        self.airflow_default_args = dict(default_args or {})
        outer = list(dag.open_groups)
        if parent_group is not None and parent_group not in outer:
            dag.open_groups.append(parent_group)
        if add_suffix_on_collision:
            group_id = _free_group_id(dag, group_id)
        try:
            with _current(dag):
                super().__init__(group_id, tooltip, prefix_group_id)
        finally:
            dag.open_groups[:] = outer

    def __enter__(self) -> TaskGroup:
        super().__enter__()
        return self


def _free_group_id(dag: DAG, group_id: str) -> str:
    from dagrun.authoring.dag import first_free

    return first_free(group_id, lambda label: dag.qualify(label) in dag.groups)


class _current:
    """Make ``dag`` the current DAG while a group is made with ``dag=`` outside its block."""

    def __init__(self, dag: DAG):
        self.dag = dag
        self.entered = False

    def __enter__(self) -> None:
        if current_dag() is not self.dag:
            self.dag.__enter__()
            self.entered = True

    def __exit__(self, *exc: object) -> None:
        if self.entered:
            self.dag.__exit__(*exc)


__all__ = [
    "EdgeModifier",
    "Label",
    "TaskGroup",
    "chain",
    "chain_linear",
    "cross_downstream",
]
