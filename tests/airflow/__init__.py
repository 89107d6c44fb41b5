"""Airflow DAG files run unchanged (DESIGN 7.1): files written in Airflow's style, in the
tests themselves, parsed and run through dagrun's compatibility package."""
