"""Airflow's ``BashOperator``: dagrun's ``BashTask`` under Airflow's arguments and meaning.

``bash_command`` is a template, or a file when it ends in ``.sh`` or ``.bash`` (read from
the DAG file's folder or ``template_searchpath`` when the file is parsed, then rendered);
``env`` replaces the worker's environment unless ``append_env=True``; an exit code in
``skip_on_exit_code`` (99 by default) skips the task; the last line the command writes is
its return value (``do_xcom_push=True``). Airflow's ``AIRFLOW_CTX_*`` variables are set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dagrun.airflow import templating
from dagrun.airflow.operators import (
    AirflowTask,
    BaseOperator,
    BaseOperatorMeta,
    airflow_options,
    in_group,
)
from dagrun.authoring.dag import DAG
from dagrun.authoring.groups import TaskGroup
from dagrun.authoring.tasks import BashPartial, BashTask
from dagrun.errors import DagDefinitionError

_EXTENSIONS = (".sh", ".bash")


class BashOperator(AirflowTask, BashTask, metaclass=BaseOperatorMeta):
    """Runs ``bash_command`` in a shell of its own (Airflow's ``BashOperator``)."""

    template_fields: Sequence[str] = ("bash_command", "env", "cwd")
    template_ext: Sequence[str] = _EXTENSIONS
    ui_color = "#f0ede4"

    def __init__(
        self,
        task_id: str | None = None,
        *,
        bash_command: str | None = None,
        env: Mapping[str, str] | None = None,
        append_env: bool = False,
        output_encoding: str = "utf-8",
        skip_on_exit_code: int | Iterable[int] | None = 99,
        cwd: str | None = None,
        dag: DAG | None = None,
        task_group: TaskGroup | None = None,
        mapped: dict[str, Any] | None = None,
        **arguments: Any,
    ):
        made = airflow_options("BashOperator", task_id, dag, arguments)
        if isinstance(bash_command, str) and bash_command.endswith(_EXTENSIONS):
            bash_command = templating.read_template_file(bash_command, made.dag)
        with in_group(made.dag, task_group):
            super().__init__(
                made.task_id,
                command=bash_command,
                env=dict(env or {}),
                cwd=cwd,
                dag=made.dag,
                mapped=mapped,
                skip_on_exit_code=skip_on_exit_code,
                append_env=append_env or env is None,
                output_encoding=output_encoding,
                return_last_line=made.attributes["do_xcom_push"],
                **made.natives,
            )
        self.keep(made.attributes)

    @property
    def bash_command(self) -> str:
        return self.command

    @bash_command.setter
    def bash_command(self, value: str) -> None:
        self.command = value

    def finish(self) -> None:
        """Nothing left once ``__init__`` is done (its fields were checked then)."""

    @classmethod
    def partial(cls, task_id: str, **kwargs: Any) -> BashOperatorPartial:
        return BashOperatorPartial(task_id, kwargs)


class BashOperatorPartial(BashPartial):
    """``BashOperator.partial(...)``: maps ``bash_command`` and ``env``."""

    MAPPABLE = ("bash_command", "env")

    def expand(self, **mapped: Any) -> BashTask:
        unknown = sorted(set(mapped) - set(self.MAPPABLE)) or ([] if mapped else ["(none)"])
        if unknown:
            raise DagDefinitionError(
                f"expand: BashOperator maps bash_command or env, not {unknown[0]!r}",
                task_id=self.task_id,
            )
        native = {"command" if k == "bash_command" else k: v for k, v in mapped.items()}
        return BashOperator(self.task_id, mapped=native, **self.kwargs)


BaseOperator.register(BashOperator)
