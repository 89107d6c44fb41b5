"""Date partitions: named datasets stored per logical day, replaced whole, fenced, recorded.

A task writes the partition of its own date, ``partition("clean_sales", ds).write(frame)``,
and a downstream task reads it back with ``.read()``. The layout is a contract, so a
BashTask or a notebook finds the files without dagrun::

    <DAGRUN_DATA, default ./data>/<dataset>/ds=<YYYY-MM-DD>/part.csv   (or part.parquet)

Why a write is safe to repeat:

* It replaces the partition whole. The bytes go to a temporary file in the same folder, are
  flushed and fsynced, then renamed over the target (atomic on POSIX) and the folder is
  fsynced. A crash leaves the old partition or the new one, never a mix; a rerun never
  appends. Temporary files of writers that died mid-write are swept by the next write.
* The bytes are deterministic for the same frame (the frame's column order, no index, a
  fixed float format, ``\\n`` line ends; Parquet as long as the pandas and pyarrow versions,
  which it names inside the file, stay the same), so a rerun on the same input has the same
  sha256 and is recorded as unchanged.
* Inside a worker the write is fenced: in one store transaction the attempt's lease is
  checked (``LeaseLost`` when another attempt has taken the task over), the file is renamed
  into place and the write is recorded in ``partition_write`` with run, task, attempt and
  fence token. A zombie attempt cannot overwrite the partition of the attempt that replaced
  it. Outside a worker (``dagrun test``, a notebook) writes are as atomic but not recorded.

pandas, pyarrow and SQLAlchemy are imported on first use, so ``import dagrun`` stays fast.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import re
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from dagrun import settings
from dagrun.errors import DagrunError, NonRetryableError
from dagrun.runtime.context import TaskContext
from dagrun.runtime.current import current

if TYPE_CHECKING:
    import pandas as pd


#: Twelve significant digits: exact for money and counts, and blind to the last-bit noise
#: that a different summation order leaves, so equal results give equal bytes.
CSV_FLOAT_FORMAT = "%.12g"
FILE_NAMES = {"csv": "part.csv", "parquet": "part.parquet"}

_DATASET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_DS = re.compile(r"\d{4}-\d{2}-\d{2}")
_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())
_TEMP = re.compile(r"\.tmp\.(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>\d+)\.[0-9a-f]+")


class PartitionError(DagrunError):
    """A partition cannot be read or written as asked; carries the dataset and the date."""

    def __init__(self, message: str, *, dataset: str, ds: object):
        super().__init__(f"partition {dataset}/ds={ds}: {message}")
        self.dataset = dataset
        self.ds = ds


class InvalidPartition(PartitionError, NonRetryableError, ValueError):
    """A dataset name, date, format or value that can never work, so retrying is pointless."""


class PartitionNotFound(PartitionError, LookupError):
    """Reading a partition that was never written (or was deleted): its writer must run first."""


@dataclass(frozen=True)
class WriteResult:
    """What a write did; small and JSON-friendly, so a task can return it as its summary."""

    dataset: str
    ds: str
    path: str
    rows: int
    sha256: str
    unchanged: bool
    recorded: bool


def data_root() -> Path:
    """``DAGRUN_DATA`` or ``./data``, read at each call so tests and tasks can redirect it."""
    return Path(settings.get("core.data")).absolute()


def partition(
    dataset: str, ds: str | date, *, format: str = "csv", root: str | os.PathLike | None = None
) -> Partition:
    """The partition of ``dataset`` for the logical day ``ds`` (``YYYY-MM-DD`` or a date).

    Pass the task's ``ds``: the logical day in the DAG's timezone. A datetime is refused
    because its calendar day depends on the timezone it happens to carry.
    """
    if not isinstance(dataset, str) or not _DATASET.fullmatch(dataset):
        raise InvalidPartition(
            "dataset names are letters, digits, '_', '.', '-' (no path separators)",
            dataset=dataset,
            ds=ds,
        )
    if format not in FILE_NAMES:
        raise InvalidPartition(
            f"format must be one of {sorted(FILE_NAMES)}, not {format!r}", dataset=dataset, ds=ds
        )
    if format == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise InvalidPartition(
            "Parquet needs pyarrow: pip install 'dagrun[parquet]'", dataset=dataset, ds=ds
        )
    base = Path(root).absolute() if root is not None else data_root()
    return Partition(dataset, _day(dataset, ds), format, base)


def _day(dataset: str, ds: object) -> str:
    if isinstance(ds, datetime):
        raise InvalidPartition("pass ds (the logical day), not a datetime", dataset=dataset, ds=ds)
    if isinstance(ds, date):
        return ds.isoformat()
    if isinstance(ds, str) and _DS.fullmatch(ds):
        with contextlib.suppress(ValueError):  # 2026-02-30 matches but is no day
            return date.fromisoformat(ds).isoformat()
    raise InvalidPartition("ds must be a date or a 'YYYY-MM-DD' string", dataset=dataset, ds=ds)


@dataclass(frozen=True)
class Partition:
    """One dataset's data for one logical day; made by :func:`partition`."""

    dataset: str
    ds: str
    format: str
    root: Path

    @property
    def path(self) -> Path:
        return self.root / self.dataset / f"ds={self.ds}" / FILE_NAMES[self.format]

    def exists(self) -> bool:
        return self.path.is_file()

    def read(self, **options: Any) -> pd.DataFrame:
        """The partition as a DataFrame; ``options`` go to ``read_csv`` / ``read_parquet``."""
        import pandas as pd

        if not self.exists():
            raise PartitionNotFound(f"no {self.path}", dataset=self.dataset, ds=self.ds)
        if self.format == "parquet":
            return pd.read_parquet(self.path, engine="pyarrow", **options)
        return pd.read_csv(self.path, **options)

    def write(self, frame: pd.DataFrame) -> WriteResult:
        """Replace the partition with ``frame`` atomically; fenced and recorded in a worker.

        Raises ``LeaseLost`` (leaving the old partition) when this attempt no longer holds
        its task instance.
        """
        data = self._encode(frame)
        sha = hashlib.sha256(data).hexdigest()
        unchanged = _sha256_of(self.path) == sha
        context = _recording_context()
        result = WriteResult(
            self.dataset,
            self.ds,
            str(self.path),
            len(frame),
            sha,
            unchanged,
            recorded=context is not None,
        )
        staged = None if unchanged else _stage(self.path, data)
        try:
            with _fenced(context, result):
                if staged is not None:
                    _publish(staged, self.path)
        finally:
            if staged is not None:
                staged.unlink(missing_ok=True)
        return result

    def _encode(self, frame: pd.DataFrame) -> bytes:
        import pandas as pd

        if not isinstance(frame, pd.DataFrame):
            raise InvalidPartition(
                f"write() takes a pandas DataFrame, not {type(frame).__name__}",
                dataset=self.dataset,
                ds=self.ds,
            )
        if self.format == "parquet":
            buffer = io.BytesIO()
            frame.to_parquet(buffer, engine="pyarrow", index=False)
            return buffer.getvalue()
        text = frame.to_csv(index=False, float_format=CSV_FLOAT_FORMAT, lineterminator="\n")
        return text.encode("utf-8")


