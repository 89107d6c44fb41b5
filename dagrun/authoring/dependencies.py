"""The ``>>`` and ``<<`` operators: ``a >> b``, ``[a, b] >> c``, ``c << [a, b]``.

Tasks, their outputs, @task functions and task groups all take part in a dependency, each
standing for the tasks at its edge (``DependencyMixin.edge_tasks``). A module of its own
because those four live in three modules (``tasks``, ``taskflow``, ``groups``) that must not
import one another in a circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagrun.authoring.tasks import Task


def resolve(other: Any, upstream: bool) -> list[Task]:
    """The tasks behind a ``>>`` operand on the upstream (or downstream) side of the edge: a
    task, an output, a task group, a @task function, a list of them."""
    if isinstance(other, DependencyMixin):
        return other.edge_tasks(upstream)
    if isinstance(other, list | tuple | set):
        return [t for item in other for t in resolve(item, upstream)]
    raise TypeError(f"cannot set a dependency on {other!r}: expected a task or a list of tasks")


class DependencyMixin:
    """``a >> b``, ``a << b``, ``[a, b] >> c`` and ``c << [a, b]`` for tasks, their outputs,
    @task functions (dagrun.authoring.taskflow) and task groups (dagrun.authoring.groups)."""

    def edge_tasks(self, upstream: bool) -> list[Task]:
        """The tasks an edge attaches to with this operand on its upstream side (or its
        downstream side): only a task group's differ, its leaves or its roots."""
        raise NotImplementedError

    def __rshift__(self, other: Any) -> Any:
        for up in self.edge_tasks(upstream=True):
            for down in resolve(other, upstream=False):
                down.add_upstream(up)
        return other

    def __lshift__(self, other: Any) -> Any:
        for down in self.edge_tasks(upstream=False):
            for up in resolve(other, upstream=True):
                down.add_upstream(up)
        return other

    def __rrshift__(self, other: Any) -> Any:
        self.__lshift__(other)
        return self

    def __rlshift__(self, other: Any) -> Any:
        self.__rshift__(other)
        return self
