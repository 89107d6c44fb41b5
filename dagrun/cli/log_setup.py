"""How the long-running commands log: the ``[logging]`` settings.

``level`` (``-v`` means debug), ``format`` (``text``, or ``json``: one object per line with
``time``, ``level``, ``logger``, ``message`` and the run and task fields a line carries),
and ``loggers``, levels of single loggers (``dagrun.worker=debug,dagrun.web=warning``).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from dagrun import settings
from dagrun.settings import ConfigError

#: What a log line may carry about the run and task it is about (``extra=``).
RUN_FIELDS = ("dag_id", "run_id", "task_id", "map_index", "try_number")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLines(logging.Formatter):
    """One JSON object per line, for a log collector."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({f: getattr(record, f) for f in RUN_FIELDS if hasattr(record, f)})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def setup_logging(verbose: bool) -> None:
    """Log to stderr as the settings say; ``verbose`` (``-v``) lowers the level to debug."""
    handler = logging.StreamHandler(sys.stderr)
    fmt = settings.get("logging.format")
    handler.setFormatter(JsonLines() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    level = logging.DEBUG if verbose else getattr(logging, settings.get("logging.level").upper())
    logging.basicConfig(level=level, handlers=[handler])
    for name, wanted in logger_levels(settings.get("logging.loggers")).items():
        logging.getLogger(name).setLevel(wanted)


def logger_levels(text: str) -> dict[str, int]:
    """``dagrun.worker=debug,dagrun.web=warning`` as logger -> level."""
    levels = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, level = part.partition("=")
        value = getattr(logging, level.strip().upper(), None)
        if not name.strip() or not isinstance(value, int):
            raise ConfigError(
                "logging.loggers", part, "must be LOGGER=LEVEL (debug, info, warning, error)"
            )
        levels[name.strip()] = value
    return levels
