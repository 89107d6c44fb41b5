"""Airflow's API over dagrun's own (DESIGN section 7.1): a DAG file written for Airflow 2.x
or 3.x imports ``airflow...`` and gets these modules (``dagrun.parsing.airflow_alias``), so it
runs unchanged with Airflow's meaning.

A thin layer: each Airflow name builds the same task graph as the native API, and where
Airflow's meaning and dagrun's differ the native API has the option (``skip_on_exit_code``,
``ignore_downstream_trigger_rules``, setup and teardown tasks ...). It sits above the runtime,
beside the web app, because a DAG file uses the runtime too (variables, connections, sensors
that read the store, the running task's context).
"""
