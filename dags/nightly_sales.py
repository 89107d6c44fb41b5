"""Nightly sales: extract, clean, join with customers, summarise, refresh a dashboard."""

from dagrun import DAG, BashTask, task

with DAG(
    "nightly_sales",
    schedule="30 0 * * *",
    start_date="2026-01-01",
    timezone="Asia/Dhaka",
    catchup=True,
    max_active_runs=4,
    default_args={"retries": 2, "retry_delay": 1, "max_retry_delay": 30},
    tags=["sales", "example"],
) as dag:

    @task
    def extract_sales(ds):
        return {"ds": ds}

    @task
    def clean_sales(raw, ds):
        return {"ds": ds, "rows": 0}

    @task
    def load_customers(ds):
        return {"ds": ds}

    @task(trigger_rule="all_success")
    def build_daily_summary(ds):
        return {"ds": ds}

    refresh_dashboard = BashTask("refresh_dashboard", command="echo refreshed {{ ds }}")

    cleaned = clean_sales(extract_sales())
    summary = build_daily_summary()
    [cleaned, load_customers()] >> summary >> refresh_dashboard
