"""Every setting of dagrun, where its value comes from, and the one place that reads them.

A setting's value comes from, highest first: a command-line flag (``override``), its
environment variable (``DAGRUN_<NAME>``), the config file, its default. The config file is
``dagrun.toml`` in the current directory or its nearest parent that has one, else
``$DAGRUN_HOME/dagrun.toml``, or the file ``--config`` / ``DAGRUN_CONFIG`` names; TOML, one
table per area (``[core]``, ``[database]``, ``[scheduler]``, ``[worker]``, ``[web]``,
``[smtp]``, ``[logging]``). An unknown key or a bad value is a ``ConfigError`` naming the
file, the line and the key. ``SETTINGS`` is also the source of ``dagrun config list``, of
``dagrun init``'s starter file and of the documentation's configuration page, so none of
them can drift from what the code reads.

This module is a shared leaf: it imports no stage, and it is cheap (``tomllib``, only
when a file exists), so the parse children and ``--help`` can ask it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagrun.errors import UsageError

CONFIG_ENV = "DAGRUN_CONFIG"
FILE_NAME = "dagrun.toml"


class ConfigError(UsageError):
    """A config file, or a setting's value, that dagrun cannot use: names where it is."""

    def __init__(self, where: str, key: str, reason: str):
        super().__init__(f"{where}: {key}: {reason}")
        self.where = where
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class Setting:
    """One setting: its table and key, its environment variable, its type and default."""

    section: str
    key: str
    kind: type
    default: Any
    help: str
    env: str = ""
    secret: bool = False
    choices: tuple[str, ...] = ()
    #: The smallest value a number may take.
    least: float = 0

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def variable(self) -> str:
        return self.env or f"DAGRUN_{self.key.upper()}"

    def convert(self, value: Any) -> Any:
        """The value as its type: text from an environment variable is converted; a TOML
        value must already have the type (an integer is taken where a number is asked)."""
        if isinstance(value, str) and self.kind is not str:
            value = _from_text(self.kind, value)
        elif self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.kind) or (self.kind is int and isinstance(value, bool)):
            raise ValueError(f"must be {_KIND_NAMES[self.kind]}, not {value!r}")
        if self.choices and str(value).lower() not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}, not {value!r}")
        if isinstance(value, int | float) and not isinstance(value, bool) and value < self.least:
            floor = "negative" if self.least == 0 else f"below {self.least:g}"
            raise ValueError(f"must not be {floor}, not {value!r}")
        return str(value).lower() if self.choices else value


_KIND_NAMES = {str: "text", int: "a whole number", float: "a number", bool: "true or false"}


def _from_text(kind: type, text: str) -> Any:
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"must be true or false, not {text!r}")
    try:
        return kind(text.strip())
    except ValueError:
        raise ValueError(f"must be {_KIND_NAMES[kind]}, not {text!r}") from None


def _s(section: str, key: str, kind: type, default: Any, help: str, **more: Any) -> Setting:
    return Setting(section, key, kind, default, help, **more)


