"""Task groups: ``with TaskGroup("ingest"):`` and ``@task_group`` (DESIGN section 6.1).

A group names a set of tasks. Their ids take its id as a prefix (``ingest.extract``), so two
groups built by one function never collide, and in a dependency the group stands for the
tasks at its edge: ``group >> t`` waits for the group's leaves, ``t >> group`` feeds its
roots. Groups exist only while a DAG file is imported; the spec keeps each task's group path
(``TaskSpec.group``) for the views that draw them. The DAG holds the groups open in it
(``DAG.open_groups``), so a task created inside ``with`` blocks of two DAGs joins the group
of its own DAG.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dagrun.authoring.dag import current_dag, first_free
from dagrun.authoring.dependencies import DependencyMixin
from dagrun.errors import DagDefinitionError

if TYPE_CHECKING:
    from dagrun.authoring.tasks import Task

#: A task id's characters without ``.``, which joins the ids of nested groups.
GROUP_KEY = re.compile(r"[A-Za-z0-9_-]{1,200}")


def check_group_key(value: object, dag_id: str) -> str:
    """A group's own id, as a task id but without dots: the path ``outer.inner`` must split
    back into its groups, and the prefixed task ids stay readable."""
    if not isinstance(value, str) or not GROUP_KEY.fullmatch(value):
        raise DagDefinitionError(
            f"task group id {value!r} must be 1-200 characters of letters, digits, '_' or '-'"
            " ('.' joins the ids of nested groups)",
            dag_id=dag_id,
        )
    return value


class TaskGroup(DependencyMixin):
    """A named set of tasks in a DAG, opened with ``with``; groups nest.

    ``prefix_group_id=False`` leaves the ids of the tasks and groups inside unprefixed, as
    Airflow does; ``tooltip`` is accepted so that Airflow DAG files port unchanged.
    """

    def __init__(self, group_id: str, tooltip: str = "", prefix_group_id: bool = True):
        dag = current_dag()
        if dag is None:
            raise DagDefinitionError(
                f"task group {group_id!r} created outside a DAG: use it inside `with DAG(...):`"
            )
        key = check_group_key(group_id, dag.dag_id)
        parent = dag.open_groups[-1] if dag.open_groups else None
        self.dag = dag
        #: The ids of the nested groups down to this one, joined by dots: where it sits,
        #: whatever ``prefix_group_id`` says.
        self.path: str = f"{parent.path}.{key}" if parent else key
        #: Unique among the DAG's task and group ids: its key with its parent's prefix.
        self.group_id = dag.qualify(key)
        self.prefix_group_id = bool(prefix_group_id)
        self.tooltip = tooltip
        dag.add_group(self)

    def __repr__(self) -> str:
        return f"<TaskGroup {self.dag.dag_id}.{self.group_id}>"

    def __enter__(self) -> TaskGroup:
        self.dag.open_groups.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.dag.open_groups.pop()

    def child_id(self, label: str) -> str:
        """The id a task or group labelled ``label`` gets when created inside this group."""
        return f"{self.group_id}.{label}" if self.prefix_group_id else label

    @property
    def tasks(self) -> list[Task]:
        """Its tasks, those of the groups nested in it included, in definition order."""
        inside = self.path + "."
        return [
            t
            for t in self.dag.tasks.values()
            if t.group is not None and (t.group == self.path or t.group.startswith(inside))
        ]

    def edge_tasks(self, upstream: bool) -> list[Task]:
        """Its leaves (no downstream task inside the group) on an edge's upstream side, its
        roots (no upstream task inside the group) on the downstream side. Computed when the
        edge is set, as in Airflow: edges added inside the group later do not move it."""
        members = self.tasks
        if not members:
            raise DagDefinitionError(
                f"task group '{self.group_id}' has no tasks to depend on", dag_id=self.dag.dag_id
            )
        ids = {t.task_id for t in members}
        if upstream:
            waited_on = {up for t in members for up in t.upstream_ids}
            leaves = [t for t in members if t.task_id not in waited_on]
            if any(t.is_teardown for t in members):
                return _work_leaves(members, leaves)
            return leaves
        return [t for t in members if ids.isdisjoint(t.upstream_ids)]


def _work_leaves(members: list[Task], leaves: list[Task]) -> list[Task]:
    """A group's leaves with its teardowns left out, as Airflow's ``TaskGroup.get_leaves``
    does, so that what follows the group waits for its work, not for its clean-up: a
    teardown leaf stands for the tasks it waits on (through other teardowns, not through
    setups) that have no other downstream task in the group but teardowns."""
    inside = {t.task_id: t for t in members}
    below: dict[str, list[Task]] = {t.task_id: [] for t in members}
    for t in members:
        for up in t.upstream_ids:
            if up in below:
                below[up].append(t)

    def before(teardown: Task) -> list[Task]:
        found: list[Task] = []
        for up in (inside[u] for u in teardown.upstream_ids if u in inside):
            if up.is_teardown:
                found.extend(before(up))
            elif not up.is_setup and all(d.is_teardown or d is teardown for d in below[up.task_id]):
                found.append(up)
        return found

    result: list[Task] = []
    for leaf in leaves:
        for t in before(leaf) if leaf.is_teardown else [leaf]:
            if t not in result:
                result.append(t)
    return result


class TaskGroupFunction:
    """What ``@task_group`` returns: each call inside a DAG opens a new group named after
    the function (``name``, then ``name__1``... as @task ids go), runs the function in it,
    and returns the group, or what the function returned if that is not None (Airflow's
    rule, so that a group's last output can feed a task)."""

    def __init__(
        self,
        function: Callable[..., Any],
        group_id: str | None,
        options: dict,
        group_class: type[TaskGroup] | None = None,
    ):
        self.function = function
        self.group_id = group_id or function.__name__
        self.options = options
        #: What each call opens (``dagrun.airflow``'s ``@task_group`` opens its own kind).
        self.group_class = group_class or TaskGroup
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dag = current_dag()
        if dag is None:
            raise DagDefinitionError(
                f"task group '{self.group_id}' called outside a DAG: call @task_group "
                "functions inside `with DAG(...):`"
            )
        key = first_free(self.group_id, lambda label: dag.qualify(label) in dag.groups)
        with self.group_class(key, **self.options) as group:
            returned = self.function(*args, **kwargs)
        return group if returned is None else returned


def task_group(
    function: Callable[..., Any] | None = None,
    *,
    group_id: str | None = None,
    tooltip: str = "",
    prefix_group_id: bool = True,
) -> Any:
    """Decorate a function that builds tasks: ``@task_group`` or ``@task_group(group_id=...)``."""
    options = {"tooltip": tooltip, "prefix_group_id": prefix_group_id}
    if function is not None:
        return TaskGroupFunction(function, group_id, options)
    return lambda f: TaskGroupFunction(f, group_id, options)
