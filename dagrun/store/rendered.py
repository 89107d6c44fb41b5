"""SQL rendered once per installation, not once per process: every named statement of the
store (the catalogue's, the reads', and those other modules keep) as each dialect spells
them, and the DDL of a new schema.

Rendering is SQLAlchemy's compiler, about a millisecond a statement: a one-task ``dagrun
run`` rendered some forty statements and the forty tables and indexes of a new SQLite
database, a fifth of what it took after its imports. What is rendered depends only on
dagrun's source and SQLAlchemy's version, so, like Python's bytecode, it is kept in a file
beside the code (``__pycache__``) named by a fingerprint of both: every dagrun source file's
size and modification time, SQLAlchemy's installed package (found without importing it:
a process whose statements were all rendered never imports SQLAlchemy) and Python's
version. A change to either
renders afresh under a new name. A file that cannot be read or written is ignored, and
nothing is written where Python writes no bytecode (``PYTHONDONTWRITEBYTECODE``): rendering
is then what it was before, never wrong.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import os
import pickle
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Where the files live; tests point it elsewhere.
DIRECTORY = Path(__file__).parent / "__pycache__"
#: The dagrun package folder: every source file below it is in the fingerprint.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_known: dict[str, dict[str, Any]] = {}
_rendered_here: dict[str, dict[str, Any]] = {}


@functools.cache
def fingerprint() -> str:
    """What rendered SQL depends on: SQLAlchemy's installation, Python's version and every
    dagrun source file (by size and modification time, as Python checks its bytecode)."""
    return fingerprint_of(_PACKAGE)


def _sqlalchemy_installed() -> str:
    """SQLAlchemy's installed package, as its ``__init__``'s path, size and modification
    time: an upgrade rewrites it (``__version__`` would import it)."""
    spec = importlib.util.find_spec("sqlalchemy")
    origin = spec.origin if spec is not None and spec.origin else ""
    stat = os.stat(origin) if origin else None
    return f"{origin} {stat.st_size} {stat.st_mtime_ns}" if stat else "absent"


def fingerprint_of(package: str) -> str:
    """CRC-32 and Adler-32 of every file's name, size and modification time: a cache key
    that changes with any of them (zlib's checksums, not a cryptographic hash: nothing is
    secret here, and hashlib's first use loads OpenSSL, a millisecond and a half)."""
    parts = [f"{_sqlalchemy_installed()} {sys.version};"]
    for folder, subfolders, files in os.walk(package):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            stat = os.stat(os.path.join(folder, name))
            where = f"{folder[len(package) :]}/{name}"
            parts.append(f"{where} {stat.st_size} {stat.st_mtime_ns};")
    text = "".join(parts).encode()
    return f"{zlib.crc32(text):08x}{zlib.adler32(text):08x}{len(text):x}"


def get(dialect: str, name: str) -> Any:
    """What was rendered under ``name`` for ``dialect``, by this process or an earlier one;
    None if nothing was."""
    known = _known.get(dialect)
    if known is None:
        known = _known[dialect] = _read(_path(dialect))
    return known.get(name)


def kept(dialect: str, name: str, render: Callable[[], Any]) -> Any:
    """What was rendered under ``name`` for ``dialect``, by this process or an earlier one;
    else ``render()``, kept for later ones."""
    found = get(dialect, name)
    if found is None:
        found = render()
        put(dialect, name, found)
    return found


def put(dialect: str, name: str, value: Any) -> None:
    """Keep what was rendered; written to the file when this process exits."""
    if not _rendered_here:
        atexit.register(save)
    _known.setdefault(dialect, {})[name] = value
    _rendered_here.setdefault(dialect, {})[name] = value


def save() -> None:
    """Add what this process rendered to the files (atomically: other processes may be
    reading or writing them), and remove files of older fingerprints."""
    if sys.dont_write_bytecode:
        return
    for dialect, entries in _rendered_here.items():
        path = _path(dialect)
        with contextlib.suppress(Exception):  # an unwritable folder: render next time
            _write(path, {**_read(path), **entries})
            for old in path.parent.glob(f"rendered-{dialect}-*.pickle"):
                if old != path:
                    old.unlink(missing_ok=True)
    _rendered_here.clear()


def forget() -> None:
    """Drop what this process knows, read or rendered (tests)."""
    _known.clear()
    _rendered_here.clear()


def _path(dialect: str) -> Path:
    return DIRECTORY / f"rendered-{dialect}-{fingerprint()}.pickle"


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            found = pickle.load(file)
    except Exception:  # missing, unreadable, from an interrupted write: render afresh
        return {}
    return found if isinstance(found, dict) else {}


def _write(path: Path, entries: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # only a process that rendered something writes

    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".rendered-")
    try:
        with os.fdopen(fd, "wb") as file:
            pickle.dump(entries, file, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(temporary, 0o644)  # readable by every user of the installation, as bytecode
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
