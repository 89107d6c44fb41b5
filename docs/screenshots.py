"""The web page's pictures in docs/web.md, made again from a demo: ``python docs/screenshots.py``.

Backfills a small demo DAG (a task group, a task mapped over a few shops, a task that fails
once and is retried, one day that fails for good) through the real CLI in a temporary home,
serves that store as ``dagrun web`` does, and has headless Chromium save the grid, the graph
of a run and the Gantt of a run as PNGs in ``docs/images``; then the DAG's source, a task's
values, the variables, connections and pools (set through the CLI, secrets included, which
the pages mask), the durations and the audit log; then a run triggered with a 120 KB conf
while no scheduler runs (its run page, and the banner every page shows); and the log of an
attempt a scheduler is running. Needs ``chromium`` on the PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
DAG_ID = "shop_sales"
START, END = "2026-03-01", "2026-03-12"
FAILED_DAY = "2026-03-09"
TZ = ZoneInfo("Europe/Berlin")

DEMO = f'''
import time

from dagrun import DAG, task, task_group

with DAG("{DAG_ID}", schedule="@daily", start_date="{START}", timezone="Europe/Berlin",
         max_active_runs=4):
    @task
    def shops(ti):
        time.sleep(0.2)
        ti.xcom_push(key="summary", value={{"shops": 3, "source": "the sales API"}})
        return ["berlin", "paris", "rome"]

    @task
    def extract(shop, ds):
        time.sleep(0.3 + 0.1 * len(shop) % 3)
        return shop

    @task(retries=1, retry_delay=0)
    def load_customers(try_number):
        time.sleep(0.3)
        if try_number == 1:
            raise ConnectionError("customer API timed out")

    @task_group
    def transform():
        @task
        def clean(ds):
            time.sleep(0.4)
            if ds == "{FAILED_DAY}":
                raise ValueError("negative quantities in the sales of " + ds)

        @task
        def join():
            time.sleep(0.5)

        clean() >> join()

    @task
    def publish():
        time.sleep(0.2)

    group = transform()
    extract.expand(shop=shops()) >> group
    load_customers() >> group
    group >> publish()
'''

#: A DAG whose one task prints a line every quarter of a second, until told to stop: the
#: log page of its running attempt.
LIVE_ID = "live_orders"
LIVE = f'''
import time
from pathlib import Path

from dagrun import DAG, task

with DAG("{LIVE_ID}", schedule=None):
    @task
    def load_orders():
        for batch in range(1, 10_000):
            print(f"loaded batch {{batch}}: {{batch * 250}} orders", flush=True)
            time.sleep(0.25)
            if Path(__file__).with_name("stop").exists():
                break

    load_orders()
'''

#: Each picture, and the day whose run it shows (the graph shows the day that failed).
PAGES = {
    "grid.png": ("/dags/{dag}/grid?refresh=0", None),
    "graph.png": ("/dags/{dag}/graph?run={run}&refresh=0", FAILED_DAY),
    "gantt.png": ("/dags/{dag}/runs/{run}/gantt?refresh=0", START),
    "source.png": ("/dags/{dag}/source", None),
    "values.png": ("/dags/{dag}/runs/{run}/tasks/shops/values", START),
    "variables.png": ("/variables", None),
    "connections.png": ("/connections", None),
    "pools.png": ("/pools", None),
    "durations.png": ("/dags/{dag}/durations?refresh=0", None),
    "audit.png": ("/audit?refresh=0", None),
}

#: What the variables, connections and pools pages show, set through the CLI.
SETTINGS = [
    ("variables", "set", "region", "eu-west-1", "--description", "where the shops' data lives"),
    ("variables", "set", "sales_api_token", "tok-3f9a1c77", "--description", "the sales API"),
    ("variables", "set", "thresholds", '{"min_rows": 100, "late_hours": 6}', "--json"),
    (
        "connections",
        "add",
        "warehouse",
        "--uri",
        "postgresql://etl:s3cr3t-pw@db.example.com:5432/sales",
        "--description",
        "the sales warehouse",
    ),
    (
        "connections",
        "add",
        "sales_api",
        "--conn-type",
        "http",
        "--host",
        "api.example.com",
        "--extra",
        '{"api_key": "k-88421", "timeout": 30}',
    ),
    ("pools", "set", "warehouse", "4", "--description", "connections to the warehouse"),
    ("pools", "set", "sales_api", "1", "--description", "the API takes one client at a time"),
]


def backfill(home: Path) -> dict[str, str]:
    """Run the demo's backfill through the CLI; the environment that names its store."""
    dags = home / "dags"
    dags.mkdir(parents=True)
    (dags / "shop_sales.py").write_text(textwrap.dedent(DEMO))
    env = {
        **os.environ,
        "DAGRUN_HOME": str(home / "home"),
        "DAGRUN_DAGS_FOLDER": str(dags),
        "DAGRUN_DB_URL": f"sqlite:///{home / 'home' / 'dagrun.db'}",
    }
    command = [sys.executable, "-m", "dagrun", "backfill", DAG_ID, "--start", START]
    subprocess.run([*command, "--end", END, "--workers", "2"], env=env, check=False)
    for args in SETTINGS:
        subprocess.run([sys.executable, "-m", "dagrun", *args], env=env, check=True)
    return env


