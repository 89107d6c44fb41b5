"""Keeps the store's DAG registry in step with the dags folder.

Only files whose content changed since the last parse, or that imported a helper file that
changed, are imported again; unchanged files keep their stored specs. A file whose size and
modification time are the ones recorded is unchanged without being read
(``parsing.discovery``); another is read and hashed, and one whose hash is the recorded one
(touched, copied over itself) keeps its parse and gets its new stat recorded. So a scheduler
tick or a ``dags list`` with nothing changed costs a directory walk, a stat per file and one
read transaction: it forks no parse child, imports neither the parser nor the authoring
API, and writes nothing.
Cross-file rules (one file per dag_id) are checked here because no single import can see
them. A file that breaks keeps its DAGs: they stay scheduled from their last good spec, run
from the file's last good source, and show the import error beside them; deleting the file
removes them.

The folder belongs to the store: the first folder synced into a store is the one it serves
(``choose_folder``). A command run from another directory, or with another
``--dags-folder``, syncs the store's own folder instead (or nothing, where that folder is
not on this host), so it can never empty or change the DAG list by looking elsewhere;
``dagrun db rebind-folder`` moves a store on purpose.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dagrun import settings
from dagrun.errors import UsageError
from dagrun.parsing import discovery
from dagrun.parsing.discovery import Stat
from dagrun.store import Store, dag_reads, rendered

if TYPE_CHECKING:
    from dagrun.parsing import parser
    from dagrun.parsing.spec import DagSpec
    from dagrun.store import registry

DUPLICATE_PREFIX = "duplicate DAG id"


@dataclass(frozen=True)
class FolderChoice:
    """Which folder a sync reads, given the one asked for and the one the store serves."""

    #: The folder the store serves (or, for a store that serves none yet, the one asked for).
    served: str
    #: The folder to read now; None when the store's folder is not on this host.
    read: str | None
    #: Whether this sync makes ``read`` the store's folder (its first sync).
    bind: bool
    #: Said once on stderr when the folder asked for is not the one the store serves.
    note: str | None = None


@dataclass
class SyncReport:
    """What one sync did: how many files were imported, and which were unchanged."""

    parsed: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    folder: FolderChoice | None = None
    #: Files of ``parsed`` that failed to import, with the reason.
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def served(self) -> str | None:
        return self.folder.served if self.folder else None


def dags_folder(value: str | os.PathLike | None = None) -> str:
    return os.path.abspath(value or settings.get("core.dags_folder"))


def sync_dags(store: Store, folder: str, timeout: float | None = None) -> SyncReport:
    """Parse what changed in ``folder`` and record DAGs and import errors in the store;
    every file when other code parsed the ones recorded (a dagrun upgrade: a file that
    failed may import now, an unchanged one may make a richer spec). ``timeout``: each
    file's limit (default ``parser.DEFAULT_TIMEOUT``)."""
    code = rendered.fingerprint()
    with store.read() as conn:
        known = dag_reads.known_files(conn)
        stale = dag_reads.parsed_by(conn) != code
        choice = choose_folder(folder, dag_reads.served_folder(conn), list(known))
    if choice.read is None:
        return SyncReport(unchanged=len(known), folder=choice)
    found = _Found.look(choice.read, known)
    removed = [p for p in known if p not in found.hashes]
    changed = {
        p: h
        for p, h in found.hashes.items()
        if stale or p not in known or known[p].content_hash != h
    }
    if changed or removed:
        changed.update(_clashing_files(known, found.hashes))
        changed.update(_dependents(known, found.hashes, set(changed) | set(removed)))
    restat = found.restat(known, changed)
    report = SyncReport(
        parsed=sorted(changed),
        unchanged=len(found.hashes) - len(changed),
        removed=removed,
        folder=choice,
    )
    if not changed and not removed and not stale and not choice.bind and not restat:
        return report
    from dagrun.store import registry  # only a sync that records something writes

    results = _parse(changed, timeout)
    report.failed = {p: r.error.reason for p, r in results.items() if r.error is not None}
    owners = {
        dag_id: path
        for path, k in known.items()
        if path in found.hashes and path not in changed
        for dag_id in k.dag_ids
    }
    _keep_previous_owners(known, results, owners)
    kept = _keep_last_good(known, results, owners)
    now = datetime.now(UTC)
    with store.write() as conn:
        registry.forget_files(conn, removed)
        parsed = [_parsed(results[path], owners, found, kept.get(path)) for path in sorted(results)]
        registry.save_files(conn, parsed, now)
        registry.record_stats(conn, restat)
        registry.deactivate_missing(conn, set(owners))
        if stale:
            registry.set_parsed_by(conn, code)
        if choice.bind:
            registry.bind_folder(conn, choice.read)
    return report


