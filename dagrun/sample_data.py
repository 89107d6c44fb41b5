"""Deterministic sample data for the example pipeline: a day's raw sales and the customers.

Everything is generated from the logical day with ``random.Random`` seeded by a string
(seeding hashes the string with SHA-512, stable across processes and Python versions, unlike
``hash()``), so running a date twice, on any machine, yields the same rows: the property
the pipeline's byte-identical reruns are built on. Nothing is downloaded.

The raw sales carry the faults a real extract has, for the cleaning step to deal with:
missing customers, zero or negative quantities, order ids delivered twice, prices that do
not parse, and SKUs with stray whitespace and mixed case.
"""

from __future__ import annotations

import random
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

SALES_COLUMNS = ["order_id", "customer_id", "sku", "quantity", "unit_price", "sold_at"]
CUSTOMER_COLUMNS = ["customer_id", "name", "region", "segment", "signup_date"]

#: SKU -> list price; a sale's price varies a little around it.
CATALOG = {
    "RICE-5KG": 6.50,
    "LENTIL-1KG": 1.80,
    "TEA-500G": 4.20,
    "OIL-2L": 5.75,
    "SUGAR-1KG": 1.10,
    "FLOUR-2KG": 2.30,
    "SPICE-MIX": 3.40,
    "SOAP-4PK": 2.95,
    "MILK-1L": 0.95,
    "EGGS-12": 2.60,
}
REGIONS = ["Dhaka", "Chattogram", "Khulna", "Rajshahi", "Sylhet"]
SEGMENTS = ["consumer", "corporate", "small_business"]
FIRST_NAMES = [
    "Amina",
    "Rafi",
    "Nusrat",
    "Tanvir",
    "Farhana",
    "Imran",
    "Sadia",
    "Kamal",
    "Rumana",
    "Arif",
    "Nadia",
    "Shafiq",
]
LAST_NAMES = ["Rahman", "Hossain", "Islam", "Ahmed", "Chowdhury", "Khan", "Begum", "Sarkar"]

CUSTOMER_COUNT = 400
#: Customers sign up over two years from this day; a day's snapshot holds those signed up.
FIRST_SIGNUP = date(2025, 1, 1)
SIGNUP_SPAN_DAYS = 730
#: Share of raw sales rows carrying each kind of fault.
DIRT = {
    "missing_customer": 0.03,
    "bad_quantity": 0.03,
    "bad_price": 0.03,
    "currency_symbol": 0.04,
    "noisy_sku": 0.08,
    "duplicate": 0.04,
}
BAD_PRICES = ["N/A", "", "twelve", "1.2.3", "-"]


def customers(ds: str) -> pd.DataFrame:
    """The customer table as of ``ds``: everyone who signed up on or before that day."""
    import pandas as pd

    return pd.DataFrame(_customers_on(date.fromisoformat(ds)), columns=CUSTOMER_COLUMNS)


def _customers_on(day: date) -> list[dict[str, str]]:
    return [c for c in _all_customers() if date.fromisoformat(c["signup_date"]) <= day]


def _all_customers() -> list[dict[str, str]]:
    rng = random.Random("customers:v1")
    return [
        {
            "customer_id": f"C{number:04d}",
            "name": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
            "region": rng.choice(REGIONS),
            "segment": rng.choices(SEGMENTS, weights=[6, 1, 3])[0],
            "signup_date": (
                FIRST_SIGNUP + timedelta(days=rng.randrange(SIGNUP_SPAN_DAYS))
            ).isoformat(),
        }
        for number in range(1, CUSTOMER_COUNT + 1)
    ]


def raw_sales(ds: str) -> pd.DataFrame:
    """A day's sales as the source system exports them, faults included; all text, as in
    a CSV extract, except ``quantity``."""
    import pandas as pd

    day = date.fromisoformat(ds)
    rng = random.Random(f"sales:{ds}")
    known = [c["customer_id"] for c in _customers_on(day)]
    count = rng.randint(300, 420)
    rows = [_sale(rng, day, number, known) for number in range(1, count + 1)]
    duplicates = [dict(row) for row in rows if rng.random() < DIRT["duplicate"]]
    rows.extend(duplicates)
    rng.shuffle(rows)
    return pd.DataFrame(rows, columns=SALES_COLUMNS)


def _sale(rng: random.Random, day: date, number: int, known: list[str]) -> dict[str, object]:
    sku = rng.choice(sorted(CATALOG))
    price = CATALOG[sku] * rng.uniform(0.9, 1.1)
    sold_at = datetime.combine(day, time()) + timedelta(seconds=rng.randrange(86_400))
    row: dict[str, object] = {
        "order_id": f"O{day:%Y%m%d}-{number:05d}",
        "customer_id": rng.choice(known) if known else None,
        "sku": sku,
        "quantity": rng.choices([1, 2, 3, 4, 5, 10], weights=[40, 25, 15, 10, 7, 3])[0],
        "unit_price": f"{price:.2f}",
        "sold_at": sold_at.isoformat(sep=" "),
    }
    _soil(rng, row)
    return row


def _soil(rng: random.Random, row: dict[str, object]) -> None:
    """Give some rows the faults of a real extract, some fixable and some not."""
    if rng.random() < DIRT["missing_customer"]:
        row["customer_id"] = None
    if rng.random() < DIRT["bad_quantity"]:
        row["quantity"] = rng.choice([0, -1, -2, -5])
    if rng.random() < DIRT["bad_price"]:
        row["unit_price"] = rng.choice(BAD_PRICES)
    elif rng.random() < DIRT["currency_symbol"]:
        row["unit_price"] = f"${row['unit_price']}"
    if rng.random() < DIRT["noisy_sku"]:
        row["sku"] = _noisy(rng, str(row["sku"]))


def _noisy(rng: random.Random, sku: str) -> str:
    spaced = rng.choice([" ", "  ", "\t", ""]) + sku + rng.choice([" ", "", "  "])
    return spaced.lower() if rng.random() < 0.5 else spaced.title()
