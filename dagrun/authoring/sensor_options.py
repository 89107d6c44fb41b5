"""A sensor's options, when a poke that found its condition unmet ends the sensor and how
long it waits for the next one, what a poke may return, and what an external task marker
points at.

Shared by the authoring API (``@task.sensor`` checks them), the spec (``TaskSpec.sensor``,
``TaskSpec.marker``), the runner (poke mode) and the store (reschedule mode): a module of
its own, so that importing ``dagrun`` to write a DAG file does not load the spec.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple


class SensorMode(StrEnum):
    """How a sensor waits between pokes: its attempt ends and the task instance waits in
    ``up_for_reschedule`` holding nothing, or its attempt keeps its worker slot and sleeps."""

    RESCHEDULE = "reschedule"
    POKE = "poke"


class SensorSpec(NamedTuple):
    """A sensor's options: seconds between pokes, seconds from its first poke until it gives
    up, its ``SensorMode``, whether giving up skips it rather than fails it, whether the wait
    between pokes grows (``exponential_backoff``) and the longest such wait (``max_wait``,
    seconds; None: the timeout bounds it)."""

    poke_interval: float
    timeout: float
    mode: str
    soft_fail: bool
    exponential_backoff: bool = False
    max_wait: float | None = None

    def gave_up(self, first_poke_at: datetime | None, now: datetime) -> bool:
        """Whether a poke that found its condition unmet at ``now`` ends the sensor: its
        timeout has passed since its first poke. A poke-mode attempt reports an unmet
        condition only once it has waited out the timeout itself."""
        if self.mode == SensorMode.POKE:
            return True
        first = first_poke_at or now
        return (now - first).total_seconds() >= self.timeout

    def wait_after(self, elapsed: float, key: str, poke: int | None = None) -> float:
        """Seconds from an unmet poke to the next, ``elapsed`` seconds after the first poke.

        Without ``exponential_backoff``, ``poke_interval``. With it, Airflow's rule
        (``BaseSensorOperator._get_next_poke_interval``): the ``n``-th wait is at least
        ``poke_interval * 2 ** (n - 2)`` (and 1 s), plus a jitter below that amount fixed
        by a hash of ``key`` and ``n`` (so sensors started together spread out), never past
        the timeout nor ``max_wait``. A poke-mode attempt counts its pokes (``poke``); a
        rescheduled sensor's count is worked out from ``elapsed``, as Airflow 3 does.
        """
        if not self.exponential_backoff:
            return self.poke_interval
        n = poke if poke is not None else self._pokes_within(elapsed, key)
        wait = min(self._backoff(n, key), max(self.timeout - int(elapsed), 0.0))
        return wait if self.max_wait is None else min(wait, self.max_wait)

    def _backoff(self, n: int, key: str) -> float:
        import hashlib  # only a sensor with exponential backoff

        floor = max(int(self.poke_interval * 2.0 ** (n - 2)), 1)
        digest = hashlib.sha1(f"{key}#{n}".encode(), usedforsecurity=False).hexdigest()
        return float(floor + int(digest, 16) % floor)

    def _pokes_within(self, elapsed: float, key: str) -> int:
        """The number of the poke just made, had every wait since the first been the
        backoff's: the first whose waits so far add up past ``elapsed``."""
        n, waited = 0, 0.0
        while waited <= elapsed:
            n += 1
            waited += self._backoff(n, key)
        return n


class PokeReturnValue:
    """What a poke may return instead of a truthy or falsy value (Airflow's
    ``PokeReturnValue``): whether the sensor is done and, once it is, the task's return
    value, which may then be falsy (``PokeReturnValue(True, 0)``) or differ from what the
    check found."""

    def __init__(self, is_done: bool, xcom_value: Any = None) -> None:
        self.is_done = is_done
        self.xcom_value = xcom_value

    def __bool__(self) -> bool:
        return bool(self.is_done)

    def __repr__(self) -> str:
        return f"PokeReturnValue(is_done={self.is_done!r}, xcom_value={self.xcom_value!r})"


class ExternalMarker(NamedTuple):
    """What an external task marker points at: a task of another DAG, in its run at
    ``logical_date`` (a template, rendered with the marker's context when it is cleared),
    and how many DAGs deep clearing follows markers from it."""

    external_dag_id: str
    external_task_id: str
    logical_date: str
    recursion_depth: int = 10