@dataclass(frozen=True)
class _Found:
    """The folder's files as a sync finds them: each one's content hash (the recorded one
    where its stat is the recorded one, else read now), and the stat to record with that
    hash (None where it could not tell the file's next edit: ``discovery.settled``)."""

    hashes: dict[str, str]
    stats: dict[str, Stat | None]

    @classmethod
    def look(cls, folder: str, known: dict[str, dag_reads.KnownFile]) -> _Found:
        now = time.time_ns()
        hashes: dict[str, str] = {}
        stats: dict[str, Stat | None] = {}
        for path, stat in discovery.stats(folder).items():
            k = known.get(path)
            hashes[path] = k.content_hash if k and k.stat == stat else discovery.file_hash(path)
            stats[path] = stat if discovery.settled(stat, now) else None
        return cls(hashes, stats)

    def restat(self, known: dict[str, dag_reads.KnownFile], changed: dict) -> dict[str, Stat]:
        """The files kept as parsed whose stat to record is not the one recorded: touched
        (their content is the same), or settled since their parse."""
        return {
            p: s
            for p, s in self.stats.items()
            if s is not None and p in known and p not in changed and known[p].stat != s
        }


def _parse(changed: dict[str, str], timeout: float | None) -> dict[str, parser.FileResult]:
    """Import the changed files in parse children. The parser is imported here: a sync
    with nothing to parse forks no child and loads none of what parsing needs."""
    if not changed:
        return {}
    from dagrun.parsing import parser

    return parser.parse_files(changed, parser.DEFAULT_TIMEOUT if timeout is None else timeout)


def choose_folder(asked: str, bound: str | None, known: list[str]) -> FolderChoice:
    """The folder a sync reads. A store that serves a folder reads that one whatever was
    asked (and nothing where it is not on this host). A store that serves none yet takes
    the folder asked for, if it exists and holds every file the store knows (a store from
    before folders were bound); one whose files lie elsewhere reads nothing until a
    command runs from their folder."""
    asked = os.path.abspath(asked)
    if bound is None and all(_inside(p, asked) for p in known):
        return FolderChoice(asked, asked, bind=os.path.isdir(asked))
    if bound is None:  # files parsed before stores were bound to a folder
        held = os.path.commonpath([os.path.dirname(p) for p in known])
        note = (
            f"this store's DAG files are in {held}, not in {asked}: run once from the dags "
            f"folder that holds them, or {_MOVE}"
        )
        return FolderChoice(held, None, bind=False, note=note)
    if not os.path.isdir(bound):
        away = (
            f"this store's dags folder {bound} is not on this host: "
            f"showing the DAGs as last parsed ({_MOVE})"
        )
        return FolderChoice(bound, None, bind=False, note=away)
    elsewhere = f"this store serves the DAGs of {bound}, not {asked}"
    return FolderChoice(bound, bound, bind=False, note=None if asked == bound else elsewhere)


_MOVE = "`dagrun db rebind-folder PATH` moves the store to another folder"


