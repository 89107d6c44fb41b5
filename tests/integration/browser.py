"""Headless Chromium for the browser tests (test_browser*.py): the runner, a probe page on the
app's own origin, a store served on a free loopback port, and the screenshot checks.

A probe is test scaffolding served beside the real application, on the same origin, so its
script may read the DOM of the pages it loads in iframes; it writes what the browser computed
as JSON into ``<pre id="result">``, which ``--dump-dom`` prints.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from dagrun.store import Store
from dagrun.webapp import WebApp, make_web_server
from tests.helpers import run_cli, write_dag

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WINDOW = (1280, 900)


def require_chromium() -> None:
    """Skip the test when there is no Chromium to run."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does this)")


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def css_colour(css: str, state: str) -> str:
    """The rgb() a browser reports for the background the stylesheet gives a state."""
    found = re.search(rf"\.s-{state}\s*\{{\s*background:\s*#([0-9a-fA-F]{{6}})", css)
    assert found, f"no colour for {state} in the stylesheet"
    r, g, b = (int(found.group(1)[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgb({r}, {g}, {b})"


def stylesheet(base: str) -> str:
    """The stylesheet the server at ``base`` serves."""
    with urllib.request.urlopen(f"{base}/static/dagrun.css", timeout=10) as response:
        return response.read().decode()


def with_probes(app, probes: Mapping[str, str]):
    """The app, plus a probe page at each path of ``probes``; every other path is the real
    application, headers and all."""

    def wrapped(environ, start_response):
        page = probes.get(environ.get("PATH_INFO"))
        if page is None:
            return app(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
        return [page.encode()]

    return wrapped


def with_probe(app, page: str):
    """The app, plus ``page`` at ``/__probe``."""
    return with_probes(app, {"/__probe": page})


@contextmanager
def serving(app) -> Iterator[str]:
    """``app`` on the threaded server ``dagrun web`` uses, on a free loopback port; yields the
    base URL and stops the server on the way out."""
    server = make_web_server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def backfilled(
    cli_env, dags_dir: Path, dag_id: str, source: str, start: str, end: str
) -> Iterator[tuple[Store, WebApp]]:
    """Write ``source`` as ``<dag_id>.py`` and backfill it through the CLI from ``start`` to
    ``end`` (a task fails, as each of these tests intends); yields the store and the web app
    on it, and disposes of the store on the way out."""
    write_dag(dags_dir, f"{dag_id}.py", source)
    result = run_cli("backfill", dag_id, "--start", start, "--end", end, env=cli_env)
    assert result.returncode == 1, result.stderr  # a task failed, as intended
    store = Store(cli_env["DAGRUN_DB_URL"])
    try:
        yield store, WebApp(store, logs_root=Path(cli_env["DAGRUN_HOME"]) / "logs")
    finally:
        store.dispose()


def read_probe(tmp_path: Path, url: str, *flags: str, budget_ms: int = 10_000) -> tuple[dict, str]:
    """What the probe page at ``url`` wrote, and Chromium's stderr (its log, with console
    messages when ``flags`` ask for them)."""
    result = chromium(tmp_path, f"--virtual-time-budget={budget_ms}", *flags, "--dump-dom", url)
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="result">(.*?)</pre>', result.stdout, re.S)
    assert found and found.group(1) != "pending", (result.stdout[-2000:], result.stderr[-2000:])
    return json.loads(html.unescape(found.group(1))), result.stderr


def check_screenshot(tmp_path: Path, name: str, url: str) -> Path:
    """Save a screenshot of ``url`` as ``name`` beside the test's files and check it: a PNG
    of the window's size that does not look blank."""
    shot = tmp_path / name
    result = chromium(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size={},{}".format(*WINDOW),
        "--hide-scrollbars",
        url,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.is_file(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert struct.unpack(">II", data[16:24]) == WINDOW
    assert len(data) > 10_000, "the screenshot looks blank"
    return shot