def serve(env: dict[str, str]):
    """The store served on a free loopback port, as ``dagrun web`` serves it."""
    from dagrun.store import Store
    from dagrun.webapp import WebApp, make_web_server

    store = Store(env["DAGRUN_DB_URL"])
    app = WebApp(store, logs_root=Path(env["DAGRUN_HOME"]) / "logs")
    server = make_web_server(app, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, store


def run_on(store, day: str) -> str:
    """The id of the demo's run on a local day."""
    from dagrun.store import run_reads

    with store.read() as conn:
        runs = run_reads.recent_runs(conn, [DAG_ID], 100)[DAG_ID]
    return next(r.run_id for r in runs if r.logical_date.astimezone(TZ).date().isoformat() == day)


def screenshot(chromium: str, url: str, out: Path, profile: Path) -> None:
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1360,620",
            f"--user-data-dir={profile}",
            f"--screenshot={out}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


def screenshot_login(chromium: str, store, out: Path, profile: Path) -> None:
    """The login form of a server off loopback: the same store behind ``auth.Gate``."""
    from dagrun.store import accounts
    from dagrun.webapp import WebApp, make_web_server
    from dagrun.webapp.auth import Gate

    with store.write() as conn:
        gate = Gate(accounts.session_key(conn))
    server = make_web_server(WebApp(store, gate=gate), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/login?next=/"
        screenshot(chromium, url, out, profile)
    finally:
        server.shutdown()


def screenshot_waiting(chromium: str, env: dict[str, str], base: str, scratch: Path) -> list[Path]:
    """A run triggered with a 120 KB conf while no scheduler runs: its run page (the conf
    in a box of its own) and the DAG list, both under the banner that says so."""
    orders = [{"order": i, "sku": f"SKU-{i:06d}", "note": "restock the shelf"} for i in range(2000)]
    conf = scratch / "conf.json"
    conf.write_text(json.dumps({"orders": orders}))
    trigger = ["trigger", DAG_ID, "--run-id", "big_conf", "--conf", f"@{conf}"]
    subprocess.run([sys.executable, "-m", "dagrun", *trigger], env=env, check=True)
    pages = {"banner.png": "/?refresh=0", "run_conf.png": f"/dags/{DAG_ID}/runs/big_conf?refresh=0"}
    for name, path in pages.items():
        screenshot(chromium, base + path, IMAGES / name, scratch / "profile")
    return [IMAGES / name for name in pages]


def screenshot_live_log(chromium: str, env: dict[str, str], base: str, scratch: Path) -> Path:
    """The log page of an attempt a scheduler is running, once it has printed a dozen lines
    (the demo DAG paused, so the scheduler runs only this one)."""
    dags = Path(env["DAGRUN_DAGS_FOLDER"])
    (dags / f"{LIVE_ID}.py").write_text(textwrap.dedent(LIVE))
    dagrun = [sys.executable, "-m", "dagrun"]
    subprocess.run([*dagrun, "dags", "pause", DAG_ID], env=env, check=True, capture_output=True)
    subprocess.run([*dagrun, "trigger", LIVE_ID, "--run-id", "live"], env=env, check=True)
    out = scratch / "scheduler.log"
    with out.open("wb") as log:
        scheduler = subprocess.Popen(
            [*dagrun, "scheduler", "--workers", "1", "--poll", "0.2"],
            env=env,
            stdout=log,
            stderr=log,
        )
    url = f"{base}/dags/{LIVE_ID}/runs/live/tasks/load_orders/tries/1/log"
    try:
        deadline = time.monotonic() + 120
        while _page(url).count("loaded batch") < 12:
            if time.monotonic() > deadline or scheduler.poll() is not None:
                raise RuntimeError(f"the live demo did not print: {out.read_text()[-2000:]}")
            time.sleep(0.5)
        shot = IMAGES / "live_log.png"
        screenshot(chromium, url, shot, scratch / "profile")
        return shot
    finally:
        (dags / "stop").touch()
        scheduler.terminate()
        scheduler.wait(60)


def _page(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()
    except urllib.error.HTTPError:
        return ""


def main() -> int:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("error: chromium is not on the PATH; install it to make the screenshots")
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        env = backfill(Path(scratch))
        server, store = serve(env)
        try:
            base = f"http://127.0.0.1:{server.server_address[1]}"
            IMAGES.mkdir(parents=True, exist_ok=True)
            for name, (path, day) in PAGES.items():
                url = base + path.format(dag=DAG_ID, run=quote(run_on(store, day or START)))
                screenshot(chromium, url, IMAGES / name, Path(scratch) / "profile")
                print(f"wrote {IMAGES / name} ({(IMAGES / name).stat().st_size:,} bytes)")
            login = IMAGES / "login.png"
            screenshot_login(chromium, store, login, Path(scratch) / "profile")
            print(f"wrote {login} ({login.stat().st_size:,} bytes)")
            for shot in screenshot_waiting(chromium, env, base, Path(scratch)):
                print(f"wrote {shot} ({shot.stat().st_size:,} bytes)")
            live = screenshot_live_log(chromium, env, base, Path(scratch))
            print(f"wrote {live} ({live.stat().st_size:,} bytes)")
        finally:
            server.shutdown()
            store.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
