"""``import airflow...`` in a DAG file resolves to dagrun's compatibility package.

A meta path finder serves ``airflow`` and every module below it from the table of
``dagrun.parsing.airflow_names``: each module is made on import, empty, and its names are
looked up on first use, importing the ``dagrun.airflow`` module that defines them (so a file
that only needs ``DAG`` and ``BashOperator`` loads nothing else). A name dagrun does not
provide is an ``ImportError`` naming the path and the name, which fails that file's import
alone (``dags errors`` shows it).

The finder is installed only in the processes that import DAG files (parse children, worker
children, ``dagrun test``), by ``dagrun.parsing.loader.import_file``, and never where the real
Airflow is importable: dagrun then leaves ``airflow`` to it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from dagrun.parsing import airflow_names

if TYPE_CHECKING:
    from importlib.abc import Loader

ROOT = "airflow"


class NotProvided(ImportError):
    """An Airflow name or module dagrun does not provide; carries both."""

    def __init__(self, path: str, name: str):
        super().__init__(f"{path}: {name} is not provided by dagrun", name=path)
        self.path = path
        self.missing = name


class AirflowModule(ModuleType):
    """One of Airflow's modules as dagrun serves it: its names resolve on first use."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            if name == "__version__" and self.__name__ == ROOT:
                return airflow_names.VERSION
            raise AttributeError(name)
        home = airflow_names.provided(self.__name__, name)
        if home is not None:
            module, attribute = home.split(":")
            value = getattr(importlib.import_module(module), attribute)
        elif airflow_names.is_package(f"{self.__name__}.{name}") or (
            f"{self.__name__}.{name}" in airflow_names.PATHS
        ):
            value = importlib.import_module(f"{self.__name__}.{name}")
        else:
            raise NotProvided(self.__name__, name)
        setattr(self, name, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *airflow_names.PATHS.get(self.__name__, ())})


class AirflowAlias:
    """Finds every module under ``airflow``: the paths of the table as they are, any other
    as an empty module whose every name is ``NotProvided`` (so the error names the name a
    file wanted, not only its module). A meta path finder and loader by its methods, as the
    import system asks them: ``importlib.abc``'s bases would import ``importlib.resources``
    and the archive modules behind it into every process that imports a DAG file."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != ROOT and not fullname.startswith(ROOT + "."):
            return None
        # A loader by its methods (typeshed's protocol names the old ``load_module`` too).
        return importlib.util.spec_from_loader(fullname, cast("Loader", self), is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = AirflowModule(spec.name)
        module.__path__ = []
        module.__all__ = list(airflow_names.PATHS.get(spec.name, ()))  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the names resolve on first use."""


_ALIAS = AirflowAlias()


def install() -> bool:
    """Serve ``airflow`` from dagrun in this process, unless the real Airflow is importable
    here; returns whether dagrun serves it. Idempotent and cheap after the first call."""
    if _ALIAS in sys.meta_path:
        return True
    if real_airflow_installed():
        return False
    sys.meta_path.append(_ALIAS)
    return True


@functools.cache
def real_airflow_installed() -> bool:
    """Whether an ``airflow`` package other than dagrun's is on the path (looked up once:
    installing Airflow while a worker runs is not a case to serve). A folder named
    ``airflow`` without an ``__init__.py`` (a namespace package: a subfolder of a dags
    folder, say) is not Airflow."""
    found = importlib.machinery.PathFinder.find_spec(ROOT)
    return found is not None and found.origin is not None
