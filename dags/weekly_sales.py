"""A rolling seven-day sales report, scheduled on the daily summary nightly_sales produces.

It has no clock of its own: the scheduler makes one run per day whose ``daily_summary``
partition has landed (``schedule=[Asset("daily_summary")]``), and runs that day again when
its summary really changes, not when it is only written again byte for byte.
"""

from datetime import date, timedelta

from dagrun import DAG, Asset, partition, task

with DAG(
    "weekly_sales",
    schedule=[Asset("daily_summary")],
    timezone="Asia/Dhaka",
    tags=["sales", "example"],
):

    @task
    def week_to_date(ds):
        """Revenue and orders per region over the seven days ending on ``ds`` (the days whose
        summary exists)."""
        import pandas as pd

        end = date.fromisoformat(ds)
        days = [(end - timedelta(days=n)).isoformat() for n in range(7)]
        found = [partition("daily_summary", d) for d in days]
        frames = [p.read(dtype={"region": str}) for p in found if p.exists()]
        summary = pd.concat(frames).groupby("region", as_index=False)[["orders", "revenue"]].sum()
        summary.insert(0, "week_ending", ds)
        written = partition("weekly_sales", ds).write(summary.round({"revenue": 2}))
        return {"days": len(frames), "regions": written.rows}

    week_to_date()
