"""Airflow's import paths and the names dagrun provides under each (DESIGN section 7.1).

Pure data, read by the import alias (``dagrun.parsing.airflow_alias``), which serves
``airflow...`` from it while DAG files are imported, and by ``dagrun dags check-airflow``,
which reads files without running them. A name is defined once, in the module of
``dagrun.airflow`` named in ``HOMES``; the same name under several of Airflow's paths (its
2.x paths, the standard provider's, the Task SDK's of 3.x) is the same object. A path or a
name missing here is one dagrun does not provide.
"""

from __future__ import annotations

#: Each provided name and the module of ``dagrun.airflow`` that defines it.
HOMES: dict[str, str] = {
    **dict.fromkeys(["DAG", "dag", "SdkDAG", "sdk_dag"], "dag"),
    **dict.fromkeys(
        [
            "BaseOperator",
            "EmptyOperator",
            "DummyOperator",
            "PythonOperator",
            "BranchPythonOperator",
            "ShortCircuitOperator",
            "get_current_context",
            "is_venv_installed",
        ],
        "operators",
    ),
    "EmailOperator": "email_operator",
    "BashOperator": "bash",
    **dict.fromkeys(
        [
            "PythonVirtualenvOperator",
            "ExternalPythonOperator",
            "BranchPythonVirtualenvOperator",
            "BranchExternalPythonOperator",
        ],
        "virtualenv",
    ),
    **dict.fromkeys(
        [
            "BaseSensorOperator",
            "PokeReturnValue",
            "PythonSensor",
            "BashSensor",
            "FileSensor",
            "TimeSensor",
            "TimeDeltaSensor",
            "DayOfWeekSensor",
            "WeekDay",
            "TimeSensorAsync",
            "TimeDeltaSensorAsync",
        ],
        "sensors",
    ),
    **dict.fromkeys(["ExternalTaskSensor", "ExternalTaskMarker"], "external_task"),
    **dict.fromkeys(["task", "task_group", "setup", "teardown"], "decorators"),
    **dict.fromkeys(
        ["chain", "chain_linear", "cross_downstream", "Label", "EdgeModifier", "TaskGroup"],
        "structure",
    ),
    **dict.fromkeys(["XComArg", "TaskInstance", "DagRun", "XCOM_RETURN_KEY"], "xcom"),
    **dict.fromkeys(
        [
            "AirflowException",
            "AirflowSkipException",
            "AirflowFailException",
            "AirflowSensorTimeout",
            "AirflowTaskTimeout",
            "AirflowNotFoundException",
            "AirflowBadRequest",
        ],
        "exceptions",
    ),
    **dict.fromkeys(
        [
            "Asset",
            "AssetAll",
            "AssetAny",
            "Dataset",
            "DatasetAll",
            "DatasetAny",
            "AssetOrTimeSchedule",
            "DatasetOrTimeSchedule",
        ],
        "assets",
    ),
    **dict.fromkeys(
        ["CronTriggerTimetable", "CronDataIntervalTimetable", "DeltaDataIntervalTimetable"],
        "timetables",
    ),
    **dict.fromkeys(
        [
            "Variable",
            "Param",
            "ParamsDict",
            "Connection",
            "BaseHook",
            "TriggerRule",
            "State",
            "DagRunState",
            "TaskInstanceState",
            "Context",
            "days_ago",
            "utcnow",
            "aware_datetime",
        ],
        "models",
    ),
    **dict.fromkeys(
        ["ds_add", "ds_format", "datetime", "timedelta", "dateutil", "random", "uuid", "time"],
        "macros",
    ),
}


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_PYTHON = "PythonOperator BranchPythonOperator ShortCircuitOperator PythonVirtualenvOperator "
_PYTHON += "ExternalPythonOperator BranchPythonVirtualenvOperator BranchExternalPythonOperator "
_PYTHON += "get_current_context is_venv_installed"
_SDK = """DAG dag task task_group TaskGroup BaseOperator BaseSensorOperator PokeReturnValue
    chain chain_linear cross_downstream Label EdgeModifier Asset AssetAll AssetAny Param
    ParamsDict Variable Connection BaseHook get_current_context setup teardown TriggerRule
    XComArg Context"""

