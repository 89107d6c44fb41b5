"""Deterministic sample data for the example pipeline: a day's raw sales and the customers.

Every value is drawn from a ``random.Random`` seeded with a string naming the day (never
``hash()``, which differs per process, nor the clock), and only through its ``random()``
method: the one draw Python promises to keep identical across versions for a given seed
(``choice``, ``randrange`` and ``shuffle`` may change). So a date yields the same rows in any
process, on any machine: the property the pipeline's byte-identical reruns are built on.
Nothing is downloaded.

The raw sales carry the faults a real extract has, for the cleaning step to deal with:
missing customers, zero or negative quantities, order ids delivered twice, prices with a
currency symbol or that do not parse, and SKUs with stray whitespace and mixed case.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import pandas as pd

T = TypeVar("T")

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


class _Draws:
    """Random draws built on ``random()`` alone, so the data survives Python upgrades."""

    def __init__(self, seed: str):
        self._rng = random.Random(seed)

    def chance(self, probability: float) -> bool:
        return self._rng.random() < probability

    def below(self, bound: int) -> int:
        return int(self._rng.random() * bound)

    def between(self, low: float, high: float) -> float:
        return low + (high - low) * self._rng.random()

    def pick(self, items: Sequence[T], weights: Sequence[float] | None = None) -> T:
        if weights is None:
            return items[self.below(len(items))]
        point = self._rng.random() * sum(weights)
        for item, weight in zip(items, weights, strict=True):
            point -= weight
            if point < 0:
                return item
        return items[-1]

    def shuffled(self, items: Sequence[T]) -> list[T]:
        keys = [self._rng.random() for _ in items]
        return [items[i] for i in sorted(range(len(items)), key=keys.__getitem__)]


def customers(ds: str) -> pd.DataFrame:
    """The customer table as of ``ds``: everyone who signed up on or before that day."""
    import pandas as pd

    return pd.DataFrame(_customers_on(_day(ds)), columns=CUSTOMER_COLUMNS)


def raw_sales(ds: str) -> pd.DataFrame:
    """A day's sales as the source system exports them, faults included; all text, as in
    a CSV extract, except ``quantity``."""
    import pandas as pd

    day = _day(ds)
    draw = _Draws(f"sales:{day.isoformat()}")
    known = [c["customer_id"] for c in _customers_on(day)]
    count = 300 + draw.below(120)
    rows = [_sale(draw, day, number, known) for number in range(1, count + 1)]
    rows.extend(dict(row) for row in rows if draw.chance(DIRT["duplicate"]))
    return pd.DataFrame(draw.shuffled(rows), columns=SALES_COLUMNS)


def _day(ds: str) -> date:
    try:
        return date.fromisoformat(ds)
    except (TypeError, ValueError):
        raise ValueError(f"ds must be a 'YYYY-MM-DD' day, not {ds!r}") from None


def _customers_on(day: date) -> list[dict[str, str]]:
    return [c for c in _all_customers() if date.fromisoformat(c["signup_date"]) <= day]


@functools.cache
def _all_customers() -> tuple[dict[str, str], ...]:
    """Every customer there will ever be; cached, as every day's sales and snapshot need it."""
    draw = _Draws("customers:v1")
    return tuple(
        {
            "customer_id": f"C{number:04d}",
            "name": f"{draw.pick(FIRST_NAMES)} {draw.pick(LAST_NAMES)}",
            "region": draw.pick(REGIONS),
            "segment": draw.pick(SEGMENTS, weights=[6, 1, 3]),
            "signup_date": (
                FIRST_SIGNUP + timedelta(days=draw.below(SIGNUP_SPAN_DAYS))
            ).isoformat(),
        }
        for number in range(1, CUSTOMER_COUNT + 1)
    )


def _sale(draw: _Draws, day: date, number: int, known: list[str]) -> dict[str, object]:
    sku = draw.pick(sorted(CATALOG))
    price = CATALOG[sku] * draw.between(0.9, 1.1)
    sold_at = datetime.combine(day, time()) + timedelta(seconds=draw.below(86_400))
    row: dict[str, object] = {
        "order_id": f"O{day:%Y%m%d}-{number:05d}",
        "customer_id": draw.pick(known) if known else None,
        "sku": sku,
        "quantity": draw.pick([1, 2, 3, 4, 5, 10], weights=[40, 25, 15, 10, 7, 3]),
        "unit_price": f"{price:.2f}",
        "sold_at": sold_at.isoformat(sep=" "),
    }
    _soil(draw, row)
    return row


def _soil(draw: _Draws, row: dict[str, object]) -> None:
    """Give some rows the faults of a real extract, some fixable and some not."""
    if draw.chance(DIRT["missing_customer"]):
        row["customer_id"] = None
    if draw.chance(DIRT["bad_quantity"]):
        row["quantity"] = draw.pick([0, -1, -2, -5])
    if draw.chance(DIRT["bad_price"]):
        row["unit_price"] = draw.pick(BAD_PRICES)
    elif draw.chance(DIRT["currency_symbol"]):
        row["unit_price"] = f"${row['unit_price']}"
    if draw.chance(DIRT["noisy_sku"]):
        row["sku"] = _noisy(draw, str(row["sku"]))


def _noisy(draw: _Draws, sku: str) -> str:
    spaced = draw.pick([" ", "  ", "\t", ""]) + sku + draw.pick([" ", "", "  "])
    return spaced.lower() if draw.chance(0.5) else spaced.title()
