"""The documented import path of the built-in sensors (``from dagrun.sensors import
FileSensor``); they are defined with the runtime (``dagrun.runtime.sensors``), since their
pokes read the store and render templates while an attempt runs."""

from dagrun.runtime.sensors import ExternalTaskSensor, FileSensor, TimeDeltaSensor

__all__ = ["ExternalTaskSensor", "FileSensor", "TimeDeltaSensor"]
