"""The callback outbox (store.callbacks) on SQLite and PostgreSQL: events written by the
transaction that decided them, exactly once, only for what has a callback; claimed with a
lease, finished, released, and ended (never run again) when their worker is lost."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta

from sqlalchemy import select

from dagrun.parsing.spec import DagSpec
from dagrun.states import AttemptOutcome, CallbackEvent, CallbackState, RunType
from dagrun.store import Store, callbacks, operator_actions, run_reads, runs, sql, upkeep
from dagrun.store.logfiles import LogRange
from dagrun.store.schema import callback
from tests.store.test_store import (
    OWNER,
    claim,
    complete,
    days,
    make_spec,
    outcome,
    register,
    run_state,
    start,
)

TASK_EVENTS = ("task_success", "task_retry", "task_failure")


def heard(spec: DagSpec, tasks: dict[str, tuple[str, ...]], run: tuple[str, ...] = ()) -> DagSpec:
    """``spec`` with callbacks for these events (as the parser records them)."""
    changed = tuple(dataclasses.replace(t, callbacks=tasks.get(t.task_id, ())) for t in spec.tasks)
    return dataclasses.replace(spec, tasks=changed, callbacks=run)


def rows(store: Store) -> list:
    with store.read() as conn:
        return conn.execute(select(callback).order_by(callback.c.id)).all()


def events(store: Store) -> list[tuple[str, str | None, int | None]]:
    return [(r.event, r.task_id, r.try_number) for r in rows(store)]


def take(store: Store, owner: str = OWNER, limit: int = 10, hold: float = 60.0, **kw):
    with store.write() as conn:
        return callbacks.claim(conn, owner, limit, hold, store.now(conn), **kw)


def test_each_task_event_is_written_once_with_its_attempt(store: Store):
    spec = heard(make_spec(retries=1), {t: TASK_EVENTS for t in ("extract", "load")})
    [pk] = start(store, spec, 1, 1)
    [first], _ = claim(store)
    complete(store, spec, outcome(first, AttemptOutcome.FAILED, error="E1"))
    assert events(store) == [("task_retry", "extract", 1)]
    assert rows(store)[0].error == "E1" and rows(store)[0].fence_token == first.fence_token

    with store.write() as conn:
        upkeep.requeue_retries(conn, store.now(conn) + timedelta(hours=1))
    [second], _ = claim(store)
    complete(store, spec, outcome(second))
    [load], _ = claim(store)
    complete(store, spec, outcome(load, AttemptOutcome.NON_RETRYABLE, error="E2"))
    [_, success, failure] = rows(store)
    assert (success.event, success.try_number, success.error) == ("task_success", 2, None)
    assert (failure.event, failure.task_id, failure.error) == ("task_failure", "load", "E2")
    assert {r.state for r in rows(store)} == {CallbackState.PENDING.value}
    assert {r.run_pk for r in rows(store)} == {pk}


def test_tasks_and_dags_without_callbacks_write_nothing(store: Store):
    spec = heard(make_spec(), {"load": ("task_failure",)})
    start(store, spec, 1, 1)
    [first], _ = claim(store)
    done = complete(store, spec, outcome(first))
    assert done.callbacks == 0 and rows(store) == []


def test_a_stale_result_fires_nothing(store: Store):
    spec = heard(make_spec(), {"extract": TASK_EVENTS})
    start(store, spec, 1, 1)
    [first], _ = claim(store)
    late = complete(store, spec, outcome(first, fence=first.fence_token + 1))
    assert late.stale and rows(store) == []


def test_a_run_end_is_written_once_with_the_failed_tasks(store: Store):
    spec = heard(make_spec(), {}, run=("run_success", "run_failure"))
    [pk] = start(store, spec, 1, 1)
    [first], _ = claim(store)
    done = complete(store, spec, outcome(first, AttemptOutcome.FAILED, error="boom"))
    assert run_state(store, pk) == "failed" and done.callbacks == 1
    with store.write() as conn:
        runs.advance_runs(conn, {pk: spec}, store.now(conn))  # decided again: no second end
    [event] = rows(store)
    assert (event.event, event.task_id, event.error) == (
        "run_failure",
        None,
        "task(s) failed: extract",
    )


def test_a_run_success_is_heard_only_when_asked_for(store: Store):
    spec = heard(make_spec(), {}, run=("run_success",))
    [pk] = start(store, spec, 1, 1)
    for _ in range(3):
        [c], _ = claim(store)
        complete(store, spec, outcome(c))
    assert run_state(store, pk) == "success"
    assert events(store) == [("run_success", None, None)]


def test_a_timed_out_run_is_heard_and_a_cancel_is_not(store: Store):
    spec = dataclasses.replace(heard(make_spec(), {}, run=("run_failure",)), dagrun_timeout=60.0)
    [late, cancelled] = start(store, spec, 2, 2)
    with store.write() as conn:
        operator_actions.cancel_run(conn, spec, cancelled, store.now(conn))
        ended = operator_actions.time_out_runs(conn, spec, store.now(conn) + timedelta(minutes=2))
    assert ended == 1
    [event] = rows(store)
    assert event.run_pk == late and "dagrun_timeout" in event.error


def test_a_task_failed_by_the_reaper_is_heard(store: Store):
    spec = heard(make_spec(), {"extract": ("task_failure",)})
    start(store, spec, 1, 1)
    [c], _ = claim(store, lease=1)
    with store.write() as conn:
        reaped = upkeep.reap_expired(
            conn, lambda _: spec, store.now(conn) + timedelta(seconds=5), budget=0
        )
    assert [r.failed for r in reaped] == [True]
    [event] = rows(store)
    assert (event.event, event.try_number, event.fence_token) == (
        "task_failure",
        1,
        c.fence_token,
    )
    assert "lease expired" in event.error


def pending(store: Store, n: int, dag_id: str = "pipe") -> DagSpec:
    """``n`` runs of a DAG that hears of its failures, each failed: ``n`` pending events."""
    spec = heard(make_spec(dag_id, path=f"/d/{dag_id}.py"), {}, run=("run_failure",))
    start(store, spec, n, n)
    for c in claim(store, limit=n)[0]:
        complete(store, spec, outcome(c, AttemptOutcome.FAILED))
    return spec


def test_claim_leases_the_oldest_and_holds_them_from_others(store: Store):
    pending(store, 3)
    first = take(store, limit=2)
    assert [c.id for c in first] == [r.id for r in rows(store)][:2]
    assert first[0].event == CallbackEvent.RUN_FAILURE and first[0].run_id.startswith("scheduled")
    assert [c.id for c in take(store, owner="other")] == [rows(store)[2].id]
    assert take(store) == []
    assert {r.state for r in rows(store)} == {CallbackState.RUNNING.value}


def test_a_scoped_claim_takes_only_its_runs_events(store: Store):
    pending(store, 2)
    wanted = rows(store)[1].run_pk
    assert [c.run_pk for c in take(store, run_pks=[wanted])] == [wanted]
    assert take(store, run_pks=[]) == []


def test_a_scoped_claim_names_its_runs_a_chunk_at_a_time(store: Store, monkeypatch):
    """A backfill scopes its claims to thousands of runs: each statement names at most
    ``sql.IN_CHUNK`` of them, and the events of runs past the first chunk are found."""
    monkeypatch.setattr(sql, "IN_CHUNK", 2)
    pending(store, 5)
    run_pks = [r.run_pk for r in rows(store)]
    sizes = []

    def record(text: str, args, _seconds) -> None:
        if "callback.run_pk IN" in text:  # the scoped claim and the outstanding check
            named = text.count("%(b_run_pks_")  # PostgreSQL's placeholders
            listed = re.search(r"callback\.run_pk IN \(([?, ]*)\)", text)
            sizes.append(named or listed.group(1).count("?"))

    with sql.observed(record):
        with store.read() as conn:
            assert callbacks.outstanding(conn, [999, 998, run_pks[-1]])
        taken = take(store, limit=4, run_pks=run_pks)
    assert sorted(c.run_pk for c in taken) == sorted(run_pks)[:4]
    assert [c.run_pk for c in take(store, run_pks=run_pks)] == sorted(run_pks)[4:]
    assert sizes and max(sizes) == 2
    with store.read() as conn:
        assert callbacks.outstanding(conn, run_pks)  # running ones count too
        assert not callbacks.outstanding(conn, [999, 998, 997])


def test_finish_records_how_it_ended_for_the_holder_only(store: Store):
    pending(store, 2)
    sent, failed = take(store)
    log = LogRange("/logs/x.log", 10, 20)
    with store.write() as conn:
        now = store.now(conn)
        assert callbacks.finish(conn, "intruder", [callbacks.CallbackEnd(sent.id, True)], now) == 0
        ends = [
            callbacks.CallbackEnd(sent.id, True, log=log),
            callbacks.CallbackEnd(failed.id, False, "x"),
        ]
        assert callbacks.finish(conn, OWNER, ends, now) == 2
        assert not callbacks.outstanding(conn, [sent.run_pk, failed.run_pk])
    a, b = rows(store)
    assert (a.state, a.log_path, a.log_offset, a.log_length) == ("sent", "/logs/x.log", 10, 20)
    assert (b.state, b.outcome_error) == ("failed", "x")


def test_release_gives_unstarted_events_back(store: Store):
    pending(store, 1)
    [held] = take(store)
    with store.write() as conn:
        assert callbacks.release(conn, OWNER, [held.id]) == 1
        assert callbacks.outstanding(conn, [held.run_pk])
    assert [c.id for c in take(store, owner="other")] == [held.id]


def test_a_lost_callback_ends_failed_once_and_is_never_claimed_again(store: Store):
    pending(store, 2)
    expiring = take(store, limit=1, hold=1)
    gone_owner = take(store, owner="host:1:gone")
    with store.write() as conn:
        now = store.now(conn)
        assert callbacks.end_lost(conn, now) == []  # neither expired yet, no owner gone
        ended = callbacks.end_lost(conn, now + timedelta(seconds=5), gone=["host:1:gone"])
        assert sorted(r.id for r in ended) == sorted(c.id for c in expiring + gone_owner)
        assert callbacks.end_lost(conn, now + timedelta(seconds=5), gone=["host:1:gone"]) == []
        late = callbacks.CallbackEnd(expiring[0].id, True)
        assert callbacks.finish(conn, OWNER, [late], now) == 0, "the sweep's end stands"
    assert {(r.state, r.outcome_error) for r in rows(store)} == {("failed", callbacks.LOST)}
    assert take(store) == []


def test_of_attempt_lists_the_callbacks_an_attempt_fired(store: Store):
    spec = heard(make_spec(), {"extract": ("task_success",)})
    start(store, spec, 1, 1)
    [c], _ = claim(store)
    complete(store, spec, outcome(c))
    with store.read() as conn:
        [fired] = callbacks.of_attempt(conn, c.ti_id, c.fence_token)
        assert callbacks.of_attempt(conn, c.ti_id, c.fence_token + 1) == []
    assert (fired.event, fired.state) == ("task_success", "pending")


def test_concurrent_claims_skip_each_others_rows(pg_url: str):
    """PostgreSQL only: SQLite serialises writers, so no two claims ever overlap there."""
    store = Store(pg_url)
    try:
        pending(store, 4)
        with store.write() as first:
            mine = callbacks.claim(first, OWNER, 2, 60, store.now(first))
            theirs = take(store, owner="other", limit=4)  # while the first holds its rows
    finally:
        store.dispose()
    assert len(mine) == 2 and len(theirs) == 2
    assert not {c.id for c in mine} & {c.id for c in theirs}


def test_runs_made_by_hand_are_heard_like_others(store: Store):
    spec = heard(make_spec(), {}, run=("run_failure",))
    register(store, spec)
    with store.write() as conn:
        interval = days(1)[0]
        pk, _ = runs.create_manual_run(conn, spec, interval, "by-hand", store.now(conn))
        runs.admit_and_start(conn, spec, store.now(conn))
        assert run_reads.run_by_pk(conn, pk).run_type == RunType.MANUAL.value
    [c], _ = claim(store)
    complete(store, spec, outcome(c, AttemptOutcome.FAILED))
    assert [c.run_id for c in take(store)] == ["by-hand"]
