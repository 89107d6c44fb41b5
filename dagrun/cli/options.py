"""Options that several commands take, each defined once."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from dagrun.authoring import params
from dagrun.errors import UsageError

#: The largest conf a run takes, in bytes of JSON. Each attempt of the run reads its conf,
#: and the store keeps it twice (the run, the trigger's audit entry), JSON-escaped (up to
#: three times the bytes of non-ASCII text): this keeps both under the 1 GB a SQLite or
#: PostgreSQL value can hold.
MAX_CONF_BYTES = 256 * 1024 * 1024


class ConfParam(click.ParamType):
    """A run's conf, a JSON object: given inline, read from ``@FILE``, or from stdin with
    ``-`` (a conf too big for a command line, or one a script writes)."""

    name = "JSON|@FILE|-"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        if value == "-":
            return params.parse_conf(_read_stdin(), "--conf - (stdin)")
        if value == "@":
            raise UsageError("--conf @: give a file after the @ (--conf @conf.json)")
        if value.startswith("@"):
            return params.parse_conf(_read_file(value[1:]), f"--conf {value}")
        return params.parse_conf(value)


def _read_file(path: str) -> bytes:
    where = f"--conf @{path}"
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_CONF_BYTES:
                raise UsageError(_too_big(where, f"is {size:,} bytes"))
            return handle.read()
    except OSError as exc:
        raise UsageError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None


def _read_stdin() -> bytes:
    text = sys.stdin.buffer.read(MAX_CONF_BYTES + 1)
    if len(text) > MAX_CONF_BYTES:
        raise UsageError(_too_big("--conf - (stdin)", f"gives over {MAX_CONF_BYTES:,} bytes"))
    return text


def _too_big(where: str, size: str) -> str:
    return (
        f"{where} {size}: a conf holds at most {MAX_CONF_BYTES // 2**20} MiB of JSON; pass "
        "big data through files or tables and put their names in the conf"
    )


#: ``--conf`` as ``trigger``, ``run``, ``test`` and ``tasks test`` take it.
conf_option = click.option(
    "--conf",
    "conf",
    type=ConfParam(),
    default="{}",
    help="The run's conf, a JSON object overriding the DAG's params: inline, @FILE to read "
    "it from a file, or - to read it from stdin.",
)
