"""Keeps the store's DAG registry in step with the dags folder.

Only files whose content changed since the last parse, or that imported a helper file that
changed, are imported again; unchanged files keep their stored specs, so a scheduler tick or
a ``dags list`` with nothing changed costs a directory walk, a hash per file and one query.
Cross-file rules (one file per dag_id) are checked here because no single import can see
them. A file that breaks keeps its DAGs: they stay scheduled from their last good spec, run
from the file's last good source, and show the import error beside them; deleting the file
removes them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime

from dagrun.parsing import parser
from dagrun.parsing.spec import DagSpec
from dagrun.store import Store, dag_reads, registry, rendered

DUPLICATE_PREFIX = "duplicate DAG id"


@dataclass
class SyncReport:
    """What one sync did: how many files were imported, and which were unchanged."""

    parsed: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)


def dags_folder(value: str | os.PathLike | None = None) -> str:
    return os.path.abspath(value or os.environ.get("DAGRUN_DAGS_FOLDER") or "dags")


def sync_dags(store: Store, folder: str, timeout: float = parser.DEFAULT_TIMEOUT) -> SyncReport:
    """Parse what changed in ``folder`` and record DAGs and import errors in the store;
    every file when other code parsed the ones recorded (a dagrun upgrade: a file that
    failed may import now, an unchanged one may make a richer spec)."""
    found = parser.discover(folder)
    code = rendered.fingerprint()
    with store.read() as conn:
        known = dag_reads.known_files(conn)
        stale = dag_reads.parsed_by(conn) != code
    removed = [p for p in known if p not in found]
    changed = {
        p: h for p, h in found.items() if stale or p not in known or known[p].content_hash != h
    }
    if changed or removed:
        changed.update(_clashing_files(known, found))
        changed.update(_dependents(known, found, set(changed) | set(removed)))
    report = SyncReport(
        parsed=sorted(changed), unchanged=len(found) - len(changed), removed=removed
    )
    if not changed and not removed and not stale:
        return report
    results = parser.parse_files(changed, timeout) if changed else {}
    owners = {
        dag_id: path
        for path, k in known.items()
        if path in found and path not in changed
        for dag_id in k.dag_ids
    }
    _keep_previous_owners(known, results, owners)
    kept = _keep_last_good(known, results, owners)
    now = datetime.now(UTC)
    with store.write() as conn:
        registry.forget_files(conn, removed)
        parsed = [_parsed(results[path], owners, found, kept.get(path)) for path in sorted(results)]
        registry.save_files(conn, parsed, now)
        registry.deactivate_missing(conn, set(owners))
        if stale:
            registry.set_parsed_by(conn, code)
    return report


def _parsed(
    result: parser.FileResult,
    owners: dict[str, str],
    found: dict[str, str],
    kept: tuple[str, ...] | None,
) -> registry.ParsedFile:
    """What the registry records of one parsed file. A file that failed but had good DAGs
    keeps owning them (``kept``): they run on as last parsed, beside the error."""
    specs, error, line = _resolve_duplicates(result, owners)
    helpers = tuple(h for h in result.depends_on if h in found)
    good = _source(result.path, result.content_hash) if error is None else None
    return registry.ParsedFile(
        result.path, result.content_hash, specs, error, line, helpers, kept, good, result.warnings
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
