"""The names a task callable may declare and a template may read (DESIGN sections 2 and 7.1).

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

#: Airflow's context names beside dagrun's (DESIGN 7.1), each a :class:`TaskContext`
#: attribute computed only when asked for: a template renders with the names it uses, a
#: callable gets the ones it declares, and only a task made by ``dagrun.airflow`` gets them
#: all through ``**kwargs`` (a native task's ``**kwargs`` keeps getting ``CONTEXT_NAMES``).
AIRFLOW_CONTEXT_NAMES = (
    "ti",
    "task_instance",
    "task",
    "dag",
    "dag_run",
    "run_type",
    "map_index",
    "task_instance_key_str",
    "execution_date",
    "next_ds",
    "next_ds_nodash",
    "next_execution_date",
    "prev_ds",
    "prev_ds_nodash",
    "prev_execution_date",
    "yesterday_ds",
    "yesterday_ds_nodash",
    "tomorrow_ds",
    "tomorrow_ds_nodash",
    "ts_nodash_with_tz",
    "prev_data_interval_start_success",
    "prev_data_interval_end_success",
    "prev_start_date_success",
    "prev_end_date_success",
    "inlets",
    "outlets",
    "test_mode",
    "triggering_asset_events",
    "triggering_dataset_events",
)

#: What the checks made when a file is parsed accept.
ALL_CONTEXT_NAMES = CONTEXT_NAMES + AIRFLOW_CONTEXT_NAMES

#: dagrun's context names whose values are objects of this process (the context itself,
#: the macros module, the variable and connection accessors): they cannot be passed to a
#: function running in another interpreter. A new name that is such an object goes here.
PROCESS_OBJECTS = frozenset({"ctx", "macros", "var", "conn"})

#: The context names whose values are plain data (text, numbers, aware datetimes, dicts of
#: them), so that they can be passed to a function running in another interpreter
#: (``dagrun.authoring.python_environments``).
PORTABLE_CONTEXT_NAMES = tuple(n for n in CONTEXT_NAMES if n not in PROCESS_OBJECTS)

#: Not a context name, but a parameter any Python task's function may declare: its
#: ``templates_dict`` rendered for the attempt (None when the task has none), as Airflow's
#: PythonOperator and virtualenv tasks pass it.
TEMPLATES_DICT = "templates_dict"
