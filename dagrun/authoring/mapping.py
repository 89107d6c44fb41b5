"""Dynamic task mapping: what a task may be mapped over, and which element an index runs.

A mapped task (``f.expand(x=[...])``, ``f.partial(y=1).expand(x=upstream())``) has one task
instance per element, ``map_index`` 0..n-1. Mapped over several lists it has one per
combination, in ``itertools.product`` order (the first list outermost). The lists are JSON
(a literal in the DAG file, or an upstream task's return value) of at most
``DAGRUN_MAX_MAP_LENGTH`` elements. The store expands a task when it becomes ready, and the
runner hands each instance its elements; both count the same way, here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from dagrun import settings

#: The longest list a task may be mapped over.
MAX_MAP_LENGTH: int = settings.get("core.max_map_length")


def problem(value: Any) -> str | None:
    """Why ``value`` cannot be mapped over, in words that follow its name; None when it can."""
    if not isinstance(value, list | tuple):
        return f"must be a list to map over, not {type(value).__name__}"
    if len(value) > MAX_MAP_LENGTH:
        return (
            f"has {len(value)} elements to map over, more than DAGRUN_MAX_MAP_LENGTH "
            f"({MAX_MAP_LENGTH})"
        )
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        return f"must be a JSON list to map over ({exc})"
    return None


def kwargs_problem(value: Sequence[Any]) -> str | None:
    """Why a list ``expand_kwargs`` maps over cannot be: each element a dict of arguments."""
    for i, element in enumerate(value):
        if not isinstance(element, dict) or not all(isinstance(k, str) for k in element):
            return f"must hold dicts of arguments, not {element!r} (at {i})"
    return None


def length(lengths: Sequence[int]) -> int:
    """How many instances lists of these lengths make (their product; 0 if one is empty)."""
    return math.prod(lengths)


def elements(lists: Sequence[Sequence[Any]], index: int) -> list[Any]:
    """The elements instance ``index`` runs with, one from each list (the last list varies
    fastest, as in ``itertools.product``)."""
    picked = []
    for values in reversed(lists):
        index, position = divmod(index, len(values))
        picked.append(values[position])
    return picked[::-1]
