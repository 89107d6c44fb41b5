"""``dagrun dags check-airflow``: whether dagrun runs an Airflow DAG file unchanged, read from
its source without running it (Python's ``ast``).

Pure: source text in, a ``FileReport`` out. What it finds, each with its line:

- unsupported (the file would not load): an ``import airflow...`` of a module dagrun does
  not serve, or a name it does not provide there (``dagrun.parsing.airflow_names``, the
  table the import alias serves from), also as an attribute (``models.Foo``,
  ``@task.docker``); an argument that a provided DAG, operator, sensor, decorator or
  function would refuse (``dagrun.airflow.signatures``); a schedule dagrun does not have
  (``@continuous``, a ``relativedelta``); a syntax error.
- warnings (the file loads; dagrun does not act on this): an argument or ``default_args``
  key accepted but ignored (``dag.IGNORED``, ``arguments.IGNORED``), and an ``email`` while
  no SMTP server is configured. Each once per file, at its first line, as a parse warns.

What it cannot see is left alone: calls of a file's own operator subclasses, arguments
given as ``**kwargs``, values only known when the file runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dagrun.airflow import arguments, signatures
from dagrun.airflow.dag import UNSUPPORTED_PRESETS
from dagrun.airflow.mail import NO_SERVER_REASON
from dagrun.parsing import airflow_names

ROOT = "airflow"
NOT_PROVIDED = "not provided by dagrun"
IGNORED = "accepted but not acted on by dagrun"
_SCHEDULES = ("schedule", "schedule_interval", "timetable")
_EMAIL_FLAGS = ("email_on_failure", "email_on_retry")


@dataclass(frozen=True)
class Finding:
    """An unsupported name or argument, or a warning: what (``name``, as written in the
    file), where (``line``) and why (``reason``)."""

    name: str
    line: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "line": self.line, "reason": self.reason}


@dataclass
class FileReport:
    """One file's findings; it runs unchanged (``ok``) when nothing is unsupported."""

    file: str
    unsupported: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unsupported

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "ok": self.ok,
            "unsupported": [f.to_json() for f in self.unsupported],
            "warnings": [f.to_json() for f in self.warnings],
        }


@dataclass(frozen=True)
class Module:
    """A local name bound to an Airflow module (``airflow.operators.bash``)."""

    path: str


@dataclass(frozen=True)
class Provided:
    """A local name bound to a provided object (``home`` as ``airflow_names.provided``
    gives it), or an attribute of one; ``shown`` is how the file writes it."""

    home: str
    attributes: tuple[str, ...]
    shown: str


Ref = Module | Provided


def check_source(
    source: str | bytes, file: str = "<string>", *, mail_server: bool = False
) -> FileReport:
    """What dagrun makes of one Airflow DAG file's ``source`` (bytes: decoded as Python
    decodes a file); ``mail_server``: whether an SMTP server is configured (without one,
    an ``email`` is a warning)."""
    report = FileReport(file)
    try:
        tree = ast.parse(source, file)
    except (SyntaxError, ValueError) as exc:  # ValueError: a null byte in the source
        line = getattr(exc, "lineno", None) or 1
        report.unsupported.append(Finding("syntax error", line, getattr(exc, "msg", str(exc))))
        return report
    _Reader(report, mail_server).read(tree)
    report.unsupported.sort(key=lambda f: f.line)
    report.warnings = _once_each(sorted(report.warnings, key=lambda f: f.line))
    return report


def _once_each(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str]] = set()
    kept = []
    for finding in findings:
        if (finding.name, finding.reason) not in seen:
            seen.add((finding.name, finding.reason))
            kept.append(finding)
    return kept


