"""The error hierarchy: one root, typed subclasses that carry the offending input.

Every error a user can cause derives from :class:`DagrunError` and from the builtin it
resembles, so callers may catch either. The CLI maps :class:`UsageError` subclasses to exit
code 2 with a one-line message; anything else that escapes is a bug and shows a traceback
only with ``--verbose``.
"""

from __future__ import annotations


class DagrunError(Exception):
    """Root of every error dagrun raises on purpose."""


class UsageError(DagrunError):
    """Bad input from the user (exit code 2)."""


class DagDefinitionError(UsageError, ValueError):
    """A DAG or task is defined wrongly (bad option, bad id, unknown context name...)."""

    def __init__(self, message: str, *, dag_id: str | None = None, task_id: str | None = None):
        where = ""
        if dag_id and task_id:
            where = f"task '{task_id}' in DAG '{dag_id}': "
        elif task_id:
            where = f"task '{task_id}': "
        elif dag_id:
            where = f"DAG '{dag_id}': "
        super().__init__(where + message)
        self.dag_id = dag_id
        self.task_id = task_id


class ScheduleError(UsageError, ValueError):
    """A schedule, timezone or date that cannot be understood."""

    def __init__(self, message: str, *, value: object = None):
        super().__init__(message)
        self.value = value


class ParamError(UsageError, ValueError):
    """A run's conf breaks a param the DAG declares, or leaves out a required one; carries
    the param's name and the value given (None when it is missing)."""

    def __init__(self, message: str, *, name: str, value: object = None):
        super().__init__(message)
        self.name = name
        self.value = value


class DagFileError(DagrunError):
    """A DAG file failed to load; carries the file, the line where known, and the reason."""

    def __init__(self, file: str, reason: str, line: int | None = None):
        location = f"{file}:{line}" if line else file
        super().__init__(f"{location}: {reason}")
        self.file = file
        self.reason = reason
        self.line = line


class DagNotFound(UsageError, LookupError):
    """No DAG with this id was found in the dags folder."""

    def __init__(self, dag_id: str, folder: str | None = None):
        where = f" in {folder}, the dags folder this store serves" if folder else ""
        super().__init__(f"unknown DAG '{dag_id}'{where} (see `dagrun dags list`)")
        self.dag_id = dag_id
        self.folder = folder


class TaskNotFound(UsageError, LookupError):
    """The DAG has no task with this id."""

    def __init__(self, dag_id: str, task_id: str):
        super().__init__(
            f"DAG '{dag_id}' has no task '{task_id}' (see `dagrun dags show {dag_id}`)"
        )
        self.dag_id = dag_id
        self.task_id = task_id


class RunNotFound(UsageError, LookupError):
    """No DAG run matches the given run id or date."""

    def __init__(self, dag_id: str, what: str):
        super().__init__(f"DAG '{dag_id}' has no run {what} (see `dagrun runs list {dag_id}`)")
        self.dag_id = dag_id
        self.what = what


class StoreFolderMissing(UsageError, FileNotFoundError):
    """A SQLite URL names a file in a folder that does not exist: a typo is not made into a
    new folder (only the default store's own folder under ``DAGRUN_HOME`` is)."""

    def __init__(self, url: str, folder: str):
        super().__init__(
            f"--db {url}: the folder {folder} does not exist; create it first, or correct the path"
        )
        self.url = url
        self.folder = folder


class StoreError(DagrunError):
    """The metadata database cannot be reached or is not in the expected shape."""


class StoreUnavailable(StoreError, ConnectionError):
    """The database cannot be reached, or the connection to it was lost: an outage, which
    long-running processes ride out (``DAGRUN_DB_OUTAGE_SECONDS``)."""


class StoreConflict(StoreError):
    """A transaction lost a race (a deadlock victim, a busy database) and was rolled back;
    trying it again is the remedy."""


class StoreFull(StoreUnavailable):
    """The disk under the database is full: every write fails and rolls back, so nothing
    committed is lost. Ridden out like an outage, which freeing space ends."""

    def __init__(self, database: str, detail: str):
        super().__init__(
            f"the disk under the database {database} is full ({detail}): free space there "
            "and run the same command again; nothing committed was lost"
        )
        self.database = database


class StoreDamaged(StoreError):
    """The database answers, but what it holds is damaged (SQLite's "database disk image
    is malformed", a text value that no longer decodes, PostgreSQL's data_corrupted)."""

    def __init__(self, database: str, detail: str, restore: str):
        super().__init__(
            f"the database {database} is damaged ({detail}): `dagrun db check` names the "
            f"damage; {restore}"
        )
        self.database = database
        self.detail = detail


class NotDagrunStore(StoreError):
    """The database is not dagrun's: a file that is not SQLite, or a database that holds
    another program's tables. dagrun refuses to write into it."""

    def __init__(self, database: str, why: str):
        super().__init__(
            f"{database} {why}: dagrun will not write into it; point --db at dagrun's "
            "database, or at a new, empty one"
        )
        self.database = database


class StoreLocked(StoreConflict):
    """Another process held SQLite's write lock past the busy timeout."""

    def __init__(self, database: str, detail: str):
        super().__init__(
            f"the database {database} is locked: another process held it longer than the "
            f"busy timeout ({detail}); try again once that process is done"
        )
        self.database = database


class OutageTooLong(StoreUnavailable):
    """The database stayed unavailable past the limit a long-running process waits."""

    def __init__(self, seconds: float, limit: float, last_error: StoreError | str):
        limits = f"DAGRUN_DB_OUTAGE_SECONDS={limit:g}"
        if isinstance(last_error, StoreFull):
            text = f"{last_error} (gave up after {seconds:.0f} s, {limits})"
        else:
            text = (
                f"the database has been unavailable for {seconds:.0f} s, longer than "
                f"{limits}; giving up ({last_error})"
            )
        super().__init__(text)
        self.seconds = seconds
        self.limit = limit


class LeaseLost(DagrunError):
    """A guarded update changed no row: the attempt no longer owns its task instance."""

    def __init__(self, ti_id: int, fence_token: int):
        super().__init__(f"task instance {ti_id} lost its lease (fence token {fence_token})")
        self.ti_id = ti_id
        self.fence_token = fence_token


class NotifyError(DagrunError):
    """A notifier could not deliver: a webhook that kept failing or refused the event, a
    command that failed or ran too long; or a notifier was made with bad arguments. Its
    text never holds a header value, as headers carry secrets."""


class LocalRunStuck(DagrunError, RuntimeError):
    """A ``dagrun test`` run that cannot go on: nothing can run and nothing waits for its
    time (a task waits for a pool with no slot); carries the DAG and the reason."""

    def __init__(self, dag_id: str, reason: str):
        super().__init__(f"the test run of '{dag_id}' cannot go on: {reason}")
        self.dag_id = dag_id
        self.reason = reason


class NonRetryableError(Exception):
    """Raise from a task to fail the attempt with no retry (bad input, 4xx-style errors)."""


class SkipTask(Exception):
    """Raise from a task to end it ``skipped`` (nothing to do for this date): no retry, and
    downstream tasks follow their trigger rules as for any skipped task."""
