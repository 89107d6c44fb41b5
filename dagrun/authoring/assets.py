"""Assets: named data tasks produce, and DAGs scheduled on them, in two meanings.

``outlets=[Asset("daily_summary")]`` on a task records an event for its run's partition key
(``ds``) each time it succeeds (the store side is ``dagrun.store.assets``). A DAG is
scheduled on assets in one of two ways:

- a list of assets, ``schedule=[Asset("a"), Asset("b")]``: one run per partition key once
  every listed asset has an event for it (DESIGN 6.1, dagrun's own meaning);
- a condition, ``schedule=Asset("a") & (Asset("b") | Asset("c"))`` (or ``AssetAll`` and
  ``AssetAny``): a run whenever the condition holds over the assets with a new event since
  the DAG's last asset-triggered run, whatever the events' partition keys (Airflow's
  meaning; the store side is ``dagrun.store.asset_triggers``). ``AssetOrTimeSchedule``
  adds runs from a time schedule beside them.

An asset class says which meaning a list of its assets has (``keyed``): Airflow's ``Asset``
(``dagrun.airflow.assets``) makes a list mean "all of them, any partition". Only names and
the condition as plain data (``to_data``) cross into the spec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from dagrun.errors import DagDefinitionError

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs from Python 3.13

    from dagrun.timing.timetable import TimeSchedule

#: An asset's name: a dataset name or a URI-like path (``s3://bucket/sales``).
ASSET_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,250}")

#: A condition as the spec keeps it (Airflow's own expression form): an asset's name, or
#: ``{"all": [...]}`` / ``{"any": [...]}`` of conditions.
ConditionData = str | dict[str, list[Any]]


class AssetCondition:
    """What ``&`` and ``|`` build over assets: a tree of ``AssetAll`` and ``AssetAny``."""

    def __and__(self, other: object) -> AssetAll:
        if not isinstance(other, AssetCondition):
            return NotImplemented
        return AssetAll(self, other)

    def __or__(self, other: object) -> AssetAny:
        if not isinstance(other, AssetCondition):
            return NotImplemented
        return AssetAny(self, other)

    def to_data(self) -> ConditionData:
        raise NotImplementedError


@dataclass(frozen=True)
class Asset(AssetCondition):
    """A named piece of data, partitioned by date like ``dagrun.partition`` datasets: an
    asset named as a partition dataset gets that partition's content fingerprint. ``extra``
    is a JSON object kept with the asset (it does not take part in its identity)."""

    name: str
    extra: dict[str, Any] | None = field(default=None, compare=False)

    #: Whether a list of these assets as a schedule means one run per partition key (6.1);
    #: False: Airflow's "all of them, any partition" (``AssetAll``).
    keyed: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._check_key()
        if self.extra is not None:
            _check_extra(self.extra, self.key)

    def _check_key(self) -> None:
        if not isinstance(self.name, str) or not ASSET_NAME.fullmatch(self.name):
            raise DagDefinitionError(
                f"asset name {self.name!r} must be 1-250 characters of letters, digits "
                "and _ . : / -"
            )

    @property
    def key(self) -> str:
        """What the store knows the asset by (its events, the DAGs scheduled on it)."""
        return self.name

    def to_data(self) -> ConditionData:
        return self.key


def _check_extra(extra: object, key: str) -> None:
    try:
        ok = isinstance(extra, dict) and json.loads(json.dumps(extra)) == extra
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise DagDefinitionError(f"asset {key!r}: extra must be a JSON object, not {extra!r}")


class _Combined(AssetCondition):
    """All or any of some conditions; nested ones of the same kind are flattened."""

    word: ClassVar[str]

    def __init__(self, *conditions: AssetCondition):
        flat: list[AssetCondition] = []
        for condition in conditions:
            if not isinstance(condition, AssetCondition):
                raise DagDefinitionError(
                    f"{type(self).__name__} takes assets and asset conditions, not {condition!r}"
                )
            if isinstance(condition, _Combined) and condition.word == self.word:
                flat.extend(condition.conditions)
            else:
                flat.append(condition)
        if not flat:
            raise DagDefinitionError(f"{type(self).__name__}() names no asset")
        self.conditions: tuple[AssetCondition, ...] = tuple(flat)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.conditions))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Combined) and (other.word, other.conditions) == (
            self.word,
            self.conditions,
        )

    def __hash__(self) -> int:
        return hash((self.word, self.conditions))

    def to_data(self) -> ConditionData:
        return {self.word: [c.to_data() for c in self.conditions]}


class AssetAll(_Combined):
    """Holds when every one of its conditions holds (``a & b``)."""

    word = "all"


class AssetAny(_Combined):
    """Holds when one of its conditions holds (``a | b``)."""

    word = "any"


class AssetOrTimeSchedule:
    """Runs from a time schedule (``timetable``: a cron string, a preset, a timedelta or a
    schedule object) and, beside them, asset-triggered runs whenever ``assets`` (a
    condition, or a list meaning all of them) holds, as Airflow's AssetOrTimeSchedule."""

    def __init__(
        self, *, timetable: TimeSchedule, assets: AssetCondition | Iterable[AssetCondition]
    ):
        if timetable is None or isinstance(timetable, AssetCondition | AssetOrTimeSchedule):
            raise DagDefinitionError(
                f"AssetOrTimeSchedule needs a time schedule as its timetable, not {timetable!r}"
            )
        self.timetable = timetable
        self.condition = assets if isinstance(assets, AssetCondition) else AssetAll(*assets)

    def __repr__(self) -> str:
        return f"AssetOrTimeSchedule(timetable={self.timetable!r}, assets={self.condition!r})"


