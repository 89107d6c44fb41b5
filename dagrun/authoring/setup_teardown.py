"""Setup and teardown tasks while a DAG file is imported: marking them, and their ``with``.

``create.as_setup()`` marks a task that makes a resource, ``drop.as_teardown(setups=create)``
one that removes it (and makes it downstream of its setups). What the marks mean when a run
is decided is the store's (``readiness``) and the spec's (``dagrun.parsing.scopes``).

``with drop.as_teardown(setups=create):`` (or ``with create >> drop:`` for tasks already
marked) opens a scope: the tasks made inside it are its work. When the block ends, the
work's roots (tasks with no upstream) are put after the setups and its leaves (tasks with
no downstream) before the teardowns, and a scope opened inside another puts its setups
after the outer ones and its teardowns before them, as Airflow's ``SetupTeardownContext``
does. Unlike Airflow, a setup's teardowns (and a teardown's setups) are the ones directly
linked to it, not searched for further along the graph. A task made before the block
joins it by ``scope.add_task(task)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagrun.authoring.dependencies import resolve
from dagrun.errors import DagDefinitionError

if TYPE_CHECKING:
    from dagrun.authoring.tasks import Task


class Scope:
    """The ``with`` block of a setup or teardown task; ``add_task`` adds work made before."""

    def __init__(self, owner: Task):
        self.owner = owner
        self.tasks: list[Task] = []

    def __repr__(self) -> str:
        return f"<scope of {self.owner.task_id}>"

    def add_task(self, task: Any) -> None:
        """Make ``task`` (a task or a task's output) part of this block's work."""
        for found in resolve(task, upstream=True):
            if found not in self.tasks:
                self.tasks.append(found)


def mark_setup(task: Task) -> None:
    _check_single_role(task, "setup")
    task.is_setup = True


def mark_teardown(task: Task, setups: Any, on_failure_fail_dagrun: bool | None) -> None:
    """A teardown's trigger rule is Airflow's non-configurable ``all_done_setup_success``."""
    _check_single_role(task, "teardown")
    task.is_teardown = True
    task.options["trigger_rule"] = "all_done_setup_success"
    if on_failure_fail_dagrun is not None:
        task.on_failure_fail_dagrun = on_failure_fail_dagrun
    for setup in [] if setups is None else resolve(setups, upstream=True):
        mark_setup(setup)
        task.add_upstream(setup)


def _check_single_role(task: Task, role: str) -> None:
    other = "teardown" if role == "setup" else "setup"
    if getattr(task, f"is_{other}"):
        raise DagDefinitionError(
            f"is a {other} task and cannot also be a {role} task",
            dag_id=task.dag.dag_id,
            task_id=task.task_id,
        )


def open_scope(task: Task) -> Scope:
    if not (task.is_setup or task.is_teardown):
        raise DagDefinitionError(
            "only a setup or teardown task opens a `with` block "
            "(mark it with as_setup() or as_teardown() first)",
            dag_id=task.dag.dag_id,
            task_id=task.task_id,
        )
    scope = Scope(task)
    task.dag.open_scopes.append(scope)
    return scope


def close_scope(task: Task, failed: bool) -> None:
    """End the block ``task`` opened and link its work (not when the block raised: the
    file's error is what matters then)."""
    open_scopes = task.dag.open_scopes
    scope = open_scopes.pop()
    if failed:
        return
    setups, teardowns = _pair(scope.owner)
    work = [t for t in scope.tasks if not (t.is_setup or t.is_teardown)]
    if work:
        roots = [t for t in work if not t.upstream_ids] or work[:1]
        for root in roots:
            for setup in setups:
                root.add_upstream(setup)
        waited_on = {up for t in task.dag.tasks.values() for up in t.upstream_ids}
        leaves = [t for t in work if t.task_id not in waited_on] or work[-1:]
        for teardown in teardowns:
            for leaf in leaves:
                teardown.add_upstream(leaf)
    if open_scopes:
        outer_setups, outer_teardowns = _pair(open_scopes[-1].owner)
        for setup in setups:
            for outer in outer_setups:
                if outer is not setup:
                    setup.add_upstream(outer)
        for teardown in teardowns:
            for outer in outer_teardowns:
                if outer is not teardown:
                    outer.add_upstream(teardown)


def _pair(owner: Task) -> tuple[list[Task], list[Task]]:
    """The setups and teardowns of a scope's owner: a setup and its teardowns (the teardown
    tasks directly downstream of it), or a teardown and its setups (directly upstream)."""
    tasks = owner.dag.tasks
    if owner.is_setup:
        below = [t for t in tasks.values() if owner.task_id in t.upstream_ids]
        return [owner], [t for t in below if t.is_teardown]
    above = [tasks[u] for u in owner.upstream_ids]
    return [t for t in above if t.is_setup], [owner]
