"""Hand changes to runs (store.manual), manual runs, the audit log and claim scopes, on
SQLite and PostgreSQL: cancel, mark a run, mark tasks with downstream readiness following."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from dagrun import DAG, BashTask
from dagrun.parsing.loader import build_spec
from dagrun.parsing.spec import DagSpec
from dagrun.states import AttemptOutcome, RunState, RunType, TaskState
from dagrun.store import (
    Store,
    attempts,
    audit,
    operator_actions,
    run_reads,
    runs,
    task_reads,
    upkeep,
)
from dagrun.store.schema import task_instance
from dagrun.timing.timetable import DataInterval
from tests.store.test_store import (
    OWNER,
    T0,
    attempt_rows,
    claim,
    complete,
    days,
    make_spec,
    outcome,
    register,
    run_state,
    start,
    ti_row,
    ti_states,
)


def change(store: Store, action, *args):
    with store.write() as conn:
        return action(conn, *args, store.now(conn))


def test_cancel_stops_running_attempts_skips_the_rest_and_fences_late_results(store: Store):
    spec = make_spec()
    [pk] = start(store, spec, 1, 1)
    [running], _ = claim(store)
    done = change(store, operator_actions.cancel_run, spec, pk)
    assert (done.before, done.after, done.stopped, done.tasks) == (
        RunState.RUNNING,
        RunState.FAILED,
        1,
        3,
    )
    assert run_state(store, pk) == "failed"
    assert ti_states(store, pk) == {"extract": "failed", "load": "skipped", "report": "skipped"}
    assert ti_row(store, pk, "extract").lease_owner is None
    [attempt] = attempt_rows(store, running.ti_id)
    assert (attempt.outcome, attempt.error) == (AttemptOutcome.FAILED.value, "cancelled")
    with store.read() as conn:
        taken = attempts.stopped_by_hand(conn, {(running.ti_id, running.fence_token)})
    assert taken == {(running.ti_id, running.fence_token)}, "its worker is told to stop it"

    late = complete(store, spec, outcome(running))
    assert late.stale and not late.accepted
    assert ti_states(store, pk)["extract"] == "failed"
    [attempt] = attempt_rows(store, running.ti_id)
    assert attempt.outcome == "failed"
    assert attempt.late_result.startswith("finished as success after its lease was lost")


def test_cancelling_a_finished_run_changes_nothing(store: Store):
    spec = make_spec()
    [pk] = start(store, spec, 1, 1)
    change(store, operator_actions.cancel_run, spec, pk)
    again = change(store, operator_actions.cancel_run, spec, pk)
    assert not again.changed and again.before == RunState.FAILED


def test_cancel_of_a_run_not_started_skips_every_task(store: Store):
    spec = make_spec()
    register(store, spec)
    with store.write() as conn:
        runs.create_runs(conn, spec, days(1), RunType.SCHEDULED, T0)
        [run] = run_reads.runs(conn, spec.dag_id)
    done = change(store, operator_actions.cancel_run, spec, run.id)
    assert done.after == RunState.FAILED and done.stopped == 0
    assert set(ti_states(store, run.id).values()) == {"skipped"}


def test_an_expired_lease_is_not_a_stop_by_hand(store: Store):
    """Reaping ends the attempt as lease_expired: that attempt runs on (its result is kept as
    late), only hand changes make its worker stop it."""
    spec = make_spec()
    start(store, spec, 1, 1)
    [held], now = claim(store, lease=1)
    with store.write() as conn:
        upkeep.reap_expired(conn, {spec.dag_id: spec}.__getitem__, now + timedelta(seconds=5))
        assert attempts.stopped_by_hand(conn, {(held.ti_id, held.fence_token)}) == set()


def test_mark_run_success_ends_unfinished_tasks_successfully(store: Store):
    spec = make_spec()
    [pk] = start(store, spec, 1, 1)
    claim(store)
    done = change(store, operator_actions.mark_run, spec, pk, RunState.SUCCESS, "marked success")
    assert done.after == RunState.SUCCESS and done.stopped == 1
    assert set(ti_states(store, pk).values()) == {"success"}
    assert run_state(store, pk) == "success"


def test_mark_finished_run_changes_only_its_state(store: Store):
    spec = make_spec()
    [pk] = start(store, spec, 1, 1)
    change(store, operator_actions.mark_run, spec, pk, RunState.SUCCESS, "by hand")
    done = change(store, operator_actions.mark_run, spec, pk, RunState.FAILED, "by hand")
    assert (done.before, done.after, done.tasks) == (RunState.SUCCESS, RunState.FAILED, 0)
    assert run_state(store, pk) == "failed"
    assert set(ti_states(store, pk).values()) == {"success"}
    same = change(store, operator_actions.mark_run, spec, pk, RunState.FAILED, "by hand")
    assert not same.changed


def fail_first_task(store: Store, spec) -> int:
    """A run whose first task failed for good: the rest are upstream_failed, the run failed."""
    [pk] = start(store, spec, 1, 1)
    [first], _ = claim(store)
    complete(store, spec, outcome(first, AttemptOutcome.NON_RETRYABLE, error="boom"))
    assert run_state(store, pk) == "failed"
    assert ti_states(store, pk) == {
        "extract": "failed",
        "load": "upstream_failed",
        "report": "upstream_failed",
    }
    return pk


def test_marking_a_failed_upstream_success_reopens_the_run_for_its_downstream(store: Store):
    spec = make_spec()
    pk = fail_first_task(store, spec)
    done = change(
        store, operator_actions.mark_tasks, spec, pk, {"extract"}, TaskState.SUCCESS, "by hand"
    )
    assert done.reopened and done.after == RunState.WAITING and done.tasks == 1
    assert ti_states(store, pk) == {"extract": "success", "load": "none", "report": "none"}
    with store.write() as conn:
        assert runs.admit_and_start(conn, spec, store.now(conn)) == [pk]
    assert ti_states(store, pk)["load"] == "queued"
    [load], _ = claim(store)
    complete(store, spec, outcome(load))
    [report], _ = claim(store)
    complete(store, spec, outcome(report))
    assert run_state(store, pk) == "success"


def test_marking_tasks_of_a_finished_run_gives_it_the_state_they_add_up_to(store: Store):
    spec = make_spec()
    pk = fail_first_task(store, spec)
    every = {"extract", "load", "report"}
    done = change(store, operator_actions.mark_tasks, spec, pk, every, TaskState.SUCCESS, "by hand")
    assert (done.after, done.reopened, done.tasks) == (RunState.SUCCESS, False, 3)
    assert run_state(store, pk) == "success"


def test_marking_a_running_task_stops_it_and_its_downstream_follows(store: Store):
    spec = make_spec()
    [pk] = start(store, spec, 1, 1)
    [first], _ = claim(store)
    done = change(
        store, operator_actions.mark_tasks, spec, pk, {"extract"}, TaskState.SUCCESS, "by hand"
    )
    assert done.stopped == 1 and done.after == RunState.RUNNING
    assert ti_states(store, pk) == {"extract": "success", "load": "queued", "report": "none"}
    late = complete(store, spec, outcome(first, AttemptOutcome.FAILED, error="late"))
    assert late.stale and ti_states(store, pk)["extract"] == "success"


def test_marking_skipped_with_downstream_ends_the_run(store: Store):
    spec = make_spec()
    [pk] = start(store, spec, 1, 1)
    every = spec.descendants({"extract"})
    done = change(store, operator_actions.mark_tasks, spec, pk, every, TaskState.SKIPPED, "by hand")
    assert done.after == RunState.SUCCESS
    assert set(ti_states(store, pk).values()) == {"skipped"}


def manual_run(store: Store, spec, key: str, start_at=None, instant=T0) -> tuple[int, bool]:
    with store.write() as conn:
        interval = DataInterval(instant, instant)
        now = store.now(conn)
        return runs.create_manual_run(conn, spec, interval, key, now, {"n": 1}, start_at)


def test_manual_runs_are_unique_by_run_id_not_by_date(store: Store):
    spec = make_spec()
    register(store, spec)
    first, created = manual_run(store, spec, "a")
    assert created
    assert manual_run(store, spec, "a") == (first, False)
    second, created = manual_run(store, spec, "b")
    assert created and second != first
    with store.read() as conn:
        assert run_reads.run_by_pk(conn, first).conf == {"n": 1}


def test_a_run_delayed_to_later_takes_no_slot_until_then(store: Store):
    spec = make_spec(max_active_runs=1)
    register(store, spec)
    with store.write() as conn:
        now = store.now(conn)
    later, _ = manual_run(store, spec, "later", start_at=now + timedelta(hours=1))
    soon, _ = manual_run(store, spec, "soon", instant=T0 + timedelta(days=1))
    with store.write() as conn:
        assert runs.admit_and_start(conn, spec, now) == [soon]
    change(store, operator_actions.cancel_run, spec, soon)
    with store.write() as conn:
        assert runs.admit_and_start(conn, spec, now) == []
        assert runs.admit_and_start(conn, spec, now + timedelta(hours=1)) == [later]


def test_a_scoped_claim_takes_only_the_tasks_of_its_runs(store: Store):
    spec, other = make_spec(), make_spec("other", path="/d/o.py")
    [mine] = start(store, spec, 1, 1)
    [theirs] = start(store, other, 1, 1)
    with store.write() as conn:
        now = store.now(conn)
        got = attempts.claim(conn, OWNER, 10, 30, now, run_pks=[mine])
        assert [c.run_pk for c in got] == [mine]
        assert attempts.claim(conn, OWNER, 10, 30, now, run_pks=[]) == []
    assert ti_states(store, theirs)["extract"] == "queued"


def test_audit_entries_are_newest_first_and_filter_by_dag(store: Store):
    spec = make_spec()
    register(store, spec)
    with store.write() as conn:
        audit.record(store, conn, "trigger", "pipe", "a", conf={"n": 1}, at=T0)
        audit.record(store, conn, "pause", "other")
        audit.record(store, conn, "cancel", "pipe", "a", stopped=1)
    with store.read() as conn:
        every = audit.entries(conn)
        mine = audit.entries(conn, "pipe")
    assert [e.action for e in every] == ["cancel", "pause", "trigger"]
    assert [e.action for e in mine] == ["cancel", "trigger"]
    assert mine[1].detail == {"conf": {"n": 1}, "at": T0.isoformat()}
    assert set(mine[0].to_json()) == {"at", "actor", "action", "dag_id", "run_id", "detail"}
    assert mine[0].run_id == "a" and "@" in mine[0].actor


def test_a_run_past_its_dagrun_timeout_fails_with_its_attempts_stopped(store: Store):
    from dagrun import DAG, BashTask
    from dagrun.parsing.loader import build_spec

    with DAG("slowpipe", schedule="@daily", start_date="2026-01-01", dagrun_timeout=60) as dag:
        BashTask("a", command="sleep 100") >> BashTask("b", command="echo")
    spec = build_spec(dag, "/d/slow.py")
    [pk] = start(store, spec, 1, 1)
    [running], now = claim(store)
    with store.write() as conn:
        assert operator_actions.time_out_runs(conn, spec, now + timedelta(seconds=30)) == 0
        assert operator_actions.time_out_runs(conn, spec, now + timedelta(seconds=61)) == 1
    assert run_state(store, pk) == "failed"
    assert ti_states(store, pk) == {"a": "failed", "b": "skipped"}
    [attempt] = attempt_rows(store, running.ti_id)
    assert attempt.outcome == "failed" and "dagrun_timeout" in attempt.error
    with store.write() as conn:
        assert operator_actions.time_out_runs(conn, spec, now + timedelta(hours=1)) == 0


def fork_spec() -> DagSpec:
    """prep >> [left >> left_spill, right], daily from 2026-01-01 UTC."""
    with DAG("fork", schedule="@daily", start_date="2026-01-01") as dag:
        prep, left, spill, right = (
            BashTask(name, command="echo") for name in ("prep", "left", "left_spill", "right")
        )
        prep >> [left, right]
        left >> spill
    return build_spec(dag, "/d/fork.py")


def run_through(store: Store, spec: DagSpec, failing: frozenset[str] = frozenset()) -> None:
    """Claim and complete until nothing is queued: the ``failing`` tasks fail for good."""
    while True:
        claimed, _ = claim(store)
        if not claimed:
            return
        for c in claimed:
            result = (
                AttemptOutcome.NON_RETRYABLE if c.task_id in failing else AttemptOutcome.SUCCESS
            )
            complete(
                store, spec, outcome(c, result, error="boom" if c.task_id in failing else None)
            )


def mark(store: Store, spec: DagSpec, pk: int, task_ids: set[str], state: TaskState):
    reason = f"marked {state} by hand"
    return change(store, operator_actions.mark_tasks, spec, pk, task_ids, state, reason)


def test_a_state_set_by_hand_stays_when_an_upstream_is_marked_later(store: Store):
    """The issue's run: left --downstream success, right skipped, then prep failed; right
    stays skipped with its note (it went back to none), and so do left and left_spill."""
    spec = fork_spec()
    [pk] = start(store, spec, 1, 1)
    run_through(store, spec, failing=frozenset({"left"}))
    assert ti_states(store, pk) == {
        "prep": "success",
        "left": "failed",
        "left_spill": "upstream_failed",
        "right": "success",
    }
    mark(store, spec, pk, spec.descendants({"left"}), TaskState.SUCCESS)
    mark(store, spec, pk, {"right"}, TaskState.SKIPPED)
    done = mark(store, spec, pk, {"prep"}, TaskState.FAILED)
    assert ti_states(store, pk) == {
        "prep": "failed",
        "left": "success",
        "left_spill": "success",
        "right": "skipped",
    }
    assert ti_row(store, pk, "right").last_error == "marked skipped by hand"
    assert (done.after, done.reopened) == (RunState.FAILED, False)
    assert run_state(store, pk) == "failed"


def test_a_hand_mark_stays_under_downstream_readiness_of_a_running_run(store: Store):
    """Marking a task whose downstream was skipped by hand decides only what readiness
    decided: the hand-skipped task is not run, the rest follow their rules."""
    spec = fork_spec()
    [pk] = start(store, spec, 1, 1)
    [prep], _ = claim(store)
    mark(store, spec, pk, {"right"}, TaskState.SKIPPED)
    complete(store, spec, outcome(prep, AttemptOutcome.NON_RETRYABLE, error="boom"))
    assert ti_states(store, pk)["left"] == "upstream_failed"
    done = mark(store, spec, pk, {"prep"}, TaskState.SUCCESS)
    assert done.reopened
    assert ti_states(store, pk) == {
        "prep": "success",
        "left": "none",
        "left_spill": "none",
        "right": "skipped",
    }


def test_marking_or_clearing_the_task_itself_changes_a_hand_mark(store: Store):
    spec = fork_spec()
    [pk] = start(store, spec, 1, 1)
    run_through(store, spec)
    mark(store, spec, pk, {"right"}, TaskState.SKIPPED)
    mark(store, spec, pk, {"prep"}, TaskState.FAILED)
    mark(store, spec, pk, spec.descendants({"prep"}), TaskState.SUCCESS)
    assert set(ti_states(store, pk).values()) == {"success"}
    mark(store, spec, pk, {"right"}, TaskState.SKIPPED)
    with store.write() as conn:
        operator_actions.clear_runs(conn, spec, {pk: {"right"}}, store.now(conn))
    assert ti_states(store, pk)["right"] == "none"
    assert ti_row(store, pk, "right").last_error is None


def test_mark_run_success_makes_failed_and_unfinished_tasks_success_by_hand(store: Store):
    """Airflow's mark success: a failed run marked success has no failed task left; the
    tasks it set carry the note, and a task that skipped stays skipped."""
    spec = fork_spec()
    [pk] = start(store, spec, 1, 1)
    run_through(store, spec, failing=frozenset({"left"}))
    reason = "run marked success by hand"
    done = change(store, operator_actions.mark_run, spec, pk, RunState.SUCCESS, reason)
    assert (done.before, done.after, done.tasks) == (RunState.FAILED, RunState.SUCCESS, 2)
    assert set(ti_states(store, pk).values()) == {"success"}
    assert ti_row(store, pk, "left").last_error == reason
    assert ti_row(store, pk, "right").last_error is None, "what ran keeps its own record"


def test_mark_run_success_of_an_unfinished_run_ends_every_task_successfully(store: Store):
    spec = fork_spec()
    [pk] = start(store, spec, 1, 1)
    [prep], _ = claim(store)
    complete(store, spec, outcome(prep))
    [_, right], _ = claim(store)
    complete(store, spec, outcome(right, AttemptOutcome.NON_RETRYABLE, error="boom"))
    assert run_state(store, pk) == "running"
    done = change(store, operator_actions.mark_run, spec, pk, RunState.SUCCESS, "by hand")
    assert (done.after, done.stopped, done.tasks) == (RunState.SUCCESS, 1, 3)
    assert set(ti_states(store, pk).values()) == {"success"}


def test_mark_run_failed_fails_what_runs_and_waits_on_a_poke_and_skips_the_rest(store: Store):
    """Airflow's mark failed: running tasks and sensors between pokes fail, tasks not
    started are skipped, finished ones keep their state."""
    spec = fork_spec()
    [pk] = start(store, spec, 1, 1)
    [prep], _ = claim(store)
    complete(store, spec, outcome(prep))
    [_, right], _ = claim(store)
    with store.write() as conn:  # as RESCHEDULE_POKE leaves a sensor between pokes
        conn.execute(
            update(task_instance)
            .where(task_instance.c.id == right.ti_id)
            .values(state="up_for_reschedule", lease_owner=None, lease_until=None)
        )
    done = change(store, operator_actions.mark_run, spec, pk, RunState.FAILED, "by hand")
    assert (done.after, done.stopped) == (RunState.FAILED, 1)
    assert ti_states(store, pk) == {
        "prep": "success",
        "left": "failed",
        "left_spill": "skipped",
        "right": "failed",
    }


def test_a_clear_counts_tries_on_and_gives_the_task_its_tries_again(store: Store):
    """Airflow's clear: try numbers go on across clears and max_tries grows by the task's
    tries, so a task of one retry that failed twice runs try 3 of 4 (it read 3 of 2)."""
    spec = make_spec(retries=1)
    [pk] = start(store, spec, 1, 1)
    for _ in range(2):
        with store.write() as conn:
            upkeep.requeue_retries(conn, store.now(conn) + timedelta(hours=1))
        [first], _ = claim(store)
        failed = outcome(first, AttemptOutcome.FAILED, error="boom", failures=first.failures)
        complete(store, spec, failed)
    row = ti_row(store, pk, "extract")
    assert (row.state, row.try_number, row.max_tries) == ("failed", 2, 2)
    with store.write() as conn:
        operator_actions.clear_runs(conn, spec, {pk: {"extract"}}, store.now(conn))
        assert runs.admit_and_start(conn, spec, store.now(conn)) == [pk]
    [again], _ = claim(store)
    assert again.try_number == 3
    assert ti_row(store, pk, "extract").max_tries == 4
    assert ti_row(store, pk, "load").max_tries == 2, "a task cleared before it ran: 0 + 2"


def test_a_state_marked_by_hand_has_no_start_or_duration_of_a_try(store: Store):
    """The try that failed keeps its times in the attempt history; the success set by hand
    after it ran for no time (the run page showed the try's 0.00 s, the Gantt a bar from
    the try's start to the mark)."""
    spec = make_spec()
    pk = fail_first_task(store, spec)
    assert ti_row(store, pk, "extract").duration is not None
    mark(store, spec, pk, {"extract"}, TaskState.SUCCESS)
    row = ti_row(store, pk, "extract")
    assert (row.state, row.start_date, row.duration) == ("success", None, None)
    assert row.end_date is not None and row.last_error == "marked success by hand"
    with store.read() as conn:
        rows = {r.task_id: r for r in task_reads.task_instances(conn, [pk])}
    assert rows["extract"].set_without_a_try
    assert not rows["load"].set_without_a_try, "readiness's decisions are not set by hand"
    [attempt] = attempt_rows(store, row.id)
    assert attempt.started_at is not None and attempt.outcome == "non_retryable"