# ---------------------------------------------------------------- files: stage, publish, sweep


def _sha256_of(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def _stage(target: Path, data: bytes) -> Path:
    """Write ``data`` durably to a new temporary file beside ``target`` (same filesystem, so
    the rename that publishes it is atomic). Named after host and pid for :func:`_sweep`."""
    _ensure_folder(target.parent)
    _sweep(target.parent)
    staged = target.parent / f".tmp.{_HOST}.{os.getpid()}.{secrets.token_hex(8)}"
    # os.open with 0o666 (not mkstemp's 0o600) so the published file follows the umask.
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            _write_durably(handle, data)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


def _write_durably(handle: BinaryIO, data: bytes) -> None:
    handle.write(data)
    handle.flush()
    os.fsync(handle.fileno())


def _publish(staged: Path, target: Path) -> None:
    """Rename over the target, then fsync the folder so the rename survives a power cut."""
    os.replace(staged, target)
    _fsync_folder(target.parent)


def _ensure_folder(folder: Path) -> None:
    """Create ``folder`` with each new entry fsynced into its parent."""
    if folder.is_dir():
        return
    _ensure_folder(folder.parent)
    folder.mkdir(exist_ok=True)
    _fsync_folder(folder.parent)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sweep(folder: Path) -> None:
    """Remove temporary files of writers on this host that died mid-write (``os._exit``, an
    OOM kill): a dead process can never publish them. Other hosts' files are left alone."""
    for leftover in folder.glob(".tmp.*"):
        found = _TEMP.fullmatch(leftover.name)
        if found and found["host"] == _HOST and not _alive(int(found["pid"])):
            leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        pass
    return True


# ---------------------------------------------------------------- store: fence and record


def _recording_context() -> TaskContext | None:
    """The running attempt's context when there is a store to record in, else None."""
    context = current()
    if context is None or context.ti_id is None or context.db_url is None:
        return None
    return context


@contextmanager
def _fenced(context: TaskContext | None, result: WriteResult) -> Iterator[None]:
    """Run the body while this attempt provably holds its lease, then record the write.

    The lease check locks the task instance (and on SQLite the whole database) for the
    transaction, so no other attempt can be granted the task between check and rename.
    """
    if context is None:
        yield
        return
    from dagrun.store import attempts
    from dagrun.store.engine import shared_store

    ti_id = context.ti_id
    assert ti_id is not None  # _recording_context gives only a running attempt's context
    store = shared_store(context.db_url)
    with store.write() as conn:
        attempts.check_lease(conn, ti_id, context.fence_token, store.now(conn))
        yield
        attempts.record_partition_write(
            conn,
            dataset=result.dataset,
            partition_key=result.ds,
            path=result.path,
            rows=result.rows,
            sha256=result.sha256,
            unchanged=result.unchanged,
            ti_id=ti_id,
            dag_id=context.dag_id,
            task_id=context.task_id,
            run_pk=attempts.run_pk_of(conn, ti_id),
            try_number=context.try_number,
            fence_token=context.fence_token,
            written_at=store.now(conn),
        )
