"""Sample data: the same day gives the same bytes in any process; it is dirty on purpose."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from dagrun import sample_data

DAY = "2026-01-05"

DIGEST_SCRIPT = """
import hashlib, sys
from dagrun import sample_data
for make in (sample_data.raw_sales, sample_data.customers):
    print(hashlib.sha256(make(sys.argv[1]).to_csv(index=False).encode()).hexdigest())
"""


def csv_bytes(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()


def digests_in_fresh_process(ds: str, hash_seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run(
        [sys.executable, "-c", DIGEST_SCRIPT, ds],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.split()


@pytest.mark.slow
def test_same_day_gives_identical_bytes_in_any_process():
    """Seeds come from the date, never from hash() (randomised per process) or the clock."""
    assert digests_in_fresh_process(DAY, "1") == digests_in_fresh_process(DAY, "2")
    assert csv_bytes(sample_data.raw_sales(DAY)) == csv_bytes(sample_data.raw_sales(DAY))


def test_different_days_differ():
    sales = [csv_bytes(sample_data.raw_sales(f"2026-01-{d:02d}")) for d in range(1, 8)]
    assert len(set(sales)) == 7


def test_columns_are_the_documented_ones():
    assert list(sample_data.raw_sales(DAY).columns) == sample_data.SALES_COLUMNS
    assert list(sample_data.customers(DAY).columns) == sample_data.CUSTOMER_COLUMNS


def test_raw_sales_carry_every_kind_of_fault():
    sales = sample_data.raw_sales(DAY)
    prices = sales["unit_price"]
    unparsable = pd.to_numeric(prices.str.removeprefix("$"), errors="coerce").isna()
    skus = sales["sku"]
    assert sales["customer_id"].isna().sum() > 0
    assert (sales["quantity"] <= 0).sum() > 0
    assert sales["order_id"].duplicated().sum() > 0
    assert unparsable.sum() > 0
    assert prices.str.startswith("$").sum() > 0
    assert (skus != skus.str.strip()).sum() > 0
    assert (skus.str.strip() != skus.str.strip().str.upper()).sum() > 0
    assert set(skus.str.strip().str.upper()) <= set(sample_data.CATALOG)


def test_most_rows_are_clean():
    sales = sample_data.raw_sales(DAY)
    parsable = pd.to_numeric(sales["unit_price"], errors="coerce").notna()
    clean = sales["customer_id"].notna() & (sales["quantity"] > 0) & parsable
    assert clean.mean() > 0.8


def test_sales_reference_only_customers_signed_up_by_that_day():
    for ds in ("2025-03-01", DAY, "2026-06-30"):
        known = set(sample_data.customers(ds)["customer_id"])
        buyers = set(sample_data.raw_sales(ds)["customer_id"].dropna())
        assert buyers <= known, ds


def test_customers_grow_over_time_with_stable_attributes():
    early, late = sample_data.customers("2025-06-01"), sample_data.customers(DAY)
    assert 0 < len(early) < len(late) <= sample_data.CUSTOMER_COUNT
    assert late["customer_id"].is_unique
    merged = early.merge(late, on="customer_id", suffixes=("_early", "_late"))
    assert len(merged) == len(early)
    for column in ("name", "region", "segment", "signup_date"):
        assert (merged[f"{column}_early"] == merged[f"{column}_late"]).all()
    assert (late["signup_date"] <= DAY).all()


def test_bad_day_is_refused():
    with pytest.raises(ValueError, match="2026-02-30"):
        sample_data.raw_sales("2026-02-30")