class _Reader:
    """Two passes over a module: the names its imports bind (and the dicts its names are
    given, for ``default_args=name``), then every call and attribute that uses them."""

    def __init__(self, report: FileReport, mail_server: bool):
        self.report = report
        self.mail_server = mail_server
        self.names: dict[str, Ref] = {}
        self.dicts: dict[str, ast.Dict] = {}

    def read(self, tree: ast.Module) -> None:
        nodes = list(ast.walk(tree))
        rebound: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                self._import(node)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                self._import_from(node)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.dicts[target.id] = node.value
            rebound.update(_bound_otherwise(node))
        for name in rebound:  # a name also given another value somewhere: not checked
            self.names.pop(name, None)
        for node in nodes:
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                self._resolve(node, report=True)
            elif isinstance(node, ast.Call):
                self._call(node)

    # ---------------------------------------------------------------- imports

    def _import(self, node: ast.Import) -> None:
        for alias in node.names:
            path = alias.name
            if not _is_airflow(path):
                continue
            if not _served(path):
                self._unsupported(path, node.lineno, NOT_PROVIDED)
            elif alias.asname:
                self.names[alias.asname] = Module(path)
            else:
                self.names[ROOT] = Module(ROOT)

    def _import_from(self, node: ast.ImportFrom) -> None:
        path = node.module or ""
        if not _is_airflow(path):
            return
        for alias in node.names:
            if alias.name == "*":
                self._star(path, node.lineno)
                continue
            bound = self._member(Module(path), alias.name, alias.name)
            if bound is None:
                self._unsupported(f"{path}.{alias.name}", node.lineno, NOT_PROVIDED)
            else:
                self.names[alias.asname or alias.name] = bound

    def _star(self, path: str, line: int) -> None:
        if path not in airflow_names.PATHS:
            if not _served(path):
                self._unsupported(f"{path}.*", line, NOT_PROVIDED)
            return
        for name in airflow_names.PATHS[path]:
            bound = self._member(Module(path), name, name)
            if bound is not None:
                self.names[name] = bound

    # ---------------------------------------------------------------- names in use

    def _member(self, ref: Ref, name: str, shown: str) -> Ref | None:
        """``name`` of a module or object; None when dagrun does not provide it."""
        if isinstance(ref, Provided):
            attributes = (*ref.attributes, name)
            if not signatures.has(ref.home, attributes):
                return None
            return Provided(ref.home, attributes, shown)
        home = airflow_names.provided(ref.path, name)
        if home is not None:
            return Provided(home, (), shown)
        if _served(f"{ref.path}.{name}"):
            return Module(f"{ref.path}.{name}")
        return None

    def _resolve(self, node: ast.expr, report: bool = False) -> Ref | None:
        """What an expression names, if it is an Airflow module or provided object; an
        attribute dagrun does not provide is reported (once: its outer nodes name nothing)."""
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if not isinstance(node, ast.Attribute) or node.attr.startswith("_"):
            return None
        base = self._resolve(node.value)
        if base is None:
            return None
        found = self._member(base, node.attr, ast.unparse(node))
        if found is None and report:
            where = base.path if isinstance(base, Module) else base.shown
            self._unsupported(f"{where}.{node.attr}", node.lineno, NOT_PROVIDED)
        return found

    # ---------------------------------------------------------------- calls

    def _call(self, node: ast.Call) -> None:
        callee = self._callee(node.func)
        if callee is None:
            return
        accepts = signatures.accepts(callee.home, callee.attributes)
        for keyword in node.keywords:
            if keyword.arg is not None:
                self._argument(callee.shown, accepts, keyword, node.keywords)

    def _callee(self, func: ast.expr) -> Provided | None:
        """The provided object a call calls; ``Operator.partial(...).expand(...)`` and
        ``.expand_kwargs`` call the operator, whose arguments they are."""
        if isinstance(func, ast.Attribute) and func.attr in ("expand", "expand_kwargs"):
            inner = func.value
            if _is_partial(inner):
                assert isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                found = self._resolve(inner.func.value)
                return found if isinstance(found, Provided) else None
        if isinstance(func, ast.Attribute) and func.attr == "partial":
            func = func.value
        found = self._resolve(func)
        return found if isinstance(found, Provided) else None

    def _argument(
        self,
        shown: str,
        accepts: signatures.Accepts,
        keyword: ast.keyword,
        siblings: list[ast.keyword],
    ) -> None:
        name, value, line = keyword.arg or "", keyword.value, keyword.lineno
        written = f"{shown}({name}=...)"
        if accepts.refuses(name):
            self._unsupported(written, line, f"not an argument of {shown}")
        elif name in accepts.ignored and not _off(value):
            self.report.warnings.append(Finding(written, line, IGNORED))
        if accepts.dag and name in _SCHEDULES:
            self._schedule(shown, name, value)
        if name == "default_args":
            self._default_args(self._dict(value))
        if accepts.task and name == "email" and not _off(value):
            flags = {k.arg: k.value for k in siblings if k.arg and k.arg in _EMAIL_FLAGS}
            self._email(written, line, flags)

    def _schedule(self, shown: str, name: str, value: ast.expr) -> None:
        line = value.lineno
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            if value.value.strip() in UNSUPPORTED_PRESETS:
                written = f"{shown}({name}={value.value!r})"
                self._unsupported(written, line, f"schedule {value.value.strip()} {NOT_PROVIDED}")
        elif isinstance(value, ast.Call) and _last_name(value.func) == "relativedelta":
            self._unsupported(
                f"{shown}({name}=relativedelta(...))",
                line,
                f"a relativedelta schedule is {NOT_PROVIDED} (use a cron expression)",
            )

    def _dict(self, value: ast.expr) -> ast.Dict | None:
        if isinstance(value, ast.Name):
            return self.dicts.get(value.id)
        return value if isinstance(value, ast.Dict) else None

    def _default_args(self, found: ast.Dict | None) -> None:
        """Keys of ``default_args`` dagrun ignores; unknown keys are dropped, as Airflow
        drops them."""
        if found is None:
            return
        items = dict(_string_items(found))
        for key, (key_node, value) in items.items():
            written = f"default_args[{key!r}]"
            if key in arguments.IGNORED and not _off(value):
                self.report.warnings.append(Finding(written, key_node.lineno, IGNORED))
            if key == "email" and not _off(value):
                flags = {k: v for k, (_, v) in items.items() if k in _EMAIL_FLAGS}
                self._email(written, key_node.lineno, flags)

    def _email(self, written: str, line: int, flags: dict[str, ast.expr]) -> None:
        """An ``email`` mails nothing without an SMTP server, unless its flags are off."""
        if self.mail_server or all(_off(flags.get(f)) for f in _EMAIL_FLAGS):
            return
        self.report.warnings.append(Finding(written, line, NO_SERVER_REASON))

    def _unsupported(self, name: str, line: int, reason: str) -> None:
        self.report.unsupported.append(Finding(name, line, reason))


