"""The state vocabulary shared by the store, scheduler, workers and web page.

States are string enums so that the database holds readable words and the code never
compares against loose string literals.
"""

from __future__ import annotations

from enum import StrEnum


class RunType(StrEnum):
    SCHEDULED = "scheduled"
    BACKFILL = "backfill"
    MANUAL = "manual"
    #: Made when the assets a DAG is scheduled on have events for a partition key.
    ASSET = "asset"


class RunState(StrEnum):
    """waiting (for a max_active_runs slot) -> queued (admitted) -> running -> success | failed."""

    WAITING = "waiting"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"

    @property
    def active(self) -> bool:
        """Queued and running runs count against ``max_active_runs``."""
        return self in ACTIVE_RUN_STATES


ACTIVE_RUN_STATES = frozenset({RunState.QUEUED, RunState.RUNNING})


class TaskState(StrEnum):
    NONE = "none"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    #: A sensor between pokes (reschedule mode): no process, no slot, no lease; due again
    #: at ``next_try_at``.
    UP_FOR_RESCHEDULE = "up_for_reschedule"
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"

    @property
    def finished(self) -> bool:
        return self in FINISHED_TASK_STATES


FINISHED_TASK_STATES = frozenset(
    {TaskState.SUCCESS, TaskState.FAILED, TaskState.UPSTREAM_FAILED, TaskState.SKIPPED}
)
FAILED_TASK_STATES = frozenset({TaskState.FAILED, TaskState.UPSTREAM_FAILED})

#: How a mapped task's instances add up to one state (for readiness and the grid): the
#: highest rank present decides. One waiting (cleared, or not expanded yet), one
#: unfinished, one failed, one upstream_failed, one success; else all were skipped.
_MAPPED_RANK = {
    **{s: 5 for s in TaskState if s not in FINISHED_TASK_STATES},
    TaskState.NONE: 6,
    TaskState.FAILED: 4,
    TaskState.UPSTREAM_FAILED: 3,
    TaskState.SUCCESS: 2,
    TaskState.SKIPPED: 1,
}


def merged(known: TaskState, other: TaskState) -> TaskState:
    """The state of a mapped task with instances in ``known`` and ``other``."""
    return other if _MAPPED_RANK[other] > _MAPPED_RANK[known] else known


class AttemptOutcome(StrEnum):
    """How one attempt ended; exactly one is recorded for every attempt."""

    SUCCESS = "success"
    FAILED = "failed"
    NON_RETRYABLE = "non_retryable"
    TIMED_OUT = "timed_out"
    CRASHED = "crashed"
    #: Never ran through no fault of the task (its log could not be written, its child
    #: died before it started): counts against the infrastructure budget, not ``retries``.
    INFRA_FAILED = "infra_failed"
    LEASE_EXPIRED = "lease_expired"
    STALE = "stale"
    RELEASED = "released"
    #: A sensor's poke found its condition unmet (reschedule mode): poke again later.
    RESCHEDULED = "rescheduled"
    #: The task asked to be skipped (``SkipTask``, a BashTask's ``skip_on_exit_code``).
    SKIPPED = "skipped"


class CallbackEvent(StrEnum):
    """What a callback hears of: a task instance's end (or retry), a run's end."""

    TASK_SUCCESS = "task_success"
    TASK_RETRY = "task_retry"
    TASK_FAILURE = "task_failure"
    RUN_SUCCESS = "run_success"
    RUN_FAILURE = "run_failure"


class CallbackState(StrEnum):
    """pending (written with the event) -> running (leased to a worker) -> sent | failed.
    A callback whose worker was lost ends failed rather than fire twice."""

    PENDING = "pending"
    RUNNING = "running"
    SENT = "sent"
    FAILED = "failed"


class TriggerRule(StrEnum):
    """When a task may run given its upstream states, with Airflow's meanings; each is
    stated as sets in ``dagrun.store.readiness._RULES``. Airflow's deprecated names
    (``TRIGGER_RULE_ALIASES``) give the rule they stand for: ``TriggerRule("dummy")`` is
    ``ALWAYS``, so a task made with one records the canonical value."""

    ALL_SUCCESS = "all_success"
    ALL_DONE = "all_done"
    ALL_FAILED = "all_failed"
    ONE_SUCCESS = "one_success"
    ONE_FAILED = "one_failed"
    ONE_DONE = "one_done"
    NONE_FAILED = "none_failed"
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    NONE_SKIPPED = "none_skipped"
    ALL_SKIPPED = "all_skipped"
    ALL_DONE_MIN_ONE_SUCCESS = "all_done_min_one_success"
    #: A teardown's rule (``Task.as_teardown``): every upstream finished and, if any of its
    #: direct upstream tasks are setups, at least one of those succeeded.
    ALL_DONE_SETUP_SUCCESS = "all_done_setup_success"
    ALWAYS = "always"

    @classmethod
    def _missing_(cls, value: object) -> TriggerRule | None:
        alias = TRIGGER_RULE_ALIASES.get(value) if isinstance(value, str) else None
        return None if alias is None else cls(alias)


#: Airflow's deprecated rule names and the rules they mean (Airflow 2 accepted both).
TRIGGER_RULE_ALIASES = {
    "none_failed_or_skipped": TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS.value,
    "dummy": TriggerRule.ALWAYS.value,
}
