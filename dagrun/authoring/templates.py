"""Jinja2 templates in task fields: the one environment that renders them at run time and
checks them when the DAG file is parsed, so both read a template the same way.

Jinja2 is imported on the first string that is a template: most tasks have none, and a
parse should not pay the ~15 ms its import costs for a file without any.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator
from typing import Any

from dagrun.authoring.context_names import CONTEXT_NAMES


def is_template(value: str) -> bool:
    return "{{" in value or "{%" in value


@functools.cache
def environment() -> Any:
    """StrictUndefined: a name missing at run time fails the attempt rather than rendering
    as an empty string into a command."""
    from jinja2 import Environment, StrictUndefined

    return Environment(undefined=StrictUndefined, keep_trailing_newline=True)


def sources(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """The templates in ``value`` with where each sits (``env['OUT']``), through lists,
    tuples and dict values as ``dagrun.runtime.rendering.render`` walks them."""
    if isinstance(value, str):
        if is_template(value):
            yield where, value
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from sources(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from sources(item, f"{where}[{key!r}]")


def problem(source: str, known: Collection[str], env: Any = None) -> str | None:
    """Why ``source`` cannot render with only the ``known`` names (in ``env``, dagrun's own
    environment by default), in one line: a syntax error,
    or the first top-level name it uses that is unknown (what ``params.x`` or ``conf.get('a')``
    finds under a name depends on the run, so only the name is checked). None if it can."""
    from jinja2 import TemplateSyntaxError, meta

    try:
        parsed = (env or environment()).parse(source)
    except TemplateSyntaxError as exc:
        return f"has a syntax error: {exc.message} (line {exc.lineno})"
    unknown = sorted(meta.find_undeclared_variables(parsed) - set(known))
    if unknown:
        shown = ", ".join(name for name in known if name in CONTEXT_NAMES)
        return f"uses {unknown[0]!r}, which is not a context name ({shown}, or one of Airflow's)"
    return None


@functools.lru_cache(maxsize=4096)
def names_used(source: str, env: Any = None) -> frozenset[str]:
    """The context names a template reads (its undeclared variables) in ``env`` (dagrun's
    own by default): rendering computes only these. A template that does not parse reads
    none; rendering reports its error."""
    from jinja2 import TemplateSyntaxError, meta

    try:
        return frozenset(meta.find_undeclared_variables((env or environment()).parse(source)))
    except TemplateSyntaxError:
        return frozenset()
