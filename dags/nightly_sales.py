"""Nightly sales: extract, clean, join with customers, summarise, refresh a dashboard.

Each task reads and writes the partitions of its own logical day (``ds``) through
``dagrun.partition``, which replaces a partition whole, so running a date again gives
byte-identical files and never appends. The sales come from ``dagrun.sample_data``,
generated from the date, faults included. pandas is imported inside the tasks: the
scheduler imports this file often and should not pay for pandas each time.

    extract_sales ──▶ clean_sales ──┐
                                    ├──▶ build_daily_summary ──▶ refresh_dashboard
    load_customers ─────────────────┘
"""

from dagrun import DAG, Asset, BashTask, partition, task

CLEAN_COLUMNS = ["order_id", "customer_id", "sku", "quantity", "unit_price", "amount", "sold_at"]

# A shell step reading the summary partition by its documented path and publishing the page
# the same way partitions are written: a temporary file in the target folder, synced, renamed.
DASHBOARD_SCRIPT = r"""
set -euo pipefail
ds="{{ ds }}"
data="${DAGRUN_DATA:-data}"
out="$data/dashboard/ds=$ds"
mkdir -p "$out"
tmp="$(mktemp "$out/.dashboard.html.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
awk -F, -v ds="$ds" '
function row(tag,   i, line) {
  line = "<tr>"
  for (i = 1; i <= NF; i++) line = line "<" tag ">" $i "</" tag ">"
  print line "</tr>"
}
NR == 1 {
  for (i = 1; i <= NF; i++) if ($i == "revenue") rev = i
  print "<!doctype html>"
  print "<meta charset=\"utf-8\"><title>Nightly sales " ds "</title>"
  print "<h1>Nightly sales, " ds "</h1>"
  print "<table>"
  row("th")
  next
}
{ total += $rev; row("td") }
END {
  print "</table>"
  printf "<p>Revenue: %.2f</p>\n", total
}' "$data/daily_summary/ds=$ds/part.csv" > "$tmp"
chmod 644 "$tmp"
sync "$tmp" 2>/dev/null || sync  # one file with GNU sync; all elsewhere
mv -f "$tmp" "$out/dashboard.html"
"""


def _clean(raw):
    """Trim and upper-case SKUs, strip currency symbols, drop rows without a customer, a
    positive quantity or a parsable positive price, and keep one row per order id."""
    import pandas as pd

    prices = raw["unit_price"].str.strip().str.removeprefix("$")
    sales = raw.assign(
        customer_id=raw["customer_id"].str.strip(),
        sku=raw["sku"].str.strip().str.upper(),
        quantity=pd.to_numeric(raw["quantity"], errors="coerce"),
        unit_price=pd.to_numeric(prices, errors="coerce"),
    )
    usable = (sales["customer_id"] != "") & (sales["quantity"] > 0) & (sales["unit_price"] > 0)
    sales = sales[usable].drop_duplicates("order_id").sort_values("order_id")
    sales = sales.astype({"quantity": "int64"})
    sales["amount"] = (sales["quantity"] * sales["unit_price"]).round(2)
    return sales[CLEAN_COLUMNS]


def _summarise(sales, people, ds):
    """Join sales to customers (a sale whose customer is not in the snapshot yet counts
    under region and segment "unknown") and aggregate per region and segment."""
    joined = sales.merge(
        people[["customer_id", "region", "segment"]],
        on="customer_id",
        how="left",
        validate="many_to_one",
    )
    joined[["region", "segment"]] = joined[["region", "segment"]].fillna("unknown")
    summary = joined.groupby(["region", "segment"], as_index=False, sort=True).agg(
        orders=("order_id", "count"),
        units=("quantity", "sum"),
        revenue=("amount", "sum"),
        buyers=("customer_id", "nunique"),
    )
    summary["revenue"] = summary["revenue"].round(2)
    summary.insert(0, "ds", ds)
    return summary


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
        """Export the day's raw sales, faults and all, as the source system delivers them."""
        from dagrun.sample_data import raw_sales

        written = partition("raw_sales", ds).write(raw_sales(ds))
        return {"rows": written.rows, "unchanged": written.unchanged}

    @task
    def clean_sales(extracted, ds):
        """Drop the rows that cannot be repaired, repair the rest, one row per order."""
        raw = partition("raw_sales", ds).read(dtype=str, keep_default_na=False)
        clean = _clean(raw)
        written = partition("clean_sales", ds).write(clean)
        return {"rows_in": extracted["rows"], "rows": written.rows, "unchanged": written.unchanged}

    @task
    def load_customers(ds):
        """Snapshot the customer table as it stood on the day."""
        from dagrun.sample_data import customers

        written = partition("customers", ds).write(customers(ds))
        return {"rows": written.rows, "unchanged": written.unchanged}

    @task(outlets=[Asset("daily_summary")])  # each day's summary schedules weekly_sales
    def build_daily_summary(cleaned, loaded, ds):
        """Orders, units, revenue and buyers per region and segment."""
        sales = partition("clean_sales", ds).read(dtype={"customer_id": str})
        people = partition("customers", ds).read(dtype=str)
        summary = _summarise(sales, people, ds)
        written = partition("daily_summary", ds).write(summary)
        return {"groups": written.rows, "revenue": round(float(summary["revenue"].sum()), 2)}

    refresh_dashboard = BashTask("refresh_dashboard", command=DASHBOARD_SCRIPT)

    build_daily_summary(clean_sales(extract_sales()), load_customers()) >> refresh_dashboard
