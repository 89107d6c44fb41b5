"""Assets: named data a task produces per date partition, and DAGs scheduled on them.

``outlets=[Asset("daily_summary")]`` on a task records an event for its run's partition key
(``ds``) each time it succeeds; ``DAG(schedule=[Asset("daily_summary"), ...])`` makes one run
per key once every listed asset has an event for it (the store side is
``dagrun.store.assets``). Only names cross into the spec: the scheduler never imports this
module's callers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagrun.errors import DagDefinitionError

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs from Python 3.13

#: An asset's name: a dataset name or a URI-like path (``s3://bucket/sales``).
ASSET_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,250}")


@dataclass(frozen=True)
class Asset:
    """A named piece of data, partitioned by date like ``dagrun.partition`` datasets: an
    asset named as a partition dataset gets that partition's content fingerprint."""

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not ASSET_NAME.fullmatch(self.name):
            raise DagDefinitionError(
                f"asset name {self.name!r} must be 1-250 characters of letters, digits "
                "and _ . : / -"
            )


def is_asset_schedule(schedule: object) -> TypeIs[list[Any] | tuple[Any, ...]]:
    """Whether a DAG's ``schedule`` is a list (of assets, else a definition error) rather
    than a time schedule."""
    return isinstance(schedule, list | tuple)


def names(values: Iterable[Any], option: str, **where: str | None) -> tuple[str, ...]:
    """The names of a list of assets (``outlets``, an asset schedule), in order, once each;
    anything else in the list is a definition error naming the option."""
    found: list[str] = []
    for value in values:
        if not isinstance(value, Asset):
            raise DagDefinitionError(f"{option} must be a list of Asset, not {value!r}", **where)
        if value.name not in found:
            found.append(value.name)
    return tuple(found)
