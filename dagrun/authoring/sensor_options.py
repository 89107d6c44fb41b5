"""A sensor's options, and when a poke that found its condition unmet ends the sensor.

Shared by the authoring API (``@task.sensor`` checks them), the spec (``TaskSpec.sensor``),
the runner (poke mode) and the store (reschedule mode): a module of its own, so that
importing ``dagrun`` to write a DAG file does not load the spec.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import NamedTuple


class SensorMode(StrEnum):
    """How a sensor waits between pokes: its attempt ends and the task instance waits in
    ``up_for_reschedule`` holding nothing, or its attempt keeps its worker slot and sleeps."""

    RESCHEDULE = "reschedule"
    POKE = "poke"


class SensorSpec(NamedTuple):
    """A sensor's options: seconds between pokes, seconds from its first poke until it gives
    up, its ``SensorMode``, and whether giving up skips it rather than fails it."""

    poke_interval: float
    timeout: float
    mode: str
    soft_fail: bool

    def gave_up(self, first_poke_at: datetime | None, now: datetime) -> bool:
        """Whether a poke that found its condition unmet at ``now`` ends the sensor: its
        timeout has passed since its first poke. A poke-mode attempt reports an unmet
        condition only once it has waited out the timeout itself."""
        if self.mode == SensorMode.POKE:
            return True
        first = first_poke_at or now
        return (now - first).total_seconds() >= self.timeout
