"""Task readiness: which task instances of a run may be queued, and how a run ends.

Pure functions over a DAG spec and the states of one run's task instances, so the rules can
be tested exhaustively without a database. The store applies the decisions in the same
transaction that read the states.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from dagrun.parsing.scopes import SetupScope
from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.states import (
    FAILED_TASK_STATES,
    FINISHED_TASK_STATES,
    RunState,
    TaskState,
    TriggerRule,
)

_NOT_FAILED = frozenset({TaskState.SUCCESS, TaskState.SKIPPED})


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
    *,
    choices: Mapping[str, frozenset[str] | None] | None = None,
    only: Collection[str] | None = None,
) -> Decisions:
    """Decide, in topological order, what each waiting task instance becomes.

    ``past_ok`` says, for tasks with ``depends_on_past``, whether the previous run's instance
    of the task succeeded (or was skipped); such a task waits until it did. Decisions cascade:
    a failure marks every all_success descendant ``upstream_failed`` in one pass.

    ``choices`` holds what each branch or short-circuit task that succeeded in this run chose:
    a branch task maps to the direct downstream task ids it chose (possibly none); a
    short-circuit task that returned a falsy value maps to ``None``. A truthy short-circuit is
    absent. Tasks a choice rules out are skipped whatever their trigger rules (see
    ``_ruled_out``); the tasks below them follow their own rules, in the same pass.

    ``only`` decides just those tasks (``states`` then holds them and their upstream tasks
    at least) and leaves the run's end undecided: what the caller knows of the rest.
    """
    current = dict(states)
    decisions = Decisions()
    ruled_out = _ruled_out(spec, choices) if choices else frozenset()
    scopes = spec.setup_scopes if spec.setup_ids else None
    for task in spec.tasks if only is None else _in_order(spec, only):
        if current.get(task.task_id) != TaskState.NONE:
            continue
        verdict: TaskState | None
        if task.task_id in ruled_out:
            verdict = TaskState.SKIPPED
        else:
            verdict = _verdict(
                _RULES[task.trigger_rule], [current[u] for u in task.upstream if u in current]
            )
            if scopes is not None and task.task_id in scopes:
                verdict = _with_setups(verdict, scopes[task.task_id], current)
        if (
            verdict == TaskState.QUEUED
            and task.depends_on_past
            and not (past_ok or {}).get(task.task_id, True)
        ):
            continue
        if verdict is not None:
            current[task.task_id] = verdict
            _record(decisions, task.task_id, verdict)
    if only is None:
        decisions.run_state = run_outcome(counted_states(spec, current))
    return decisions


def _in_order(spec: DagSpec, task_ids: Collection[str]) -> list[TaskSpec]:
    position = spec.position
    return [spec.task_map[t] for t in sorted(task_ids, key=position.__getitem__)]


def _ruled_out(spec: DagSpec, choices: Mapping[str, frozenset[str] | None]) -> set[str]:
    """The tasks that branch and short-circuit choices skip regardless of trigger rules.

    A branch skips its direct downstream tasks it did not choose, except those that are also
    downstream of a chosen task: in ``branch >> [work, join]; work >> join`` choosing ``work``
    must still run ``join`` (Airflow's ``skip_all_except``). A falsy short-circuit skips
    everything downstream of it, or with ``ignore_downstream_trigger_rules=False`` its
    direct downstream tasks only, the tasks after them then following their own rules; it
    never skips a teardown, which must still clean up (Airflow's ``ShortCircuitOperator``
    leaves out ``is_teardown`` tasks either way). Computed per call, and only for runs
    with choices, so the common path pays nothing.
    """
    skipped: set[str] = set()
    for task_id, chosen in choices.items():
        if chosen is None:
            if spec.task_map[task_id].ignore_downstream_trigger_rules:
                below = spec.descendants({task_id}) - {task_id}
            else:
                below = set(spec.downstream[task_id])
            skipped |= below - spec.teardown_ids
            continue
        kept = spec.descendants(set(chosen))
        skipped.update(
            t.task_id for t in spec.tasks if task_id in t.upstream and t.task_id not in kept
        )
    return skipped


def _record(decisions: Decisions, task_id: str, verdict: TaskState) -> None:
    if verdict == TaskState.QUEUED:
        decisions.queue.append(task_id)
    elif verdict == TaskState.UPSTREAM_FAILED:
        decisions.upstream_failed.append(task_id)
    else:
        decisions.skip.append(task_id)


def _verdict(rule: _Rule, upstream: list[TaskState]) -> TaskState | None:
    """QUEUED, UPSTREAM_FAILED or SKIPPED once the trigger rule can decide; None to wait.

    Runs for every waiting task of every run a group commit touches, hence a few set
    operations (each one C loop) rather than a Python loop per upstream; a waiting task, the
    common case, costs one. Like the rest of readiness it decides a task once its upstream
    tasks finished (an early rule excepted), where Airflow may mark some a little sooner
    (an all_success task upstream_failed while another upstream still runs): the state
    reached is the same."""
    if not upstream:
        return TaskState.QUEUED
    if not FINISHED_TASK_STATES.issuperset(upstream):
        return TaskState.QUEUED if rule.early and not rule.needs.isdisjoint(upstream) else None
    present = set(upstream)
    if rule.allowed.issuperset(present) and not rule.needs.isdisjoint(present):
        return TaskState.QUEUED
    if (
        rule.fails
        and not FAILED_TASK_STATES.isdisjoint(present)
        and not (rule.skips_first and TaskState.SKIPPED in present)
    ):
        return TaskState.UPSTREAM_FAILED
    return TaskState.SKIPPED


def _with_setups(
    verdict: TaskState | None, scope: SetupScope, current: Mapping[str, TaskState]
) -> TaskState | None:
    """The verdict of a task that setups bear on (``dagrun.parsing.scopes``).

    An ``all_done_setup_success`` task (a teardown) that its rule would queue runs only if
    one of its direct upstream setups succeeded; if none did it takes their state: skipped
    when all were skipped, else upstream_failed (Airflow's ``trigger_rule_dep``). A task in
    the scope of setups it is not directly downstream of needs them all to succeed, as if
    they were upstream with ``all_success`` (Airflow's ``_evaluate_setup_constraint``): a
    failed or skipped one decides first; while one is unfinished the task waits unless its
    own rule already ends it."""
    if verdict == TaskState.QUEUED and scope.direct:
        verdict = _verdict(_SETUP_SUCCESS, [current[s] for s in scope.direct if s in current])
    if not scope.indirect:
        return verdict
    indirect = [current[s] for s in scope.indirect if s in current]
    setups = _verdict(_RULES[TriggerRule.ALL_SUCCESS], indirect)
    if setups is None:
        return None if verdict == TaskState.QUEUED else verdict
    return verdict if setups == TaskState.QUEUED else setups


class _Rule(NamedTuple):
    """A trigger rule as sets of upstream states, so that every rule decides the same way.

    Once every upstream finished the task is queued when all their states are ``allowed``
    and at least one is in ``needs``; otherwise it becomes upstream_failed if the rule
    ``fails`` and an upstream failed (unless the rule ``skips_first`` and one was skipped),
    else skipped. An ``early`` rule queues its task as soon as one upstream is in ``needs``,
    finished or not."""

    allowed: frozenset[TaskState]
    needs: frozenset[TaskState] = FINISHED_TASK_STATES
    early: bool = False
    fails: bool = False
    skips_first: bool = False


_SUCCESS = frozenset({TaskState.SUCCESS})
_SKIPPED = frozenset({TaskState.SKIPPED})
_NOT_SKIPPED = FINISHED_TASK_STATES - _SKIPPED
_RAN = frozenset({TaskState.SUCCESS, TaskState.FAILED})
_ANY_STATE = frozenset(TaskState)

#: Keyed by rule; a spec's plain string finds its entry too, as TriggerRule is a StrEnum.
_RULES: dict[str, _Rule] = {
    TriggerRule.ALL_SUCCESS: _Rule(_SUCCESS, fails=True),
    TriggerRule.ALL_DONE: _Rule(FINISHED_TASK_STATES),
    TriggerRule.ALL_FAILED: _Rule(FAILED_TASK_STATES),
    TriggerRule.ONE_SUCCESS: _Rule(FINISHED_TASK_STATES, _SUCCESS, early=True, fails=True),
    TriggerRule.ONE_FAILED: _Rule(FINISHED_TASK_STATES, FAILED_TASK_STATES, early=True),
    # Airflow counts ``success + failed`` here, not upstream_failed: an upstream that ran.
    TriggerRule.ONE_DONE: _Rule(FINISHED_TASK_STATES, _RAN, early=True),
    TriggerRule.NONE_FAILED: _Rule(_NOT_FAILED, fails=True),
    TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS: _Rule(_NOT_FAILED, _SUCCESS, fails=True),
    TriggerRule.NONE_SKIPPED: _Rule(_NOT_SKIPPED),
    TriggerRule.ALL_SKIPPED: _Rule(_SKIPPED),
    # Airflow: a skipped upstream is not "done" for this rule and skips the task, even
    # beside a failure; with none skipped and no success the task is upstream_failed.
    TriggerRule.ALL_DONE_MIN_ONE_SUCCESS: _Rule(
        _NOT_SKIPPED, _SUCCESS, fails=True, skips_first=True
    ),
    # all_done over every upstream; what its setups add is in _with_setups.
    TriggerRule.ALL_DONE_SETUP_SUCCESS: _Rule(FINISHED_TASK_STATES),
    # Airflow runs an always task as soon as the run starts: any upstream state will do.
    TriggerRule.ALWAYS: _Rule(_ANY_STATE, _ANY_STATE, early=True),
}
#: A teardown's direct setups, once every upstream finished: one success runs it; none,
#: and it is skipped if they all were, else upstream_failed.
_SETUP_SUCCESS = _Rule(FINISHED_TASK_STATES, _SUCCESS, fails=True)


def run_outcome(states: Iterable[TaskState]) -> RunState | None:
    """SUCCESS when every instance succeeded or was skipped, FAILED when all finished else."""
    states = set(states)
    if not states or not FINISHED_TASK_STATES.issuperset(states):
        return None
    return RunState.SUCCESS if _NOT_FAILED.issuperset(states) else RunState.FAILED


def counted_states(
    spec: DagSpec, states: Mapping[str, TaskState] | Iterable[tuple[str, TaskState]]
) -> Iterable[TaskState]:
    """The states that decide how a run ends (``run_outcome``): dagrun's rule is that a run
    fails when any task failed, but a teardown's failure counts only when it was made with
    ``on_failure_fail_dagrun=True`` (Airflow ignores teardowns for the run's state unless
    so). ``states`` by task id, as a mapping or (task id, state) pairs (one per index of a
    mapped task)."""
    quiet = spec.quiet_teardowns
    if not quiet and isinstance(states, Mapping):
        return states.values()
    pairs = states.items() if isinstance(states, Mapping) else states
    if not quiet:
        return (state for _, state in pairs)
    return (
        TaskState.SUCCESS if task_id in quiet and state in FAILED_TASK_STATES else state
        for task_id, state in pairs
    )
