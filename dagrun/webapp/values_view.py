"""A task instance's values as its page shows them: what it returned and what it pushed.

TaskFlow's return value (``task_instance.return_value``) and the XComs (``xcom``) are JSON
text. The page reads at most the first ``HEAD_CHARS`` characters of each, cut by the
database (a value of many megabytes is never read whole to show the start of it), and
pretty-prints those it read whole; a longer one is shown as its start, with its size and
a link that downloads it whole (``read_value``). A secret the store holds is masked in them
as in a log (``sensitive.Hider``): a task that returned a password it read shows ``***``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagrun.errors import UsageError
from dagrun.store import Store, run_reads, task_reads, xcoms
from dagrun.store import variables as var_store
from dagrun.store.run_reads import RunRow
from dagrun.store.sensitive import Hider
from dagrun.store.task_reads import AttemptRow, TaskRow
from dagrun.webapp.http import BadRequest, NotFound
from dagrun.webapp.models import DagInfo, read_dag

if TYPE_CHECKING:
    from sqlalchemy import Connection

#: A value longer than this (in characters of JSON) is shown cut, with a download link.
HEAD_CHARS = 64 * 1024


@dataclass(frozen=True)
class ValueShown:
    """One value: its key, its size in characters of JSON, the text shown (pretty JSON, or
    its first ``HEAD_CHARS`` characters as stored) and whether that is all of it."""

    key: str
    size: int
    text: str
    whole: bool

    @property
    def returned(self) -> bool:
        return self.key == xcoms.RETURN_KEY


@dataclass(frozen=True)
class ValuesView:
    """What a task instance's values page shows: its attempts and the values it pushed."""

    dag: DagInfo
    run: RunRow
    instance: TaskRow
    attempts: list[AttemptRow]
    values: list[ValueShown]


def task_instance_of(conn: Connection, run: RunRow, task_id: str, map_index: int | None) -> TaskRow:
    """The task instance a page names: a mapped task needs ``?map_index=N`` (400 without),
    an index the task does not have is a 404."""
    try:
        return task_reads.task_instance(conn, run, task_id, map_index)
    except task_reads.MappedTaskError as exc:
        raise BadRequest(f"{exc} (?map_index=N)") from None
    except UsageError as exc:
        raise NotFound(str(exc)) from None


def read_values(
    store: Store, dag_id: str, run_id: str, task_id: str, map_index: int | None
) -> ValuesView:
    """A task instance's return value and XComs, each cut to ``HEAD_CHARS`` characters."""
    with store.read() as conn:
        info = read_dag(store, conn, dag_id)
        run = run_reads.run_by_id(conn, dag_id, run_id)
        instance = task_instance_of(conn, run, task_id, map_index)
        tries = task_reads.attempts(conn, instance.id)
        stored = xcoms.instance_values(
            conn, instance.id, run.id, task_id, instance.map_index, HEAD_CHARS
        )
        hide = Hider(var_store.stored_secrets(conn)) if stored else Hider(())
    return ValuesView(info, run, instance, tries, [_shown(v, hide) for v in stored])


def read_value(
    store: Store, dag_id: str, run_id: str, task_id: str, map_index: int | None, key: str
) -> str:
    """The whole JSON text a task instance left under ``key``, its secrets masked (a 404
    when it left none)."""
    with store.read() as conn:
        read_dag(store, conn, dag_id)
        run = run_reads.run_by_id(conn, dag_id, run_id)
        instance = task_instance_of(conn, run, task_id, map_index)
        text = xcoms.instance_value(conn, instance.id, run.id, task_id, instance.map_index, key)
        hide = Hider(var_store.stored_secrets(conn))
    if text is None:
        raise NotFound(f"{dag_id}.{task_id} left no value under the key {key!r} in {run_id}")
    return hide(text)


def download_name(task_id: str, key: str, map_index: int) -> str:
    """The file name a downloaded value is saved as: ``task[.index].key.json``, in safe
    characters only."""
    index = f".{map_index}" if map_index >= 0 else ""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{task_id}{index}.{key}") + ".json"


def _shown(value: xcoms.StoredValue, hide: Hider) -> ValueShown:
    if not value.whole:
        return ValueShown(value.key, value.size, hide(value.head), whole=False)
    return ValueShown(value.key, value.size, hide(_pretty(value.head)), whole=True)


def _pretty(text: str) -> str:
    """JSON indented for reading, its strings as written (not ``\\u`` escapes)."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:  # stored by hand, not JSON: shown as it is
        return text
