"""The WSGI server that ``dagrun web`` runs the application in: waitress, bounded and timed out.

Why not one thread per connection (wsgiref with ``ThreadingMixIn``, as before): a thread is
taken the moment a client connects, before it has sent a byte. A client that opens
connections and sends nothing, or a request line one byte at a time (slowloris), made the
process grow one thread per connection, without bound and without end, until memory or the
thread limit ran out and the page stopped answering everyone.

waitress splits the two jobs. One asynchronous loop (poll) accepts connections and buffers
each request until it is complete; only a complete request goes to a fixed pool of
``WEB_THREADS`` threads. So:

* a half-open connection costs a socket and a small buffer, never a thread: the thread count
  is fixed when the server starts (the loop plus the pool), whatever clients do;
* a connection with no traffic for ``idle_seconds`` (default ``IDLE_SECONDS``; the CLI reads
  the setting ``web.idle_seconds``) is closed, so sockets held open for nothing are reclaimed,
  and so is a client that stops reading its response;
* at most ``CONNECTION_LIMIT`` connections are open at once (fewer when the process may open
  fewer files); past that, new ones wait in the listen backlog instead of exhausting file
  descriptors. A client dripping a byte per idle period keeps only its own connections, and
  never a thread;
* request bodies are capped (``MAX_BODY_BYTES``): the app serves only GET and HEAD, and
  POST of the login form.

Whether the page asks for a login is decided by the address bound (``is_loopback``), not
by each client's: see ``auth``.

The listening socket is bound here, not by waitress, so that a busy port or a host name that
does not resolve is a one-line ``UsageError`` before the database is opened, and port 0 gives
exactly one socket whose port can be reported.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import resource
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

from waitress import wasyncore
from waitress.server import create_server

from dagrun.errors import UsageError

log = logging.getLogger("dagrun.web")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

IDLE_SECONDS = 30
WEB_THREADS = 8
CONNECTION_LIMIT = 1000
#: File descriptors left for the database, logs and templates under a low ``ulimit -n``.
RESERVED_FDS = 128
MAX_BODY_BYTES = 64 * 1024
#: How long one turn of the loop may wait for traffic; shutdown() wakes it sooner.
LOOP_SECONDS = 1.0

_BIND_HINTS = {
    errno.EACCES: "ports below 1024 need root; try --port 8080",
    errno.EADDRNOTAVAIL: "not an address of this machine; try --host 127.0.0.1",
}


class WebServer:
    """waitress behind the ``socketserver`` surface the CLI and tests use: ``server_address``,
    ``serve_forever()``, ``shutdown()`` (from another thread, as with ``socketserver``) and
    ``server_close()``. It takes ownership of ``listener``."""

    def __init__(
        self,
        app: WSGIApp,
        listener: socket.socket,
        *,
        idle_seconds: int = IDLE_SECONDS,
        threads: int = WEB_THREADS,
    ):
        self.server_address: tuple[str, int] = listener.getsockname()[:2]
        self.idle_seconds = idle_seconds
        self.threads = threads
        self._map: dict[int, Any] = {}
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._serving = False
        self._closed = False
        self._lock = threading.Lock()  # pulling the trigger never races closing it
        self._waitress = create_server(
            _access_logged(app),
            map=self._map,
            sockets=[listener],
            threads=threads,
            channel_timeout=idle_seconds,
            # Idle connections are looked for this often: closed within ~10% of the limit.
            cleanup_interval=max(1, idle_seconds // 10),
            connection_limit=connection_limit(),
            max_request_body_size=MAX_BODY_BYTES,
            ident="dagrun",
        )

    def serve_forever(self) -> None:
        """Serve until ``shutdown()``; then close every connection and stop the pool."""
        self._serving = True
        try:
            while self._map and not self._stop.is_set():  # empty once closed
                wasyncore.loop(timeout=LOOP_SECONDS, use_poll=True, map=self._map, count=1)
        finally:
            self._close()
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop ``serve_forever()`` and wait until it has returned. Call it from another
        thread: the loop runs on the caller's thread otherwise, and would never return."""
        self._stop.set()
        with self._lock:
            if not self._closed:
                self._waitress.pull_trigger()
        if self._serving:
            self._stopped.wait()

    def server_close(self) -> None:
        """Release the socket and the threads (also when ``serve_forever`` never ran)."""
        self._close()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._waitress.task_dispatcher.shutdown()
        wasyncore.close_all(self._map, ignore_all=True)


def make_web_server(
    app: WSGIApp,
    host: str,
    port: int,
    *,
    idle_seconds: int = IDLE_SECONDS,
    threads: int = WEB_THREADS,
) -> WebServer:
    """A server bound to ``host:port`` (port 0 picks a free one; see ``server_address``)."""
    listener = bind_listener(host, port)
    return WebServer(app, listener, idle_seconds=idle_seconds, threads=threads)


def bind_listener(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, not yet listening. A name that does not resolve, a
    busy port or an address this machine lacks raises ``UsageError`` with one line."""
    family, address = _resolve(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # A restart need not wait out TIME_WAIT; Linux still refuses a second listener.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(_bind_problem(address, exc)) from exc
    return sock


def is_loopback(host: str) -> bool:
    """Whether a bound address is a loopback one (127.0.0.0/8, ::1): only this machine can
    reach it. The wildcard (0.0.0.0, ::) is not: every interface is bound."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def connection_limit() -> int:
    """``CONNECTION_LIMIT``, lowered under a small ``ulimit -n`` (1024 is common) so that
    accepting connections never starves the database of file descriptors."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return CONNECTION_LIMIT
    return max(16, min(CONNECTION_LIMIT, soft - RESERVED_FDS))


def _resolve(host: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    try:
        found = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(
            f"--host {host!r} does not resolve to an address ({reason}); "
            "use an IP address such as 127.0.0.1 or a name this machine resolves"
        ) from exc
    family, _, _, _, address = found[0]
    return family, address


def _bind_problem(address: tuple[Any, ...], exc: OSError) -> str:
    ip, port = address[0], address[1]
    where = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
    if exc.errno == errno.EADDRINUSE:
        other = port + 1 if port < 65535 else 8080
        return (
            f"address {where} is already in use (another dagrun web?); "
            f"choose another port, e.g. --port {other}, or --port 0 for a free one"
        )
    hint = _BIND_HINTS.get(exc.errno or 0)
    return f"cannot listen on {where}: {exc.strerror}" + (f" ({hint})" if hint else "")


def _access_logged(app: WSGIApp) -> WSGIApp:
    """One access line per request on the ``dagrun.web`` logger (waitress writes none)."""

    def logged(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            log.info(
                '%s "%s %s %s" %s',
                environ.get("REMOTE_ADDR", "-"),
                environ.get("REQUEST_METHOD", "-"),
                _request_target(environ),
                environ.get("SERVER_PROTOCOL", "-"),
                status.split(" ", 1)[0],
            )
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return logged


def _request_target(environ: dict[str, Any]) -> str:
    query = environ.get("QUERY_STRING")
    path = environ.get("PATH_INFO") or "/"
    return f"{path}?{query}" if query else path
