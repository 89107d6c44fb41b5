"""Airflow's ``email``, ``email_on_failure`` and ``email_on_retry`` over dagrun's notifier
``notify.email``.

Airflow mails a task's ``email`` addresses (a list, or a string of them separated by commas
or semicolons) when the task fails for good (``email_on_failure``, default True) and when a
try fails and it will be tried again (``email_on_retry``, default True), through the SMTP
server of its configuration. dagrun adds ``notify.email(email)`` to the task's failure and
retry callbacks, beside the task's own, when an SMTP server is configured where the file is
parsed (``DAGRUN_SMTP_HOST``: see ``dagrun.runtime.smtp``); without one the file gets a
warning instead, since no mail would be sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagrun.authoring.dag import DAG
from dagrun.authoring.options import callables
from dagrun.errors import DagDefinitionError, NotifyError
from dagrun.runtime import notify, smtp

NO_SERVER_REASON = f"no mail is sent without an SMTP server ({smtp.HOST})"
NO_SERVER = f"email: {NO_SERVER_REASON}"

#: Each flag of Airflow's and the callback option it mails from.
_FLAGS = {"email_on_failure": "on_failure_callback", "email_on_retry": "on_retry_callback"}


def server_configured() -> bool:
    """Whether mail can be sent from here: an SMTP server is configured (a bad setting is
    a ``NotifyError`` naming it)."""
    return smtp.smtp_settings().host is not None


def add_email_callbacks(
    native: dict[str, Any], kept: Mapping[str, Any], dag: DAG, task_id: str
) -> None:
    """Add the mail of a task's ``email`` to the callbacks its flags ask for (``native``:
    the task's native options; ``kept``: its Airflow arguments), or warn its file."""
    options = [option for flag, option in _FLAGS.items() if kept.get(flag, True)]
    if not kept.get("email") or not options:
        return
    try:
        notifier = notify.email(kept["email"]) if server_configured() else None
    except NotifyError as exc:
        raise DagDefinitionError(f"email: {exc}", dag_id=dag.dag_id, task_id=task_id) from None
    if notifier is None:
        dag.warn(NO_SERVER)
        return
    for option in options:
        native[option] = [*callables(native.get(option), option, dag.dag_id, task_id), notifier]