SETTINGS: tuple[Setting, ...] = (
    _s(
        "core",
        "dags_folder",
        str,
        "dags",
        "Folder of the DAG files (a store keeps the first "
        "one synced into it: `dagrun db rebind-folder` moves it).",
        env="DAGRUN_DAGS_FOLDER",
    ),
    _s(
        "core",
        "db_url",
        str,
        "",
        "SQLAlchemy URL of the metadata database; empty: SQLite under home.",
        env="DAGRUN_DB_URL",
        secret=True,
    ),
    _s(
        "core",
        "home",
        str,
        ".dagrun",
        "Folder of the embedded store, logs and Python environments.",
        env="DAGRUN_HOME",
    ),
    _s("core", "data", str, "data", "Root of the partitions tasks write.", env="DAGRUN_DATA"),
    _s("core", "parse_timeout", float, 30.0, "Seconds a DAG file may take to import."),
    _s("core", "parse_memory_mb", int, 1024, "Memory a DAG file's import may use (MiB)."),
    _s("core", "max_map_length", int, 1024, "Most elements a mapped task expands to."),
    _s("core", "max_xcom_bytes", int, 1_000_000, "Largest value a task may return (bytes)."),
    _s(
        "core",
        "venv_installer",
        str,
        "auto",
        "What installs a task's virtualenv.",
        choices=("auto", "uv", "pip"),
    ),
    _s(
        "database",
        "outage_seconds",
        float,
        300.0,
        "Seconds a long-running process waits for the database to come back before it gives up.",
        env="DAGRUN_DB_OUTAGE_SECONDS",
    ),
    _s(
        "database",
        "sqlite_busy_seconds",
        float,
        60.0,
        "Seconds a SQLite writer waits for the lock.",
    ),
    _s(
        "database",
        "sqlite_synchronous",
        str,
        "normal",
        "SQLite's synchronous pragma.",
        choices=("off", "normal", "full", "extra"),
    ),
    _s(
        "database",
        "pg_idle_in_transaction_ms",
        int,
        10_000,
        "PostgreSQL's idle_in_transaction_session_timeout for dagrun's sessions.",
    ),
    _s(
        "worker",
        "lease_seconds",
        float,
        30.0,
        "Seconds a running attempt's lease lasts "
        "between heartbeats; past it another worker takes the task over.",
    ),
    _s("worker", "callback_timeout", float, 30.0, "Seconds a callback or notifier may run."),
    _s("web", "url", str, "", "The web page's address, for links in alerts.", env="DAGRUN_WEB_URL"),
    _s(
        "web",
        "idle_seconds",
        int,
        30,
        "Seconds a connection to the web page may stay open without traffic.",
        env="DAGRUN_WEB_IDLE_SECONDS",
        least=1,
    ),
    _s(
        "web",
        "trusted_proxy",
        bool,
        False,
        "`dagrun web` is behind a proxy whose X-Forwarded-For and X-Forwarded-Proto it "
        "believes (the client's address; Secure cookies over HTTPS).",
        env="DAGRUN_WEB_TRUSTED_PROXY",
    ),
    _s(
        "smtp",
        "host",
        str,
        "",
        "Mail server for email alerts (empty: no mail).",
        env="DAGRUN_SMTP_HOST",
    ),
    _s("smtp", "port", int, 25, "Mail server port.", env="DAGRUN_SMTP_PORT"),
    _s("smtp", "user", str, "", "User to log in as (empty: no login).", env="DAGRUN_SMTP_USER"),
    _s(
        "smtp",
        "password",
        str,
        "",
        "Password to log in with.",
        env="DAGRUN_SMTP_PASSWORD",
        secret=True,
    ),
    _s(
        "smtp",
        "starttls",
        bool,
        True,
        "Upgrade the connection to TLS first.",
        env="DAGRUN_SMTP_STARTTLS",
    ),
    _s("smtp", "from", str, "", "Sender address (empty: dagrun@HOST).", env="DAGRUN_SMTP_FROM"),
    _s(
        "logging",
        "level",
        str,
        "info",
        "Level of dagrun's own log lines.",
        env="DAGRUN_LOG_LEVEL",
        choices=("debug", "info", "warning", "error"),
    ),
    _s(
        "logging",
        "format",
        str,
        "text",
        "text, or json: one object per line.",
        env="DAGRUN_LOG_FORMAT",
        choices=("text", "json"),
    ),
    _s(
        "logging",
        "loggers",
        str,
        "",
        "Levels of single loggers: dagrun.worker=debug,dagrun.web=warning.",
        env="DAGRUN_LOG_LOGGERS",
    ),
)

BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class Value:
    """A setting's value and where it came from (``default``, ``file PATH:LINE``,
    ``env NAME``, ``flag``)."""

    setting: Setting
    value: Any
    source: str

    def shown(self) -> str:
        """The value as ``config list`` prints it: a secret masked, a URL's password too."""
        text = "" if self.value is None else str(self.value)
        if not self.setting.secret or not text:
            return text
        if "://" in text:
            return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", text)
        return "***"


