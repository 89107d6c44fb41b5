"""What a worker hands its children, and what it makes of what they hand back.

A claim, an attempt's or a callback event's, becomes a ``Job`` for a child (its request:
the same fields either way); a job's result becomes what the store records, an attempt's
``Outcome`` or a callback's ``CallbackEnd``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dagrun.parsing.spec import DagSpec
from dagrun.runtime.attempt_pool import Job
from dagrun.runtime.requests import AttemptRequest, AttemptResult, CallbackRequest
from dagrun.states import AttemptOutcome
from dagrun.store import attempts
from dagrun.store.attempts import Claim, Outcome
from dagrun.store.callbacks import CallbackClaim, CallbackEnd

if TYPE_CHECKING:
    from sqlalchemy import Connection


class Jobs:
    """Makes one worker's jobs: its children log under ``log_dir`` (None: where this
    process writes, for ``dagrun test``) and open ``db_url``; ``is_short`` says which
    attempts may wait behind others in a child's inbox."""

    def __init__(
        self,
        log_dir: str | None,
        db_url: str,
        callback_timeout: float,
        is_short: Callable[[str, str], bool],
    ) -> None:
        self.log_dir = log_dir
        self.db_url = db_url
        self.callback_timeout = callback_timeout
        self.is_short = is_short

    def for_attempt(self, conn: Connection, claim: Claim, spec: DagSpec) -> Job:
        task = spec.task_map[claim.task_id]
        inputs = attempts.upstream_values(conn, claim.run_pk, task.data_inputs)
        request = AttemptRequest(**self._request_fields(claim, spec), inputs=inputs)
        short = self.is_short(claim.dag_id, claim.task_id)
        return Job(request, task.execution_timeout, payload=claim, short=short)

    def for_callback(self, claim: CallbackClaim, spec: DagSpec) -> Job:
        request = CallbackRequest(
            **self._request_fields(claim, spec), id=claim.id, event=claim.event, error=claim.error
        )
        return Job(
            request,
            self.callback_timeout,
            payload=claim,
            timeout_name="DAGRUN_CALLBACK_TIMEOUT",
        )

    def _request_fields(self, claim: Claim | CallbackClaim, spec: DagSpec) -> dict:
        """What a child needs of a claim, an attempt's or a callback's: the same fields."""
        return {
            "dag_id": claim.dag_id,
            "task_id": claim.task_id,
            "fileloc": spec.fileloc,
            "timezone": spec.timezone,
            "run_id": claim.run_id,
            "logical_date": claim.logical_date,
            "data_interval_start": claim.data_interval_start,
            "data_interval_end": claim.data_interval_end,
            "try_number": claim.try_number,
            "fence_token": claim.fence_token,
            "ti_id": claim.ti_id,
            "run_pk": claim.run_pk,
            "map_index": claim.map_index,
            "conf": claim.conf,
            "log_dir": self.log_dir,
            "db_url": self.db_url,
        }


def lease_of(job: Job) -> tuple[int, int]:
    return job.payload.ti_id, job.payload.fence_token


def is_callback(job: Job) -> bool:
    return isinstance(job.payload, CallbackClaim)


def delivery_of(job: Job, result: AttemptResult) -> CallbackEnd:
    """How a callback job ended, for the outbox."""
    sent = result.outcome == AttemptOutcome.SUCCESS
    return CallbackEnd(job.payload.id, sent, None if sent else result.error, result.log)


def outcome_of(job: Job, result: AttemptResult) -> Outcome:
    return Outcome.of(
        job.payload,
        result.outcome,
        error=result.error,
        return_value=result.return_value,
        duration=result.duration,
        log=result.log,
        xcoms=result.xcoms,
    )