def is_asset_schedule(schedule: object) -> TypeIs[list[Any] | tuple[Any, ...]]:
    """Whether a DAG's ``schedule`` is a list (of assets, else a definition error) rather
    than a time schedule."""
    return isinstance(schedule, list | tuple)


def split_schedule(schedule: Any, dag_id: str) -> tuple[Any, tuple[str, ...], ConditionData | None]:
    """A DAG's ``schedule`` as (its time schedule, the assets of a per-partition schedule,
    the asset condition of an Airflow-style one): at most one of the last two is set."""
    if isinstance(schedule, AssetOrTimeSchedule):
        return schedule.timetable, (), schedule.condition.to_data()
    if isinstance(schedule, AssetCondition):
        return None, (), schedule.to_data()
    if not is_asset_schedule(schedule):
        return schedule, (), None
    if not schedule:
        raise DagDefinitionError("schedule=[] lists no asset", dag_id=dag_id)
    if all(isinstance(item, Asset) and item.keyed for item in schedule):
        return None, names(schedule, "schedule", dag_id=dag_id), None
    if not all(isinstance(item, AssetCondition) for item in schedule):
        names(schedule, "schedule", dag_id=dag_id)  # names the item that is no asset
    return None, (), AssetAll(*schedule).to_data()


def names(values: Iterable[Any], option: str, **where: str | None) -> tuple[str, ...]:
    """The names of a list of assets (``outlets``, an asset schedule), in order, once each;
    anything else in the list is a definition error naming the option."""
    found: list[str] = []
    for value in values:
        if not isinstance(value, Asset):
            raise DagDefinitionError(f"{option} must be a list of Asset, not {value!r}", **where)
        if value.key not in found:
            found.append(value.key)
    return tuple(found)


# ---------------------------------------------------------------- conditions as plain data


def condition_assets(data: ConditionData) -> tuple[str, ...]:
    """The assets a stored condition names, in order, once each."""
    if isinstance(data, str):
        return (data,)
    found: dict[str, None] = {}
    for part in next(iter(data.values())):
        found.update(dict.fromkeys(condition_assets(part)))
    return tuple(found)


def condition_holds(data: ConditionData, present: set[str] | frozenset[str]) -> bool:
    """Whether a stored condition holds when the assets in ``present`` (and no others) have
    a new event (Airflow's ``evaluate`` over its statuses)."""
    if isinstance(data, str):
        return data in present
    [(word, parts)] = data.items()
    combine = all if word == "all" else any
    return combine(condition_holds(part, present) for part in parts)


def condition_text(data: ConditionData, top: bool = True) -> str:
    """A stored condition in words: ``a & (b | c)``."""
    if isinstance(data, str):
        return data
    [(word, parts)] = data.items()
    text = (" & " if word == "all" else " | ").join(condition_text(p, False) for p in parts)
    return text if top or len(parts) == 1 else f"({text})"
