"""What a worker hands its attempt children and what comes back: an attempt's or a
callback event's request and an attempt's result, plain data sent over a pipe.

Apart from what runs them (``runner``, ``callback_runner``), so that what only builds,
sends and reads them (``jobs``, ``pacing``, the worker, the CLI) imports none of what
running a task takes. Children forked before the worker has other threads import the
runners themselves; a later child finds them imported by the worker before the fork
(``attempt_pool.load_runners``), since importing after a fork can wait forever on a module
another thread of the worker was importing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dagrun.states import AttemptOutcome, CallbackEvent
from dagrun.store.logfiles import LogRange

if TYPE_CHECKING:
    from dagrun.runtime.context import TaskContext


@dataclass(frozen=True)
class AttemptRequest:
    """Everything a child needs to run one attempt; plain data, sent over a pipe."""

    dag_id: str
    task_id: str
    fileloc: str
    timezone: str
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    try_number: int = 1
    fence_token: int = 0
    ti_id: int | None = None
    #: The element of a mapped task this attempt runs (-1: not mapped).
    map_index: int = -1
    #: The run's conf as given; declared params are checked against it per attempt.
    conf: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    log_dir: str | None = None
    db_url: str | None = None
    #: The run's key in ``db_url`` (XComs are read by it).
    run_pk: int | None = None
    #: Whether the attempt runs under ``dagrun tasks test`` (Airflow's ``test_mode``).
    test_mode: bool = False
    #: Where other DAGs' runs are read (an ExternalTaskSensor): the real store while
    #: ``dagrun test`` runs in a private one; None: ``db_url``.
    history_url: str | None = None
    #: A sensor pokes once and hands its wait to the store, whatever its mode (``dagrun
    #: test`` runs one attempt at a time: a sensor waiting in poke mode would hold it).
    poke_once: bool = False

    @property
    def label(self) -> str:
        """What the worker's log calls it."""
        return f"{self.dag_id}.{self.task_id}{index_label(self)} try {self.try_number}"

    def context(self) -> TaskContext:
        from dagrun.runtime.context import make_context  # the child's, running the attempt

        return make_context(
            dag_id=self.dag_id,
            task_id=self.task_id,
            run_id=self.run_id,
            timezone=self.timezone,
            logical_date=self.logical_date,
            data_interval_start=self.data_interval_start,
            data_interval_end=self.data_interval_end,
            try_number=self.try_number,
            conf=self.conf,
            fence_token=self.fence_token,
            ti_id=self.ti_id,
            db_url=self.db_url,
            run_pk=self.run_pk,
            map_index=self.map_index,
            test_mode=self.test_mode,
            history_url=self.history_url,
            poke_once=self.poke_once,
        )


def index_label(request: AttemptRequest | CallbackRequest) -> str:
    """``[i]`` after a mapped task's id, as logs name its instances."""
    return f"[{request.map_index}]" if request.map_index >= 0 else ""


@dataclass(frozen=True)
class AttemptResult:
    """How an attempt ended, as its child reports it to the worker."""

    outcome: AttemptOutcome
    error: str | None = None
    return_value: str | None = None
    duration: float = 0.0
    log: LogRange | None = None
    #: What the task pushed besides its return value, key -> JSON text.
    xcoms: dict[str, str] | None = None


@dataclass(frozen=True)
class CallbackRequest:
    """Everything a child needs to deliver one event; plain data, sent over a pipe. The
    task fields are None for a run's event."""

    id: int
    event: CallbackEvent
    dag_id: str
    task_id: str | None
    fileloc: str
    timezone: str
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    try_number: int | None = None
    fence_token: int | None = None
    ti_id: int | None = None
    map_index: int = -1
    error: str | None = None
    conf: dict[str, Any] = field(default_factory=dict)
    log_dir: str | None = None
    db_url: str | None = None
    run_pk: int | None = None

    @property
    def label(self) -> str:
        """What the worker's log calls it."""
        where = (
            f"{self.dag_id}.{self.task_id}{index_label(self)}"
            if self.task_id
            else f"{self.dag_id} {self.run_id}"
        )
        return f"{self.event.value} callback of {where}"