class Config:
    """The settings as one process sees them: a file (if any) read once, the environment
    read at each ``get`` (tests and callers may change it), and flags set by the CLI."""

    def __init__(self, path: Path | None, table: dict[str, Any], lines: dict[str, int]):
        self.path = path
        self._lines = lines
        self._file = self._check(table)
        self._flags: dict[str, Any] = {}

    def _check(self, table: dict[str, Any]) -> dict[str, Any]:
        found = {}
        for section, keys in table.items():
            if not isinstance(keys, dict):
                raise ConfigError(self._where(section), section, "must be a table ([section])")
            for key, raw in keys.items():
                name = f"{section}.{key}"
                setting = BY_NAME.get(name)
                if setting is None:
                    raise ConfigError(self._where(name), name, f"unknown setting{near(name)}")
                try:
                    found[name] = setting.convert(raw)
                except ValueError as exc:
                    raise ConfigError(self._where(name), name, str(exc)) from None
        return found

    def _where(self, name: str) -> str:
        line = self._lines.get(name)
        return f"{self.path}:{line}" if line else str(self.path)

    def override(self, name: str, value: Any) -> None:
        """A command-line flag's value, above everything else."""
        self._flags[name] = value

    def lookup(self, name: str, environ: Mapping[str, str] | None = None) -> Value:
        """The value and its source; ``environ`` stands for this process's environment
        (a callback's own)."""
        setting = BY_NAME[name]
        if name in self._flags:
            return Value(setting, self._flags[name], "flag")
        text = (os.environ if environ is None else environ).get(setting.variable)
        if text is not None and text != "":
            try:
                return Value(setting, setting.convert(text), f"env {setting.variable}")
            except ValueError as exc:
                raise ConfigError(f"env {setting.variable}", name, str(exc)) from None
        if name in self._file:
            return Value(setting, self._file[name], f"file {self._where(name)}")
        return Value(setting, setting.default, "default")

    def get(self, name: str, environ: Mapping[str, str] | None = None) -> Any:
        return self.lookup(name, environ).value

    def all(self) -> list[Value]:
        return [self.lookup(s.name) for s in SETTINGS]


def closest(word: str, known: Iterable[str] = BY_NAME) -> str | None:
    """The nearest of ``known`` (settings' names by default) to a mistyped ``word``: how a
    setting or a command typed wrong is answered."""
    import difflib

    found = difflib.get_close_matches(word, list(known), n=1)
    return found[0] if found else None


def near(name: str) -> str:
    """`` (did you mean SECTION.KEY?)`` for a mistyped setting, or nothing."""
    found = closest(name)
    return f" (did you mean {found}?)" if found else ""


def find_file(start: Path | None = None) -> Path | None:
    """The config file this process reads: named by ``DAGRUN_CONFIG``, else ``dagrun.toml``
    in the current directory or its nearest parent, else under ``DAGRUN_HOME``."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named).expanduser().absolute()
        if not path.is_file():
            raise ConfigError(f"env {CONFIG_ENV}", str(path), "no such file")
        return path
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        if (folder / FILE_NAME).is_file():
            return folder / FILE_NAME
    home = Path(os.environ.get("DAGRUN_HOME") or ".dagrun").absolute() / FILE_NAME
    return home if home.is_file() else None


def read_file(path: Path) -> Config:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "file", f"cannot be read: {exc}") from None
    import tomllib  # only where a settings file is read

    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        where = f"{path}:{line.group(1)}" if line else str(path)
        raise ConfigError(where, "file", f"not valid TOML: {exc}") from None
    return Config(path, table, _key_lines(text))


def _key_lines(text: str) -> dict[str, int]:
    """The line of each ``section.key`` (and of each ``[section]``) in a TOML file, for
    errors that name where to look."""
    lines: dict[str, int] = {}
    section = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"\s*\[([^\]]+)\]", line)
        if header:
            section = header.group(1).strip()
            lines.setdefault(section, number)
            continue
        key = re.match(r"\s*([A-Za-z0-9_\-\"']+)\s*=", line)
        if key and section:
            lines.setdefault(f"{section}.{key.group(1).strip(chr(34) + chr(39))}", number)
    return lines


_loaded: Config | None = None


def config() -> Config:
    """This process's settings, the file read on first use."""
    global _loaded
    if _loaded is None:
        path = find_file()
        _loaded = read_file(path) if path else Config(None, {}, {})
    return _loaded


def reload() -> Config:
    """Read the config file again (after ``--config`` names one, or in tests)."""
    global _loaded
    _loaded = None
    return config()


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """A setting's value: ``settings.get("worker.lease_seconds")``."""
    return config().get(name, environ)


def starter_file() -> str:
    """A commented ``dagrun.toml`` listing every setting at its default, for ``dagrun init``."""
    out = [
        "# dagrun's settings. A line left commented keeps the default; an environment",
        "# variable (named beside each) or a command-line flag overrides the file.",
    ]
    section = ""
    for s in SETTINGS:
        if s.section != section:
            section = s.section
            out += ["", f"[{section}]"]
        out.append(f"# {s.help} (env {s.variable})")
        out.append(f"# {s.key} = {_toml(s.default)}")
    return "\n".join(out) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)
