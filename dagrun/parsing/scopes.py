"""Setup and teardown scopes: which setups a task needs, as Airflow defines them.

A setup's scope is the work between it and its teardowns: the tasks downstream of the setup
that are also upstream of one of its teardowns (everything downstream of it, when it has no
teardown). Those tasks need the setup: they wait for it to succeed (the implicit
``all_success`` on setups that Airflow's trigger rule check adds), and clearing one of them
clears the setup and its teardowns again, so the resource exists while the work reruns and
is torn down after. Airflow's ``get_upstreams_only_setups_and_teardowns`` (task-sdk
``abstractoperator.py``) states the same "relevant setups".

Pure functions over a spec's tasks, used through the ``DagSpec`` properties that cache them
(``relevant_setups``, ``setup_scopes``), and only for DAGs with a setup task.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, NamedTuple

from dagrun.states import TriggerRule

if TYPE_CHECKING:
    from dagrun.parsing.spec import DagSpec


class SetupScope(NamedTuple):
    """The setups a task's readiness reads beside its trigger rule.

    ``direct``: its direct upstream setups, for a task whose rule is
    ``all_done_setup_success`` (one of them must have succeeded). ``indirect``: the setups
    whose scope it is in without being directly downstream of them; all must succeed."""

    direct: tuple[str, ...]
    indirect: tuple[str, ...]


def teardowns_of(spec: DagSpec) -> dict[str, tuple[str, ...]]:
    """Each setup's teardowns: the teardown tasks directly downstream of it."""
    return {
        s: tuple(d for d in spec.downstream[s] if d in spec.teardown_ids) for s in spec.setup_ids
    }


def relevant_setups(spec: DagSpec) -> dict[str, tuple[str, ...]]:
    """For each task that is not a teardown, the setups whose scope it is in, in
    topological order (tasks in no scope are left out)."""
    teardowns = teardowns_of(spec)
    found: dict[str, list[str]] = {}
    for setup in sorted(spec.setup_ids, key=spec.position.__getitem__):
        scope = spec.descendants({setup}) - {setup}
        if teardowns[setup]:
            scope &= _ancestors(spec, teardowns[setup])
        for task_id in scope - spec.teardown_ids:
            found.setdefault(task_id, []).append(setup)
    return {task_id: tuple(setups) for task_id, setups in found.items()}


def setup_scopes(spec: DagSpec) -> dict[str, SetupScope]:
    """What readiness reads of setups, for the tasks where that is anything."""
    relevant = spec.relevant_setups
    scopes: dict[str, SetupScope] = {}
    for task in spec.tasks:
        direct: tuple[str, ...] = ()
        if task.trigger_rule == TriggerRule.ALL_DONE_SETUP_SUCCESS:
            direct = tuple(u for u in task.upstream if u in spec.setup_ids)
        indirect = tuple(s for s in relevant.get(task.task_id, ()) if s not in task.upstream)
        if direct or indirect:
            scopes[task.task_id] = SetupScope(direct, indirect)
    return scopes


def setup_dependants(spec: DagSpec) -> dict[str, tuple[str, ...]]:
    """For each setup, the tasks whose readiness reads it without being directly
    downstream of it: its end may make them ready too."""
    found: dict[str, list[str]] = {}
    for task_id, scope in spec.setup_scopes.items():
        for setup in scope.indirect:
            found.setdefault(setup, []).append(task_id)
    return {setup: tuple(task_ids) for setup, task_ids in found.items()}


def with_setups_and_teardowns(spec: DagSpec, task_ids: Collection[str]) -> set[str]:
    """The tasks to clear when ``task_ids`` are cleared: with each work task, the setups
    whose scope it is in and their teardowns; with each setup, its teardowns (Airflow's
    ``DAG.partial_subset``). A teardown cleared alone brings nothing."""
    found = set(task_ids)
    if not spec.setup_ids:
        return found
    teardowns = teardowns_of(spec)
    relevant = spec.relevant_setups
    for task_id in task_ids:
        task = spec.task_map.get(task_id)  # None: an old run's task, since removed
        if task is None:
            continue
        if task.is_setup:
            found.update(teardowns[task_id])
        elif not task.is_teardown:
            for setup in relevant.get(task_id, ()):
                found.add(setup)
                found.update(teardowns[setup])
    return found


def _ancestors(spec: DagSpec, task_ids: Collection[str]) -> set[str]:
    """The given tasks and everything upstream of them (one pass, reverse topological)."""
    found = set(task_ids)
    for task in reversed(spec.tasks):
        if task.task_id in found:
            found.update(task.upstream)
    return found
