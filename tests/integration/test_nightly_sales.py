"""The example pipeline through the real CLI: a 14-day backfill, then the same range again
with ``--reset``. Every task runs twice, every partition comes out byte-identical, nothing is
appended, and the second writes are recorded as unchanged."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import select

from dagrun.sample_data import CATALOG
from dagrun.store import Store
from dagrun.store.schema import partition_write, task_attempt
from tests.helpers import run_cli

REPO = Path(__file__).resolve().parents[2]
DAYS = [f"2026-01-{day:02d}" for day in range(1, 15)]
TASKS = [
    "extract_sales",
    "clean_sales",
    "load_customers",
    "build_daily_summary",
    "refresh_dashboard",
]
DATASETS = ["raw_sales", "clean_sales", "customers", "daily_summary"]
BACKFILL = ("backfill", "nightly_sales", "--start", DAYS[0], "--end", DAYS[-1])


def file_hashes(root: Path) -> dict[str, str]:
    """Every file under the data root (temporary files included) -> its sha256."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def recorded_writes(db_url: str) -> list[dict]:
    store = Store(db_url, create=False)
    try:
        with store.read() as conn:
            rows = conn.execute(select(partition_write).order_by(partition_write.c.id))
            return [dict(r) for r in rows.mappings()]
    finally:
        store.dispose()


def attempts(db_url: str) -> list[dict]:
    store = Store(db_url, create=False)
    try:
        with store.read() as conn:
            return [dict(r) for r in conn.execute(select(task_attempt)).mappings()]
    finally:
        store.dispose()


def backfill(cli_env: dict[str, str], *extra: str) -> None:
    done = run_cli(*BACKFILL, *extra, env=cli_env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "runs 14 succeeded, 0 failed" in done.stdout


@pytest.fixture
def pipeline(cli_env: dict[str, str], dags_dir: Path) -> dict[str, str]:
    shutil.copy(REPO / "dags" / "nightly_sales.py", dags_dir / "nightly_sales.py")
    return cli_env


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_reset_backfill_rewrites_every_partition_byte_identically(pipeline):
    data = Path(pipeline["DAGRUN_DATA"])
    db_url = pipeline["DAGRUN_DB_URL"]

    backfill(pipeline)
    files = file_hashes(data)
    first = recorded_writes(db_url)
    expected_files = {f"{d}/ds={day}/part.csv" for d in DATASETS for day in DAYS}
    expected_files |= {f"dashboard/ds={day}/dashboard.html" for day in DAYS}
    assert set(files) == expected_files
    assert len(first) == len(DATASETS) * len(DAYS)
    assert not any(w["unchanged"] for w in first)
    for write in first:
        assert write["sha256"] == files[str(Path(write["path"]).relative_to(data))]
        assert write["rows"] == len(pd.read_csv(write["path"]))

    backfill(pipeline, "--reset")
    runs = json.loads(run_cli("runs", "list", "nightly_sales", "--json", env=pipeline).stdout)
    assert len(runs) == len(DAYS)
    assert {r["state"] for r in runs} == {"success"}
    assert len({r["logical_date"] for r in runs}) == len(DAYS)

    history = attempts(db_url)
    per_instance = Counter(a["ti_id"] for a in history)
    assert len(per_instance) == len(DAYS) * len(TASKS)
    assert set(per_instance.values()) == {2}
    assert Counter(a["task_id"] for a in history) == {t: 2 * len(DAYS) for t in TASKS}
    assert {a["outcome"] for a in history} == {"success"}

    assert file_hashes(data) == files
    second = recorded_writes(db_url)[len(first) :]
    assert len(second) == len(first)
    assert all(w["unchanged"] for w in second)
    by_key = {(w["dataset"], w["partition_key"]): w for w in first}
    for write in second:
        before = by_key[(write["dataset"], write["partition_key"])]
        assert (write["sha256"], write["rows"]) == (before["sha256"], before["rows"])
        assert write["ti_id"] == before["ti_id"]
        assert write["fence_token"] > before["fence_token"]


def test_the_pipeline_cleans_joins_and_summarises(pipeline):
    """One day through the pipeline: the faults are gone and the summary adds up."""
    done = run_cli(
        "backfill", "nightly_sales", "--start", DAYS[0], "--end", DAYS[0], env=pipeline, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    day = Path(pipeline["DAGRUN_DATA"])
    raw = pd.read_csv(day / "raw_sales" / f"ds={DAYS[0]}" / "part.csv", dtype=str)
    clean = pd.read_csv(day / "clean_sales" / f"ds={DAYS[0]}" / "part.csv")
    summary = pd.read_csv(day / "daily_summary" / f"ds={DAYS[0]}" / "part.csv")
    dashboard = (day / "dashboard" / f"ds={DAYS[0]}" / "dashboard.html").read_text()

    assert raw["order_id"].duplicated().any() and raw["customer_id"].isna().any()
    assert 0.8 * raw["order_id"].nunique() < len(clean) < raw["order_id"].nunique()
    assert clean["order_id"].is_unique and clean["order_id"].is_monotonic_increasing
    assert clean["customer_id"].notna().all()
    assert (clean["quantity"] > 0).all() and (clean["unit_price"] > 0).all()
    assert set(clean["sku"]) <= set(CATALOG)
    assert (clean["amount"] - clean["quantity"] * clean["unit_price"]).abs().max() < 0.006

    assert summary["orders"].sum() == len(clean)
    assert summary["units"].sum() == clean["quantity"].sum()
    assert summary["revenue"].sum() == pytest.approx(clean["amount"].sum(), abs=0.01)
    assert not summary.duplicated(["region", "segment"]).any()
    assert f"Nightly sales, {DAYS[0]}" in dashboard
    assert dashboard.count("<tr>") == len(summary) + 1
    assert f"Revenue: {summary['revenue'].sum():.2f}" in dashboard