def rebind_folder(store: Store, folder: str) -> SyncReport:
    """Move the store to another dags folder, audited, and sync it: DAGs whose files are
    not in the new folder go, the new folder's come (their runs stay, by DAG id)."""
    from dagrun.store import audit, registry

    folder = os.path.abspath(folder)
    if not os.path.isdir(folder):
        raise UsageError(f"no folder {folder}: give the dags folder the store should serve")
    with store.write() as conn:
        previous = dag_reads.served_folder(conn)
        registry.bind_folder(conn, folder)
        audit.record(store, conn, "rebind_folder", None, before=previous, after=folder)
    return sync_dags(store, folder)


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def _parsed(
    result: parser.FileResult,
    owners: dict[str, str],
    found: _Found,
    kept: tuple[str, ...] | None,
) -> registry.ParsedFile:
    """What the registry records of one parsed file. A file that failed but had good DAGs
    keeps owning them (``kept``): they run on as last parsed, beside the error."""
    from dagrun.store import registry

    specs, error, line = _resolve_duplicates(result, owners)
    helpers = tuple(h for h in result.depends_on if h in found.hashes)
    good = _source(result.path, result.content_hash) if error is None else None
    return registry.ParsedFile(
        result.path,
        result.content_hash,
        specs,
        error,
        line,
        helpers,
        kept,
        good,
        result.warnings,
        found.stats.get(result.path),
    )


def _keep_last_good(
    known: dict[str, dag_reads.KnownFile],
    results: dict[str, parser.FileResult],
    owners: dict[str, str],
) -> dict[str, tuple[str, ...]]:
    """Files that failed to load now but defined DAGs before: path -> those DAG ids, which
    stay theirs (and scheduled) unless another file defines them now."""
    kept = {}
    for path, result in results.items():
        previous = known[path].dag_ids if path in known else ()
        if result.error is not None and previous:
            ids = tuple(d for d in previous if owners.setdefault(d, path) == path)
            kept[path] = ids
    return kept


def _source(path: str, content_hash: str) -> str | None:
    """A file's text as it parsed (kept so workers can run it while a later edit fails);
    None if it changed since (the next sync parses it again)."""
    import hashlib  # only a sync that parsed something

    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if hashlib.sha1(data).hexdigest() != content_hash:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _keep_previous_owners(
    known: dict[str, dag_reads.KnownFile],
    results: dict[str, parser.FileResult],
    owners: dict[str, str],
) -> None:
    """A re-parsed file that still defines a dag_id it owned keeps it (path order aside)."""
    for path, result in results.items():
        previous = known[path].dag_ids if path in known else ()
        for spec in result.dags:
            if spec.dag_id in previous:
                owners[spec.dag_id] = path


def _dependents(
    known: dict[str, dag_reads.KnownFile], found: dict[str, str], edited: set[str]
) -> dict[str, str]:
    """Unchanged files that imported an edited or removed helper, and files that failed on
    a missing module once new files appear: parsing them again is the only way to know."""
    added = any(p not in known for p in edited)
    return {
        p: found[p]
        for p, k in known.items()
        if p in found
        and (
            any(dep in edited for dep in k.depends_on)
            or (added and k.error is not None and _MISSING_MODULE in k.error)
        )
    }


_MISSING_MODULE = "ModuleNotFoundError"


def _clashing_files(known: dict[str, dag_reads.KnownFile], found: dict[str, str]) -> dict:
    """Files rejected for a duplicate dag_id are rechecked when other files change."""
    return {
        p: found[p]
        for p, k in known.items()
        if p in found and k.error and k.error.startswith(DUPLICATE_PREFIX)
    }


def _resolve_duplicates(
    result: parser.FileResult, owners: dict[str, str]
) -> tuple[list[DagSpec], str | None, int | None]:
    """Keep the DAGs whose id no earlier file owns; report the first clash of this file."""
    error = result.error.reason if result.error else None
    line = result.error.line if result.error else None
    kept = []
    for spec in result.dags:
        first = owners.get(spec.dag_id)
        if first is not None and first != result.path:
            if error is None:
                error = f"{DUPLICATE_PREFIX} '{spec.dag_id}': already defined in {first}"
                line = spec.line
            continue
        owners[spec.dag_id] = result.path
        kept.append(spec)
    return kept, error, line
