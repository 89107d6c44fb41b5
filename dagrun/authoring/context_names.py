"""The names a task callable may declare and a template may read (DESIGN section 2).

A leaf: the authoring API checks a DAG file against them when it is parsed, and the
runtime's ``TaskContext`` provides each of them while an attempt runs.
"""

#: Every name an attempt's context provides, each a :class:`TaskContext` attribute. Templates
#: and task callables get exactly these (``names()``), and the checks made when a DAG file is
#: parsed accept exactly these, so a new name is added here and as an attribute, nowhere else.
CONTEXT_NAMES = (
    "ds",
    "ds_nodash",
    "ts",
    "ts_nodash",
    "logical_date",
    "data_interval_start",
    "data_interval_end",
    "run_id",
    "dag_id",
    "task_id",
    "try_number",
    "params",
    "conf",
    "macros",
    "ctx",
    "idempotency_key",
    "fence_token",
    "var",
    "conn",
)

#: The context names whose values are plain data (text, numbers, aware datetimes, dicts of
#: them), so that they can be passed to a function running in another interpreter
#: (``dagrun.authoring.python_environments``); the others (``ctx``, ``macros``, ``var``,
#: ``conn``) are objects of this process. Listed, not derived, so that a new name crosses
#: only once someone has said its value can: a new name that is plain data is added here too.
PORTABLE_CONTEXT_NAMES = (
    "ds",
    "ds_nodash",
    "ts",
    "ts_nodash",
    "logical_date",
    "data_interval_start",
    "data_interval_end",
    "run_id",
    "dag_id",
    "task_id",
    "try_number",
    "params",
    "conf",
    "idempotency_key",
    "fence_token",
)

#: Not a context name, but a parameter any Python task's function may declare: its
#: ``templates_dict`` rendered for the attempt (None when the task has none), as Airflow's
#: PythonOperator and virtualenv tasks pass it.
TEMPLATES_DICT = "templates_dict"