def _bound_otherwise(node: ast.AST) -> Iterator[str]:
    """The names a node binds other than by an Airflow import: assignments, parameters,
    definitions and other imports (the file's own ``task`` then is not Airflow's)."""
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        yield node.id
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.Import):
        yield from (
            (a.asname or a.name).split(".")[0] for a in node.names if not _is_airflow(a.name)
        )
    elif isinstance(node, ast.ImportFrom) and (node.level or not _is_airflow(node.module or "")):
        yield from (a.asname or a.name for a in node.names)


def _is_partial(node: ast.expr) -> bool:
    """Whether ``node`` is a call of ``something.partial(...)``."""
    func = node.func if isinstance(node, ast.Call) else None
    return isinstance(func, ast.Attribute) and func.attr == "partial"


def _is_airflow(path: str) -> bool:
    return path == ROOT or path.startswith(ROOT + ".")


def _served(path: str) -> bool:
    """Whether dagrun serves the module ``path`` (or a module below it)."""
    return path == ROOT or path in airflow_names.PATHS or airflow_names.is_package(path)


def _off(value: ast.expr | None) -> bool:
    """Whether a value is literally ``None`` or ``False`` (what dagrun's warnings skip); an
    absent one is not (an absent email flag is on, Airflow's default)."""
    return isinstance(value, ast.Constant) and value.value in (None, False)


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _string_items(found: ast.Dict) -> Iterator[tuple[str, tuple[ast.expr, ast.expr]]]:
    for key, value in zip(found.keys, found.values, strict=True):
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            yield key.value, (key, value)