#: Each Airflow module path dagrun serves, and the names it provides there.
PATHS: dict[str, tuple[str, ...]] = {
    "airflow": _names("DAG Dataset Asset XComArg"),
    "airflow.models": _names(
        "DAG BaseOperator Variable Param Connection TaskInstance DagRun XComArg"
    ),
    "airflow.models.dag": _names("DAG"),
    "airflow.models.baseoperator": _names("BaseOperator chain chain_linear cross_downstream"),
    "airflow.models.variable": _names("Variable"),
    "airflow.models.param": _names("Param ParamsDict"),
    "airflow.models.connection": _names("Connection"),
    "airflow.models.xcom_arg": _names("XComArg"),
    "airflow.models.xcom": _names("XCOM_RETURN_KEY"),
    "airflow.models.taskinstance": _names("TaskInstance"),
    "airflow.models.dagrun": _names("DagRun"),
    "airflow.decorators": _names("dag task task_group setup teardown"),
    "airflow.sdk": _names(_SDK),
    "airflow.sdk.definitions.asset": _names("Asset AssetAll AssetAny"),
    "airflow.sdk.bases.operator": _names("BaseOperator chain chain_linear cross_downstream"),
    "airflow.sdk.bases.sensor": _names("BaseSensorOperator PokeReturnValue"),
    "airflow.operators.bash": _names("BashOperator"),
    "airflow.operators.python": _names(_PYTHON),
    "airflow.operators.empty": _names("EmptyOperator"),
    "airflow.operators.dummy": _names("DummyOperator EmptyOperator"),
    "airflow.operators.email": _names("EmailOperator"),
    # Airflow 2's deprecated module names, which it still serves.
    "airflow.operators.dummy_operator": _names("DummyOperator EmptyOperator"),
    "airflow.operators.bash_operator": _names("BashOperator"),
    "airflow.operators.python_operator": _names(_PYTHON),
    "airflow.operators.email_operator": _names("EmailOperator"),
    "airflow.sensors.base_sensor_operator": _names("BaseSensorOperator"),
    "airflow.sensors.external_task_sensor": _names("ExternalTaskSensor ExternalTaskMarker"),
    "airflow.sensors.time_delta_sensor": _names("TimeDeltaSensor"),
    "airflow.providers.standard.operators.email": _names("EmailOperator"),
    "airflow.providers.standard.operators.bash": _names("BashOperator"),
    "airflow.providers.standard.operators.python": _names(_PYTHON),
    "airflow.providers.standard.operators.empty": _names("EmptyOperator"),
    "airflow.sensors.base": _names("BaseSensorOperator PokeReturnValue"),
    "airflow.sensors.bash": _names("BashSensor"),
    "airflow.sensors.python": _names("PythonSensor"),
    "airflow.sensors.filesystem": _names("FileSensor"),
    "airflow.sensors.time_sensor": _names("TimeSensor TimeSensorAsync"),
    "airflow.sensors.time_delta": _names("TimeDeltaSensor TimeDeltaSensorAsync"),
    "airflow.sensors.weekday": _names("DayOfWeekSensor"),
    "airflow.sensors.external_task": _names("ExternalTaskSensor ExternalTaskMarker"),
    "airflow.providers.standard.sensors.bash": _names("BashSensor"),
    "airflow.providers.standard.sensors.python": _names("PythonSensor"),
    "airflow.providers.standard.sensors.filesystem": _names("FileSensor"),
    "airflow.providers.standard.sensors.time": _names("TimeSensor TimeSensorAsync"),
    "airflow.providers.standard.sensors.time_delta": _names("TimeDeltaSensor TimeDeltaSensorAsync"),
    "airflow.providers.standard.sensors.weekday": _names("DayOfWeekSensor"),
    "airflow.providers.standard.sensors.external_task": _names(
        "ExternalTaskSensor ExternalTaskMarker"
    ),
    "airflow.providers.standard.utils.weekday": _names("WeekDay"),
    "airflow.utils.weekday": _names("WeekDay"),
    "airflow.utils.trigger_rule": _names("TriggerRule"),
    "airflow.sdk.api.datamodels._generated": _names("TriggerRule"),
    "airflow.utils.edgemodifier": _names("Label EdgeModifier"),
    "airflow.utils.task_group": _names("TaskGroup"),
    "airflow.utils.helpers": _names("chain cross_downstream"),
    "airflow.utils.dates": _names("days_ago"),
    "airflow.utils.timezone": _names("utcnow datetime"),
    "airflow.utils.state": _names("State DagRunState TaskInstanceState"),
    "airflow.utils.context": _names("Context"),
    "airflow.exceptions": _names(
        "AirflowException AirflowSkipException AirflowFailException AirflowSensorTimeout "
        "AirflowTaskTimeout AirflowNotFoundException AirflowBadRequest"
    ),
    "airflow.hooks.base": _names("BaseHook"),
    "airflow.datasets": _names("Dataset DatasetAll DatasetAny"),
    "airflow.timetables.trigger": _names("CronTriggerTimetable"),
    "airflow.timetables.interval": _names("CronDataIntervalTimetable DeltaDataIntervalTimetable"),
    "airflow.timetables.datasets": _names("DatasetOrTimeSchedule"),
    "airflow.timetables.assets": _names("AssetOrTimeSchedule"),
    "airflow.macros": _names("ds_add ds_format datetime timedelta dateutil random uuid time"),
}

#: Names served by another attribute on some paths: Airflow 3's Task SDK (``airflow.sdk``)
#: gives DAGs Airflow 3's defaults (no schedule, no catchup, cron as a trigger), so its
#: ``DAG`` and ``dag`` are their own; ``airflow.utils.timezone.datetime`` makes aware
#: datetimes, unlike ``macros.datetime``, the class.
RENAMED: dict[tuple[str, str], str] = {
    ("airflow.sdk", "DAG"): "SdkDAG",
    ("airflow.sdk", "dag"): "sdk_dag",
    ("airflow.utils.timezone", "datetime"): "aware_datetime",
}

#: The version a DAG file reads from ``airflow.__version__``: the 2.x line, whose import
#: paths files written for both lines take.
VERSION = "2.10.5"


def provided(path: str, name: str) -> str | None:
    """The ``dagrun.airflow`` module and attribute that serve ``from PATH import NAME``, as
    ``module:attribute``; None when dagrun does not provide it."""
    if name not in PATHS.get(path, ()):
        return None
    attribute = RENAMED.get((path, name), name)
    return f"dagrun.airflow.{HOMES[attribute]}:{attribute}"


def is_package(path: str) -> bool:
    """Whether some served path lies below ``path`` (``airflow.operators`` for
    ``airflow.operators.bash``), so it can be imported as a package."""
    prefix = path + "."
    return any(known.startswith(prefix) for known in PATHS)
