"""Airflow's assets (``airflow.sdk.Asset``, ``airflow.datasets.Dataset``) and their
conditions over dagrun's own (``dagrun.authoring.assets``).

An Airflow asset is known by its URI (its name when no URI is given, as in Airflow), and
a list of them as a schedule means Airflow's "all of them, any partition"
(``keyed = False``): the DAG runs when every listed asset has a new event since its last
asset-triggered run, whatever the events' partition keys. ``&``, ``|``, ``AssetAll``,
``AssetAny`` and ``AssetOrTimeSchedule`` are the native ones, which mean the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from dagrun.authoring.assets import Asset as NativeAsset
from dagrun.authoring.assets import AssetAll, AssetAny, AssetCondition, AssetOrTimeSchedule
from dagrun.errors import DagDefinitionError

__all__ = [
    "Asset",
    "AssetAll",
    "AssetAny",
    "AssetOrTimeSchedule",
    "Dataset",
    "DatasetAll",
    "DatasetAny",
    "DatasetOrTimeSchedule",
]

#: The longest URI the store keeps (Airflow allows 1500 characters).
_LONGEST = 250


@dataclass(frozen=True, init=False)
class Asset(NativeAsset):
    """Airflow's ``Asset(name, uri, *, group, extra)``: either of name and uri may stand
    for both; ``extra`` is a JSON object (``{}`` when not given)."""

    uri: str = ""
    group: str = ""

    keyed: ClassVar[bool] = False
    default_group: ClassVar[str] = "asset"

    def __init__(
        self,
        name: str | None = None,
        uri: str | None = None,
        *,
        group: str | None = None,
        extra: dict[str, Any] | None = None,
    ):
        if name is None and uri is None:
            raise DagDefinitionError(f"{type(self).__name__}() needs a name or a uri")
        object.__setattr__(self, "name", name if name is not None else uri)
        object.__setattr__(self, "uri", uri if uri is not None else name)
        object.__setattr__(self, "group", self.default_group if group is None else group)
        object.__setattr__(self, "extra", {} if extra is None else extra)
        self.__post_init__()

    def _check_key(self) -> None:
        """Airflow's rule for names and URIs (ASCII, not blank), within the store's length."""
        for what, value in (("name", self.name), ("uri", self.uri)):
            if (
                not isinstance(value, str)
                or not value.strip()
                or not value.isascii()
                or len(value) > _LONGEST
            ):
                raise DagDefinitionError(
                    f"{type(self).__name__} {what} {value!r} must be 1-{_LONGEST} ASCII "
                    "characters, not only spaces"
                )
        if self.uri.lower().startswith("airflow://"):
            raise DagDefinitionError(f"asset uri {self.uri!r}: the scheme 'airflow' is reserved")

    @property
    def key(self) -> str:
        """Assets are told apart by URI, as Airflow's events and schedules do."""
        return self.uri

    def __fspath__(self) -> str:
        return self.uri


class Dataset(Asset):
    """Airflow 2's name for an asset: ``Dataset(uri, extra=None)``."""

    default_group: ClassVar[str] = "dataset"


#: Airflow 2's names for the conditions.
DatasetAll = AssetAll
DatasetAny = AssetAny


class DatasetOrTimeSchedule(AssetOrTimeSchedule):
    """Airflow 2's ``DatasetOrTimeSchedule(timetable=..., datasets=...)``."""

    def __init__(self, *, timetable: Any, datasets: AssetCondition | list[AssetCondition]):
        super().__init__(timetable=timetable, assets=datasets)
