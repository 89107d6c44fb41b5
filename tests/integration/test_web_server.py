"""``dagrun web`` against hostile clients and bad input, run as a user runs it: the real CLI
in a subprocess on a free loopback port.

Half-open connections (connected, sending nothing or half a request line) must cost neither a
thread nor the page's availability, idle ones must be closed, and a busy port or a host name
that does not resolve is bad input: exit 2 with one line.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from dagrun.webapp.server import WEB_THREADS
from tests.helpers import run_cli, start_cli, stop_process, wait_until

HALF_OPEN = 100
#: What "answers fast" means here, with 100 sockets held open on a busy 2-core machine.
ANSWER_DEADLINE = 5.0


@dataclass
class Served:
    pid: int
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def serve(cli_env, tmp_path) -> Iterator[Callable[..., Served]]:
    """Start ``dagrun web --port 0`` (idle timeout in seconds as given); on teardown, SIGTERM
    must stop it cleanly (exit 0) even with connections still open."""
    processes = []

    def start(idle_seconds: int = 30) -> Served:
        log = tmp_path / f"web-{len(processes)}.log"
        env = {**cli_env, "DAGRUN_WEB_IDLE_SECONDS": str(idle_seconds)}
        process = start_cli("web", "--port", "0", env=env, log=log)
        processes.append(process)
        port = wait_until(lambda: _served_port(process, log), timeout=60, what="dagrun web")
        served = Served(process.pid, int(port))
        assert _get(served.base + "/healthz") == 200
        return served

    yield start
    codes = [stop_process(process, timeout=20) for process in processes]
    assert codes == [0] * len(processes), "dagrun web did not stop cleanly on SIGTERM"


def _served_port(process, log: Path) -> str | None:
    if process.poll() is not None:
        raise AssertionError(f"dagrun web exited {process.returncode}: {log.read_text()}")
    found = re.search(r"serving http://127\.0\.0\.1:(\d+)/", log.read_text())
    return found.group(1) if found else None


def _get(url: str, timeout: float = ANSWER_DEADLINE) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        response.read()
        return response.status


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE).group(1))


def _accepted(served: Served, clients: list[socket.socket]) -> bool:
    """Whether the server process holds the accepted end of every client connection, not
    merely a connection the kernel queued in its backlog: the kernel's TCP table names the
    socket of each (server port, client port) pair, and the process must own that socket."""
    owned = set()
    for link in Path(f"/proc/{served.pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # an fd closed while we look
            owned.add(link.readlink().name.removeprefix("socket:[").removesuffix("]"))
    peers = set()
    for line in Path(f"/proc/{served.pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, remote_port = (int(f.rsplit(":", 1)[1], 16) for f in fields[1:3])
        if local_port == served.port and fields[9] in owned:
            peers.add(remote_port)
    return {client.getsockname()[1] for client in clients} <= peers


def _hold_half_open(stack: ExitStack, port: int, count: int) -> list[socket.socket]:
    """``count`` connections that never finish a request: half send nothing, half send the
    start of a request line and stop."""
    held = []
    for i in range(count):
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
        if i % 2:
            sock.sendall(b"GET /healthz HT")
        held.append(sock)
    return held


def _wait_accepted(served: Served, clients: list[socket.socket]) -> None:
    wait_until(
        lambda: _accepted(served, clients),
        timeout=30,
        what=f"the server to accept {len(clients)} connections",
    )


def _read_to_eof(sock: socket.socket, deadline: float) -> bytes:
    """Everything the server sends until it closes the connection (fails past deadline)."""
    received = b""
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError("the server kept an idle connection open") from None
        if not chunk:
            return received
        received += chunk


# ---------------------------------------------------------------- hostile clients


@pytest.mark.slow
def test_page_answers_fast_while_100_half_open_connections_are_held(serve):
    served = serve()
    with ExitStack() as stack:
        held = _hold_half_open(stack, served.port, HALF_OPEN)
        _wait_accepted(served, held)
        started = time.monotonic()
        assert _get(served.base + "/healthz", timeout=ANSWER_DEADLINE) == 200
        assert time.monotonic() - started < ANSWER_DEADLINE
        assert _accepted(served, held), "the server dropped held connections to cope"


@pytest.mark.slow
def test_thread_count_stays_bounded_while_many_clients_connect(serve):
    served = serve()
    baseline = _threads(served.pid)
    assert baseline <= WEB_THREADS + 2, "more threads than the pool and its loop"
    samples = [baseline]
    with ExitStack() as stack, ThreadPoolExecutor(16) as clients:
        held = _hold_half_open(stack, served.port, HALF_OPEN)
        requests = [clients.submit(_get, served.base + "/healthz") for _ in range(80)]

        def finished() -> bool:
            samples.append(_threads(served.pid))
            return all(r.done() for r in requests)

        wait_until(finished, timeout=60, what="80 requests beside 100 half-open sockets")
        _wait_accepted(served, held)
        samples.append(_threads(served.pid))
        assert [r.result() for r in requests] == [200] * len(requests)
    assert max(samples) <= baseline, f"threads grew with clients: {max(samples)} > {baseline}"


@pytest.mark.slow
def test_idle_connections_are_closed_by_the_server(serve):
    served = serve(idle_seconds=1)
    with ExitStack() as stack:
        silent, partial, kept_alive = (
            stack.enter_context(socket.create_connection(("127.0.0.1", served.port)))
            for _ in range(3)
        )
        opened = time.monotonic()
        partial.sendall(b"GET /healthz HT")
        kept_alive.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        deadline = opened + 20
        assert _read_to_eof(silent, deadline) == b""
        assert _read_to_eof(partial, deadline) == b""
        assert _read_to_eof(kept_alive, deadline).startswith(b"HTTP/1.1 200 ")
        # Closed for idleness, not at once: no connection is dropped before its second.
        assert time.monotonic() - opened >= 1
    assert _get(served.base + "/healthz") == 200


# ---------------------------------------------------------------- input guards


def _one_line_usage_error(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in result.stderr
    return lines[0]


def test_web_on_a_port_in_use_is_bad_input(cli_env):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_cli("web", "--port", str(port), env=cli_env, timeout=60)
    line = _one_line_usage_error(result)
    assert f"127.0.0.1:{port}" in line and "in use" in line
    assert "--port" in line  # suggests another one
    # The address is checked before the database is opened.
    assert not (Path(cli_env["DAGRUN_HOME"]) / "dagrun.db").exists()


def test_web_on_a_host_that_does_not_resolve_is_bad_input(cli_env):
    result = run_cli("web", "--host", "no-such-host.invalid", "--port", "0", env=cli_env)
    line = _one_line_usage_error(result)
    assert "no-such-host.invalid" in line and "resolve" in line


def test_web_idle_timeout_defaults_to_30_seconds_and_reads_the_environment(cli_env):
    result = run_cli("web", "--help", env=cli_env)
    assert result.returncode == 0
    assert "DAGRUN_WEB_IDLE_SECONDS" in result.stdout
    assert re.search(r"--idle-timeout[\s\S]*default\s*30\)", result.stdout), result.stdout
    bad = run_cli("web", "--port", "0", env={**cli_env, "DAGRUN_WEB_IDLE_SECONDS": "0"})
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
