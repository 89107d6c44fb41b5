"""Secrets masking: every secret this process knows becomes ``***`` in attempt logs.

The secrets: every connection password, stored or in a ``DAGRUN_CONN_<ID>`` URI (decoded, and
as written in the URI, percent-encoded), the values of a stored connection's ``extra`` under
a sensitive key, and the value of every variable whose key contains ``password``,
``secret``, ``token``, ``api_key`` or ``private_key`` (in any case), stored or in
``DAGRUN_VAR_<KEY>``. A secret shorter than ``MIN_LENGTH`` characters is never masked: ``***``
for every ``ab`` would make logs unreadable, and would show where the secret's letters are.
The rule, and the replacing, are ``dagrun.store.sensitive``'s: the web page hides the same.

A worker child learns them without a query per attempt (small tasks cost a fraction of a
millisecond each): the environment's, and the store's with one query, are read again at
most every ``REFRESH_SECONDS`` (``SecretCache``); a secret a task fetches through
``Variable.get`` or ``Connection.get`` is known from that moment (``register``). An attempt
run while nothing is known pays nothing: the runner wraps its streams only once a secret is
known, and lets a BashTask write to its log directly.

Where masking applies is decided by the runner (``attempt_logs.captured``, its BashTask, its
error text) and the callback runner; this module knows the secrets and masks them in text,
in a text stream (``MaskingWriter``) and in a command's output pipe (``pump``).
"""

from __future__ import annotations

import os
import re
import select
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TextIO, TypedDict

from dagrun.errors import StoreError
from dagrun.runtime.environment import environment_secrets
from dagrun.store.sensitive import REPLACEMENT, longest_first, maskable, secrets_pattern

if TYPE_CHECKING:
    import subprocess

#: How old the secrets read from the store and the environment may get before an attempt
#: reads them again.
REFRESH_SECONDS = 5.0

#: A line longer than this is masked and written in pieces rather than held whole.
_LONGEST_LINE = 1 << 16


class Masker:
    """The secrets known, and the one pattern that replaces them all (longest first, so a
    secret that contains another is masked whole)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: frozenset[str] = frozenset()
        self._text: re.Pattern[str] | None = None
        self._bytes: re.Pattern[bytes] | None = None
        #: Called when the secrets change and there are some: the runner masks an attempt's
        #: streams from the moment the first is known.
        self.on_known: Callable[[], None] | None = None
        self.know(secrets)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def __contains__(self, secret: str) -> bool:
        return secret in self._secrets

    @property
    def secrets(self) -> frozenset[str]:
        return self._secrets

    def know(self, secrets: Iterable[str]) -> None:
        """Know exactly ``secrets`` from now on (the short ones left out)."""
        kept = maskable(secrets)
        if kept == self._secrets:
            return
        self._secrets = kept
        self._text = self._bytes = None
        if kept and self.on_known is not None:
            self.on_known()

    def mask(self, text: str) -> str:
        if not self._secrets:
            return text
        if self._text is None:
            self._text = secrets_pattern(self._secrets)
        assert self._text is not None  # there are secrets, so there is a pattern
        return self._text.sub(REPLACEMENT, text)

    def mask_bytes(self, data: bytes) -> bytes:
        """``mask`` for output read from a process (its secrets in UTF-8)."""
        if not self._secrets:
            return data
        if self._bytes is None:
            encoded = (
                re.escape(s.encode("utf-8", "surrogateescape"))
                for s in longest_first(self._secrets)
            )
            self._bytes = re.compile(b"|".join(encoded))
        return self._bytes.sub(REPLACEMENT.encode(), data)


class SecretCache:
    """What one process knows: the environment's secrets and its database's, read again at
    most every ``refresh`` seconds of ``clock``, and those registered as tasks fetched them."""

    def __init__(
        self,
        refresh: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.masker = Masker()
        self._refresh = refresh
        self._clock = clock
        self._read_at: float | None = None
        self._db_url: str | None = None
        self._stored: frozenset[str] = frozenset()
        self._registered: set[str] = set()

    def for_attempt(self, db_url: str | None) -> Masker:
        """The masker, its secrets read again first when they are older than the refresh
        interval or of another database. A database that cannot be read keeps the secrets
        read from it before (tried again after the interval); one never read raises
        ``StoreError`` rather than run an attempt that would not mask its secrets."""
        now = self._clock()
        if self._read_at is None or db_url != self._db_url or now - self._read_at >= self._refresh:
            self._read(db_url, now)
        return self.masker

    def register(self, secret: str) -> None:
        """Mask ``secret`` from now on in this process (a task fetched it)."""
        if secret not in self.masker:
            self._registered.add(secret)
            self.masker.know(self.masker.secrets | {secret})

    def _read(self, db_url: str | None, now: float) -> None:
        if db_url is None:
            self._stored = frozenset()
        else:
            try:
                self._stored = _stored_secrets(db_url)
            except StoreError:
                if db_url != self._db_url or self._read_at is None:
                    raise
        self._db_url, self._read_at = db_url, now
        self.masker.know(self._stored | environment_secrets() | self._registered)


def _stored_secrets(db_url: str) -> frozenset[str]:
    from dagrun.store.engine import shared_store
    from dagrun.store.variables import stored_secrets

    store = shared_store(db_url)
    with store.read() as conn:
        # Closed afterwards, not pooled: a worker's many children would otherwise each hold
        # an idle PostgreSQL connection for a read made every few seconds at most.
        conn.detach()
        return frozenset(stored_secrets(conn))


#: This process's secrets (a worker child's, or a command's running an attempt in-process).
CACHE = SecretCache()


def for_attempt(db_url: str | None) -> Masker:
    """This process's masker, up to date for an attempt on ``db_url`` (``SecretCache``)."""
    return CACHE.for_attempt(db_url)


