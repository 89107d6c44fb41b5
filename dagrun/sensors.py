"""The documented import path of the built-in sensors (``from dagrun.sensors import
FileSensor``) and what a poke may return; they are defined with the runtime
(``dagrun.runtime.sensors``), since their pokes read the store and render templates while
an attempt runs."""

from dagrun.runtime.sensors import (
    ExternalTaskMarker,
    ExternalTaskSensor,
    FileSensor,
    PokeReturnValue,
    TimeDeltaSensor,
)

__all__ = [
    "ExternalTaskMarker",
    "ExternalTaskSensor",
    "FileSensor",
    "PokeReturnValue",
    "TimeDeltaSensor",
]
