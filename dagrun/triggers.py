"""Task readiness: which task instances of a run may be queued, and how a run ends.

Pure functions over a DAG spec and the states of one run's task instances, so the rules can
be tested exhaustively without a database. The store applies the decisions in the same
transaction that read the states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dagrun.spec import DagSpec, TaskSpec
from dagrun.states import (
    FAILED_TASK_STATES,
    FINISHED_TASK_STATES,
    RunState,
    TaskState,
    TriggerRule,
)

_DONE_OK = frozenset({TaskState.SUCCESS, TaskState.SKIPPED})


@dataclass
class Decisions:
    """State changes for task instances now in state ``none``, and the run's end if reached."""

    queue: list[str] = field(default_factory=list)
    upstream_failed: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    run_state: RunState | None = None


def evaluate(
    spec: DagSpec,
    states: Mapping[str, TaskState],
    past_ok: Mapping[str, bool] | None = None,
) -> Decisions:
    """Decide, in topological order, what each waiting task instance becomes.

    ``past_ok`` says, for tasks with ``depends_on_past``, whether the previous run's instance
    of the task succeeded (or was skipped); such a task waits until it did. Decisions cascade:
    a failure marks every all_success descendant ``upstream_failed`` in one pass.
    """
    current = dict(states)
    decisions = Decisions()
    for task in spec.tasks:
        if current.get(task.task_id) != TaskState.NONE:
            continue
        verdict = _verdict(task, [current[u] for u in task.upstream if u in current])
        if (
            verdict == TaskState.QUEUED
            and task.depends_on_past
            and not (past_ok or {}).get(task.task_id, True)
        ):
            continue
        if verdict is not None:
            current[task.task_id] = verdict
            _record(decisions, task.task_id, verdict)
    decisions.run_state = run_outcome(current.values())
    return decisions


def _record(decisions: Decisions, task_id: str, verdict: TaskState) -> None:
    if verdict == TaskState.QUEUED:
        decisions.queue.append(task_id)
    elif verdict == TaskState.UPSTREAM_FAILED:
        decisions.upstream_failed.append(task_id)
    else:
        decisions.skip.append(task_id)


def _verdict(task: TaskSpec, upstream: list[TaskState]) -> TaskState | None:
    """QUEUED, UPSTREAM_FAILED or SKIPPED once the trigger rule can decide; None to wait.

    Runs for every waiting task of every run a group commit touches, hence set operations
    rather than a loop per upstream state."""
    if not upstream:
        return TaskState.QUEUED
    rule = _RULES[task.trigger_rule]
    finished = FINISHED_TASK_STATES.issuperset(upstream)
    if not finished and rule not in _EARLY_RULES:
        return None
    failed = sum(1 for s in upstream if s in FAILED_TASK_STATES)
    succeeded = upstream.count(TaskState.SUCCESS)
    if rule == TriggerRule.ONE_SUCCESS and succeeded:
        return TaskState.QUEUED
    if rule == TriggerRule.ONE_FAILED and failed:
        return TaskState.QUEUED
    if not finished:
        return None
    if rule == TriggerRule.ALL_DONE:
        return TaskState.QUEUED
    if rule == TriggerRule.ALL_SUCCESS:
        if failed:
            return TaskState.UPSTREAM_FAILED
        return TaskState.QUEUED if succeeded == len(upstream) else TaskState.SKIPPED
    if rule == TriggerRule.NONE_FAILED:
        return TaskState.UPSTREAM_FAILED if failed else TaskState.QUEUED
    if rule == TriggerRule.ALL_FAILED:
        return TaskState.QUEUED if failed == len(upstream) else TaskState.SKIPPED
    if rule == TriggerRule.ONE_SUCCESS:
        return TaskState.UPSTREAM_FAILED if failed else TaskState.SKIPPED
    return TaskState.SKIPPED  # one_failed with no failure upstream


#: Rules that may fire before every upstream has finished.
_EARLY_RULES = frozenset({TriggerRule.ONE_SUCCESS, TriggerRule.ONE_FAILED})
_RULES = {rule.value: rule for rule in TriggerRule}


def run_outcome(states) -> RunState | None:
    """SUCCESS when every instance succeeded or was skipped, FAILED when all finished else."""
    states = set(states)
    if not states or not FINISHED_TASK_STATES.issuperset(states):
        return None
    return RunState.SUCCESS if _DONE_OK.issuperset(states) else RunState.FAILED