def register(secret: str | None) -> None:
    """A task fetched ``secret``: mask it from now on (None, for no password, is ignored)."""
    if secret:
        CACHE.register(secret)


# ---------------------------------------------------------------- streams and pipes


class MaskingWriter:
    """A text stream that writes to ``stream`` with the secrets masked. Text is held until
    its line ends (or ``flush``), so a secret written in two pieces is still found; anything
    else (``fileno``, ``buffer``, ``closed``...) is the wrapped stream's."""

    def __init__(self, stream: TextIO, masker: Masker) -> None:
        self.stream = stream
        self.masker = masker
        self._pending = ""

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        pending = self._pending + text
        cut = pending.rfind("\n") + 1
        if len(pending) - cut > _LONGEST_LINE:
            cut = len(pending)
        if cut:
            self.stream.write(self.masker.mask(pending[:cut]))
        self._pending = pending[cut:]
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, ""
            self.stream.write(self.masker.mask(pending))
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def active() -> Masker | None:
    """The masker this process's output goes through now (an attempt that knows a secret
    writes ``sys.stdout`` through a ``MaskingWriter``), else None."""
    stream = sys.stdout
    return stream.masker if isinstance(stream, MaskingWriter) else None


class PipedOutput(TypedDict, total=False):
    """``Popen``'s ``stdout`` and ``stderr`` arguments, as ``piped`` gives them."""

    stdout: int
    stderr: int


def piped(masker: Masker | None) -> PipedOutput:
    """``Popen`` arguments for a command started while output is masked (or whose output
    is read, with an empty ``Masker``): its stdout and stderr on one pipe, for ``pump``.
    None otherwise: it writes to the log itself, at no cost."""
    if masker is None:
        return {}
    import subprocess

    return {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}


def pump(
    process: subprocess.Popen,
    masker: Masker,
    timeout: float | None = None,
    tail: Tail | None = None,
) -> None:
    """Copy what ``process`` writes to its stdout pipe onto fd 1, masked (and into
    ``tail``), until it exits or ``timeout`` seconds pass. Output is masked a line at a
    time. When the process exits, what is in the pipe then is copied and the rest is not
    waited for: processes it left running in the background may hold the pipe open, and
    the command's end is the task's end, as when it writes to the log itself (without
    pidfds, before Linux 5.3, the pipe's end is waited for)."""
    assert process.stdout is not None  # started with piped(): its stdout is a pipe
    out = process.stdout.fileno()
    os.set_blocking(out, False)
    exited = _exit_fd(process)
    lines = _Lines(masker)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = select.select([out, *exited], [], [], wait)[0]
            if not ready or set(exited) & set(ready):
                break
            chunk = _read(out)
            if chunk == b"":
                return
            _write(lines.feed(chunk or b""), tail)
        for _ in range(16):  # what the pipe holds now (64 KiB unless resized)
            chunk = _read(out)
            if not chunk:
                break
            _write(lines.feed(chunk), tail)
    finally:
        _write(lines.rest(), tail)
        for fd in exited:
            os.close(fd)


def _write(data: bytes, tail: Tail | None) -> None:
    _write_all(1, data)
    if tail is not None:
        tail.feed(data)


class Tail:
    """The end of a command's output, masked as it was logged: a BashTask that returns its
    last line (Airflow's BashOperator pushes it)."""

    def __init__(self, keep: int = 65536) -> None:
        self._keep = keep
        self._end = b""

    def feed(self, data: bytes) -> None:
        self._end = (self._end + data)[-self._keep :]

    def last_line(self, encoding: str = "utf-8") -> str:
        """The last line, without its line break; "" for no output."""
        lines = self.last_lines(1, encoding)
        return lines[-1] if lines else ""

    def last_lines(self, count: int, encoding: str = "utf-8") -> list[str]:
        """The last ``count`` lines, without their line breaks."""
        lines = self._end.decode(encoding, errors="replace").splitlines()
        return [line.rstrip() for line in lines[-count:]]


def _exit_fd(process: subprocess.Popen) -> list[int]:
    """A pidfd of ``process`` (readable once it exits), or none where the kernel has none."""
    try:
        return [os.pidfd_open(process.pid)]
    except (AttributeError, OSError):
        return []


def _read(fd: int) -> bytes | None:
    """What a non-blocking pipe holds now (b"" at its end, None when it is empty)."""
    try:
        return os.read(fd, _LONGEST_LINE)
    except BlockingIOError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Lines:
    """Bytes read from a pipe, given back masked a whole line at a time."""

    def __init__(self, masker: Masker) -> None:
        self._masker = masker
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        pending = self._pending + chunk
        cut = pending.rfind(b"\n") + 1
        if len(pending) - cut > _LONGEST_LINE:
            cut = len(pending)
        self._pending = pending[cut:]
        return self._masker.mask_bytes(pending[:cut])

    def rest(self) -> bytes:
        pending, self._pending = self._pending, b""
        return self._masker.mask_bytes(pending)
