"""Sensors: options checked at parse time, the store's poke transitions on SQLite and
PostgreSQL (``store``), and the built-ins run in real worker children (``run_once``)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from dagrun import DAG, BashTask, task
from dagrun.authoring.sensor_options import ExternalMarker, PokeReturnValue, SensorSpec
from dagrun.errors import DagDefinitionError
from dagrun.parsing.loader import build_spec, load_file
from dagrun.parsing.spec import DagSpec
from dagrun.runtime.sensors import (
    ExternalTaskMarker,
    ExternalTaskSensor,
    FileSensor,
    TimeDeltaSensor,
    file_found,
)
from dagrun.runtime.task_calls import ConditionUnmet, sense
from dagrun.states import AttemptOutcome, TaskState
from dagrun.store import Store, attempts, operator_actions, pools, registry, run_reads, upkeep
from dagrun.store.schema import task_attempt, task_instance
from tests.helpers import run_once, write_dag
from tests.store.test_store import OWNER, attempt_rows, claim, run_state, start, ti_row, ti_states

T = datetime(2026, 3, 1, 12, tzinfo=UTC)
RESCHEDULED = AttemptOutcome.RESCHEDULED


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def watch_spec(
    *, mode: str = "reschedule", soft_fail: bool = False, retries: int = 0, **more
) -> DagSpec:
    """landed (a sensor: 5 s between pokes, 60 s timeout, callbacks, ``more`` sensor
    options) >> load, daily."""
    with DAG(
        "watch",
        schedule="@daily",
        start_date="2026-01-01",
        default_args={"retries": retries, "retry_delay": 10},
    ) as dag:

        @task.sensor(
            poke_interval=5,
            timeout=60,
            mode=mode,
            soft_fail=soft_fail,
            on_failure_callback=print,
            on_success_callback=print,
            **more,
        )
        def landed():
            return False

        landed() >> BashTask("load", command="echo")
    return build_spec(dag, "/d/watch.py")


def outcome(c: attempts.Claim, result=AttemptOutcome.SUCCESS, **kw) -> attempts.Outcome:
    """What a worker reports of the attempt it claimed as ``c`` (its first poke with it)."""
    return attempts.Outcome.of(c, result, **kw)


def finish(store: Store, spec: DagSpec, done: attempts.Outcome, now: datetime, owner=OWNER):
    """Complete one attempt by the store's clock ``now``."""
    with store.write() as conn:
        return attempts.complete(conn, owner, [done], lambda _id: spec, now)


def requeue(store: Store, now: datetime) -> int:
    with store.write() as conn:
        return upkeep.requeue_pokes(conn, now)


def first_poke(store: Store, spec: DagSpec) -> tuple[int, attempts.Claim]:
    """A run whose sensor poked once at T (reported at T + 1 s): waiting until T + 6 s."""
    (pk,) = start(store, spec, 1, 1)
    (c,), _ = claim(store, now=T)
    finish(store, spec, outcome(c, RESCHEDULED, duration=0.5), T + s(1))
    return pk, c


# ---------------------------------------------------------------- store: poke transitions


def test_an_unmet_poke_waits_holding_nothing_and_gives_its_try_back(store: Store):
    spec = watch_spec()
    (pk,) = start(store, spec, 1, 1)
    (c,), _ = claim(store, now=T)
    assert (c.try_number, c.first_poke_at) == (1, T)
    done = finish(store, spec, outcome(c, RESCHEDULED, duration=0.5), T + s(1))
    assert done.rescheduled == done.accepted == [outcome(c, RESCHEDULED, duration=0.5)]
    assert not (done.dead or done.retrying or done.skipped or done.finished_runs)
    assert done.callbacks == 0, "a poke is neither a success nor a failure"
    row = ti_row(store, pk, "landed")
    assert row.state == TaskState.UP_FOR_RESCHEDULE
    assert (row.lease_owner, row.lease_until, row.next_try_at) == (None, None, T + s(6))
    assert (row.try_number, row.pokes, row.first_poke_at, row.duration) == (0, 1, T, 0.5)
    assert ti_states(store, pk)["load"] == "none"
    assert run_state(store, pk) == "running"
    (attempt,) = attempt_rows(store, c.ti_id)
    assert (attempt.try_number, attempt.outcome, attempt.error) == (1, RESCHEDULED, None)
    with store.read() as conn:
        assert run_reads.has_pending_tasks(conn, "watch"), "a waiting sensor is not stuck"
        assert pools.missing_pools(conn) == []


def test_a_poke_is_queued_again_when_due_with_its_try_number_and_first_poke(store: Store):
    spec = watch_spec()
    pk, first = first_poke(store, spec)
    assert requeue(store, T + s(6) - timedelta(microseconds=1)) == 0
    assert requeue(store, T + s(6)) == 1
    assert ti_row(store, pk, "landed").state == TaskState.QUEUED
    (again,), _ = claim(store, now=T + s(7))
    assert (again.try_number, again.fence_token, again.first_poke_at) == (1, 2, T)
    finish(store, spec, outcome(again, RESCHEDULED), T + s(8))
    row = ti_row(store, pk, "landed")
    assert (row.state, row.try_number, row.pokes) == (TaskState.UP_FOR_RESCHEDULE, 0, 2)
    assert (row.first_poke_at, row.next_try_at) == (T, T + s(13))
    history = [(a.try_number, a.fence_token, a.outcome) for a in attempt_rows(store, first.ti_id)]
    assert history == [(1, 1, RESCHEDULED), (1, 2, RESCHEDULED)]


def test_growing_waits_count_from_the_first_poke(store: Store):
    spec = watch_spec(exponential_backoff=True, max_wait=30)
    sensor = spec.task_map["landed"].sensor
    pk, _ = first_poke(store, spec)
    key = f"watch#landed#-1#{T.isoformat()}"
    first_wait = sensor.wait_after(1.0, key)
    assert 2 <= first_wait < 4, "Airflow's first wait: int(interval / 2), jittered below twice"
    row = ti_row(store, pk, "landed")
    assert row.next_try_at == T + s(1 + first_wait)
    requeue(store, row.next_try_at)
    (again,), _ = claim(store, now=T + s(40))
    finish(store, spec, outcome(again, RESCHEDULED), T + s(41))
    assert ti_row(store, pk, "landed").next_try_at == T + s(41 + sensor.wait_after(41.0, key))


def test_the_sweep_queues_due_pokes(store: Store):
    spec = watch_spec()
    pk, _ = first_poke(store, spec)  # due at T + 6 s, long before the store's clock
    register_cache = registry.SpecCache()
    assert upkeep.sweep(store, register_cache).requeued == 1
    assert ti_row(store, pk, "landed").state == TaskState.QUEUED


def test_a_true_poke_succeeds_and_its_downstream_runs(store: Store):
    spec = watch_spec()
    pk, _ = first_poke(store, spec)
    requeue(store, T + s(6))
    (again,), _ = claim(store, now=T + s(6))
    done = finish(store, spec, outcome(again, return_value="true"), T + s(7))
    assert done.accepted and not done.rescheduled
    assert done.callbacks == 1, "its success callback"
    row = ti_row(store, pk, "landed")
    assert (row.state, row.try_number, row.pokes, row.return_value) == ("success", 1, 1, "true")
    assert ti_states(store, pk)["load"] == "queued"


@pytest.mark.parametrize(
    ("soft_fail", "state", "load", "run", "callbacks"),
    [(False, "failed", "upstream_failed", "failed", 1), (True, "skipped", "skipped", "success", 0)],
)
def test_the_timeout_counts_from_the_first_poke_and_is_never_retried(
    store: Store, soft_fail, state, load, run, callbacks
):
    spec = watch_spec(soft_fail=soft_fail, retries=3)
    pk, first = first_poke(store, spec)
    requeue(store, T + s(58))
    (second,), _ = claim(store, now=T + s(58))
    just_before = T + s(60) - timedelta(microseconds=1)
    assert finish(store, spec, outcome(second, RESCHEDULED), just_before).rescheduled
    requeue(store, T + s(65))
    (last,), _ = claim(store, now=T + s(65))
    assert last.first_poke_at == T
    done = finish(store, spec, outcome(last, RESCHEDULED, duration=0.25), T + s(66))
    assert not done.rescheduled and not done.retrying
    assert (done.dead, done.skipped) == (([], done.accepted) if soft_fail else (done.accepted, []))
    assert done.callbacks == callbacks, "a failure callback; none for a skip"
    assert list(done.finished_runs) == [pk]
    row = ti_row(store, pk, "landed")
    assert (row.state, row.last_error) == (state, "sensor timed out after 60 s")
    assert (row.try_number, row.pokes, row.first_poke_at, row.duration) == (1, 3, T, 0.25)
    assert ti_states(store, pk)["load"] == load
    assert run_state(store, pk) == run
    ended = attempt_rows(store, first.ti_id)
    assert [a.outcome for a in ended] == [RESCHEDULED, RESCHEDULED, AttemptOutcome.TIMED_OUT]
    assert ended[-1].error == "sensor timed out after 60 s"


def test_in_poke_mode_an_unmet_report_ends_the_sensor(store: Store):
    """A poke-mode attempt reports its condition unmet only once it waited out the timeout."""
    spec = watch_spec(mode="poke", retries=3)
    (pk,) = start(store, spec, 1, 1)
    (c,), _ = claim(store, now=T)
    done = finish(store, spec, outcome(c, RESCHEDULED), T + s(1))
    assert done.dead == done.accepted
    row = ti_row(store, pk, "landed")
    assert (row.state, row.last_error, row.pokes) == ("failed", "sensor timed out after 60 s", 1)


def test_a_sensor_that_raises_fails_and_retries_like_any_task(store: Store):
    spec = watch_spec(retries=1)
    (pk,) = start(store, spec, 1, 1)
    (c,), _ = claim(store, now=T)
    done = finish(store, spec, outcome(c, AttemptOutcome.FAILED, error="boom"), T + s(1))
    assert done.retrying == done.accepted
    row = ti_row(store, pk, "landed")
    assert (row.state, row.try_number, row.failures) == ("up_for_retry", 1, 1)
    assert (row.pokes, row.first_poke_at) == (0, None), "a failure is not a poke"


def test_a_stale_poke_is_refused_by_the_fence(store: Store):
    spec = watch_spec()
    (pk,) = start(store, spec, 1, 1)
    (old,), _ = claim(store, lease=30, now=T)
    wrong = dataclasses.replace(outcome(old, RESCHEDULED), fence_token=9)
    assert finish(store, spec, wrong, T + s(1)).stale
    with store.write() as conn:
        assert upkeep.reap_expired(conn, lambda _id: spec, T + s(31))
    (new,), _ = claim(store, owner="worker-2", now=T + s(32))
    done = finish(store, spec, outcome(old, RESCHEDULED), T + s(33))
    assert done.stale and not done.accepted and not done.rescheduled
    row = ti_row(store, pk, "landed")
    assert (row.state, row.lease_owner, row.fence_token) == ("running", "worker-2", 2)
    assert (row.try_number, row.pokes, row.first_poke_at) == (2, 0, None)
    first, second = attempt_rows(store, old.ti_id)
    assert first.outcome == AttemptOutcome.LEASE_EXPIRED
    assert first.late_result.startswith("finished as rescheduled after its lease was lost")
    assert second.outcome is None
    done = finish(store, spec, outcome(new, RESCHEDULED), T + s(34), owner="worker-2")
    assert done.rescheduled
    row = ti_row(store, pk, "landed")
    assert (row.state, row.pokes, row.first_poke_at) == ("up_for_reschedule", 1, T + s(32))


def test_a_waiting_sensor_holds_no_pool_slot(store: Store):
    with DAG("pooled", schedule="@daily", start_date="2026-01-01") as dag:

        @task.sensor(pool="p", poke_interval=5)
        def landed():
            return False

        landed()
        BashTask("other", command="echo", pool="p", priority_weight=0)
    spec = build_spec(dag, "/d/pooled.py")
    with store.write() as conn:
        pools.set_pool(conn, "p", 1, None)
    start(store, spec, 1, 1)
    (c,), _ = claim(store, now=T)
    assert c.task_id == "landed"
    assert claim(store, now=T)[0] == [], "the pool's one slot is the sensor's while it pokes"
    finish(store, spec, outcome(c, RESCHEDULED), T + s(1))
    (other,), _ = claim(store, now=T + s(2))
    assert other.task_id == "other"


def test_clearing_a_sensor_restarts_its_timeout_and_a_cancel_skips_it(store: Store):
    spec = watch_spec()
    pk, _ = first_poke(store, spec)
    with store.write() as conn:
        operator_actions.clear_runs(conn, spec, {pk: {"landed"}}, store.now(conn))
    row = ti_row(store, pk, "landed")
    assert (row.state, row.pokes, row.first_poke_at, row.next_try_at) == ("queued", 0, None, None)
    (c,), _ = claim(store, now=T + s(100))
    assert c.first_poke_at == T + s(100)
    finish(store, spec, outcome(c, RESCHEDULED), T + s(101))
    with store.write() as conn:
        operator_actions.cancel_run(conn, spec, pk, store.now(conn))
    assert ti_states(store, pk) == {"landed": "skipped", "load": "skipped"}
    assert run_state(store, pk) == "failed"


# ---------------------------------------------------------------- authoring


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"poke_interval": 0}, "poke_interval must be positive, not 0"),
        ({"poke_interval": -1}, "poke_interval: invalid duration '-1'"),
        ({"poke_interval": "soon"}, "poke_interval: invalid duration 'soon'"),
        ({"timeout": timedelta(0)}, "timeout must be positive"),
        ({"timeout": True}, "timeout: invalid duration 'True'"),
        ({"mode": "wait"}, "mode must be 'reschedule' or 'poke', not 'wait'"),
        ({"soft_fail": "yes"}, "soft_fail must be True or False, not 'yes'"),
        ({"exponential_backoff": 1}, "exponential_backoff must be True or False, not 1"),
        ({"max_wait": -5}, "max_wait: invalid duration '-5'"),
    ],
)
def test_bad_sensor_options_name_the_task(options, message):
    with pytest.raises(DagDefinitionError) as decorated, DAG("d", schedule=None):

        @task.sensor(**options)
        def waits():
            return True

        waits()
    assert str(decorated.value).startswith(f"task 'waits' in DAG 'd': {message}")
    with pytest.raises(DagDefinitionError) as built_in, DAG("d", schedule=None):
        FileSensor("f", filepath="/tmp/x", **options)
    assert str(built_in.value).startswith(f"task 'f' in DAG 'd': {message}")


def test_bad_sensor_options_are_import_errors(dags_dir: Path):
    path = write_dag(
        dags_dir,
        "bad.py",
        """
        from dagrun import DAG, task

        with DAG("bad", schedule=None):
            @task.sensor(timeout=0)
            def waits():
                return True

            waits()
        """,
    )
    specs, error = load_file(str(path))
    assert specs == []
    assert "task 'waits' in DAG 'bad': timeout must be positive, not 0" in error.reason


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FileSensor("f", filepath="/in/{{ dss }}"), "template in filepath"),
        (lambda: FileSensor("f", filepath=""), "FileSensor needs a filepath"),
        (lambda: ExternalTaskSensor("e", external_dag_id="a b"), "external DAG id 'a b'"),
        (
            lambda: ExternalTaskSensor("e", external_dag_id="a", external_task_id="x\n"),
            "external task id 'x\\n'",
        ),
        (lambda: TimeDeltaSensor("t", delta="later"), "delta: invalid duration 'later'"),
        (lambda: FileSensor("f", filepath="/x", retries=-1), "retries must be a whole number"),
        (
            lambda: ExternalTaskSensor(
                "e", external_dag_id="a", external_task_id="x", external_task_ids=["y"]
            ),
            "give external_task_id or external_task_ids, not both",
        ),
        (
            lambda: ExternalTaskSensor("e", external_dag_id="a", external_task_ids=["x", "x"]),
            "external_task_ids repeats a task id",
        ),
        (
            lambda: ExternalTaskSensor(
                "e", external_dag_id="a", external_task_id="x", external_task_group_id="g"
            ),
            "give external task ids or an external task group id, not both",
        ),
        (
            lambda: ExternalTaskSensor(
                "e", external_dag_id="a", allowed_states=["upstream_failed"]
            ),
            "'upstream_failed' is not a DAG run's state",
        ),
        (
            lambda: ExternalTaskSensor(
                "e", external_dag_id="a", external_task_id="x", skipped_states=["failed"]
            ),
            "a state is in more than one of",
        ),
        (
            lambda: ExternalTaskSensor("e", external_dag_id="a", execution_delta="yesterday"),
            "execution_delta: invalid duration 'yesterday'",
        ),
        (
            lambda: ExternalTaskMarker(
                "m", external_dag_id="a", external_task_id="x", recursion_depth=0
            ),
            "recursion_depth must be a whole number > 0, not 0",
        ),
        (
            lambda: ExternalTaskMarker(
                "m", external_dag_id="a", external_task_id="x", logical_date="{{ dss }}"
            ),
            "template in logical_date",
        ),
    ],
)
def test_bad_built_in_sensors_are_refused_at_parse_time(make, message):
    with pytest.raises(DagDefinitionError, match=message.replace("\\", "\\\\")), DAG("d"):
        make()


def test_sensor_options_are_kept_in_the_spec_and_its_json():
    with DAG("kept", schedule=None) as dag:

        @task.sensor
        def bare():
            return True

        @task.sensor(poke_interval="5m", timeout=timedelta(hours=2), mode="poke", soft_fail=True)
        def tuned():
            return True

        @task
        def plain():
            return 1

        bare() >> tuned() >> plain()
        FileSensor("file", filepath="/in/{{ ds }}", retries=2, timeout=90)
        FileSensor("grows", filepath="/in", exponential_backoff=True, max_wait="10m")
        ExternalTaskMarker("mark", external_dag_id="other", external_task_id="wait")
    spec = build_spec(dag, "/d/kept.py")
    found = {t.task_id: t.sensor for t in spec.tasks}
    assert found == {
        "bare": SensorSpec(60.0, 3600.0, "reschedule", False),
        "tuned": SensorSpec(300.0, 7200.0, "poke", True),
        "plain": None,
        "file": SensorSpec(60.0, 90.0, "reschedule", False),
        "grows": SensorSpec(60.0, 3600.0, "reschedule", False, True, 600.0),
        "mark": None,
    }
    assert spec.task_map["file"].retries == 2
    assert spec.task_map["mark"].marker == ExternalMarker(
        "other", "wait", "{{ logical_date.isoformat() }}", 10
    )
    assert spec.task_map["mark"].kind == "external_task_marker"
    assert DagSpec.from_json(spec.to_json()) == spec
    old = json.loads(spec.to_json())
    for t in old["tasks"]:
        t.pop("marker", None)  # a spec stored before markers existed
        if "sensor" in t:
            t["sensor"] = t["sensor"][:4]  # and before growing waits
    before = DagSpec.from_json(json.dumps(old)).task_map
    assert before["mark"].marker is None
    assert before["grows"].sensor == SensorSpec(60.0, 3600.0, "reschedule", False)
    for t in old["tasks"]:
        t.pop("sensor", None)  # a spec stored before sensors existed
    assert all(t.sensor is None for t in DagSpec.from_json(json.dumps(old)).tasks)


def test_growing_waits_are_airflows_exponential_backoff():
    fixed = SensorSpec(10.0, 3600.0, "reschedule", False)
    assert fixed.wait_after(500.0, "k") == 10.0, "no backoff: the poke interval"
    grows = fixed._replace(exponential_backoff=True)
    for n in range(1, 8):  # the n-th wait is in [interval * 2 ** (n - 2), twice that)
        wait = grows.wait_after(0.0, "k", poke=n)
        assert max(int(10 * 2 ** (n - 2)), 1) <= wait < 2 * max(int(10 * 2 ** (n - 2)), 1)
        assert wait == grows.wait_after(0.0, "k", poke=n), "its jitter fixed by the key"
    waits = {grows.wait_after(0.0, f"key {i}", poke=6) for i in range(20)}
    assert len(waits) > 1, "different sensors spread out"
    assert grows._replace(max_wait=25.0).wait_after(0.0, "k", poke=7) == 25.0
    assert grows.wait_after(3590.5, "k", poke=9) == 10.0, "never past the timeout"
    total, waited = 0.0, []  # rescheduled: the count is read from the time since the first
    for _ in range(5):
        waited.append(grows.wait_after(total, "k"))
        total += waited[-1]
    assert waited == [grows.wait_after(0.0, "k", poke=n) for n in range(1, 6)]


def test_a_done_poke_return_value_is_the_value_even_when_falsy():
    answers = iter([PokeReturnValue(False, "ignored"), 0, PokeReturnValue(True, 0)])
    poke = SensorSpec(0.01, 5.0, "poke", False)
    assert sense(poke, lambda: next(answers)) == 0
    assert sense(poke, lambda: PokeReturnValue(True)) is None
    assert sense(poke, lambda: {"found": 1}) == {"found": 1}, "a truthy value is the value"
    with pytest.raises(ConditionUnmet, match="next poke in 60 s"):
        sense(poke._replace(mode="reschedule", poke_interval=60.0), lambda: PokeReturnValue(False))
    with pytest.raises(ConditionUnmet, match=r"after 0\.05 s of pokes"):
        sense(poke._replace(timeout=0.05), lambda: PokeReturnValue(False))


def test_file_sensor_patterns(tmp_path: Path):
    (tmp_path / "in" / "a" / "b").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "in" / "a" / "b" / "x.csv").write_text("1")
    (tmp_path / "in" / "top.csv").write_text("1")
    found = {
        "/in/top.csv": True,
        "/in/*.csv": True,
        "/in/*.txt": False,
        "/in/**/x.csv": False,
        "/empty": True,
        "/nowhere": False,
    }
    for pattern, expected in found.items():
        assert file_found(str(tmp_path) + pattern) is expected, pattern
    assert file_found(f"{tmp_path}/in/**/x.csv", recursive=True)
    assert not file_found(f"{tmp_path}/empty", folder_needs_file=True)
    assert file_found(f"{tmp_path}/in", folder_needs_file=True), "a file somewhere under it"


# ---------------------------------------------------------------- in worker children


def ti_rows(store: Store, run_pk: int) -> dict[str, dict]:
    with store.read() as conn:
        rows = conn.execute(select(task_instance).where(task_instance.c.run_pk == run_pk))
        return {r["task_id"]: dict(r) for r in rows.mappings()}


def outcomes(store: Store, run_pk: int) -> dict[str, list[tuple[int, str]]]:
    """Each task's attempts as (try number, outcome), in order."""
    found: dict[str, list[tuple[int, str]]] = {}
    with store.read() as conn:
        rows = conn.execute(
            select(task_attempt.c.task_id, task_attempt.c.try_number, task_attempt.c.outcome)
            .where(task_attempt.c.run_pk == run_pk)
            .order_by(task_attempt.c.id)
        )
        for task_id, try_number, ended in rows:
            found.setdefault(task_id, []).append((try_number, ended))
    return found


@pytest.mark.slow
def test_a_run_carries_its_sensors_to_their_end(store: Store, dags_dir: Path, tmp_path: Path):
    """``dagrun run``'s driver: a sensor poked until true (its try number kept), the
    built-ins' conditions held and unmet, a sensor in poke mode, one that raises."""
    landing = tmp_path / "landing"
    (landing / "2026-01-01").mkdir(parents=True)
    write_dag(
        dags_dir,
        "sensing.py",
        f"""
        from pathlib import Path
        from dagrun import DAG, task
        from dagrun.runtime.sensors import FileSensor, TimeDeltaSensor

        COUNT = Path({str(tmp_path / "count")!r})

        with DAG("sensing", schedule="@daily", start_date="2026-01-01"):
            @task.sensor(poke_interval=0.1)
            def third_time():
                n = int(COUNT.read_text()) + 1 if COUNT.exists() else 1
                COUNT.write_text(str(n))
                return {{"pokes": n}} if n >= 3 else None

            @task.sensor(mode="poke", poke_interval=0.1, timeout=0.5)
            def never():
                return False

            @task.sensor(retries=1, retry_delay=0)
            def raises():
                raise RuntimeError("no access")

            third_time()
            never()
            raises()
            FileSensor("there", filepath={str(landing)!r} + "/{{{{ ds }}}}")
            FileSensor(
                "missing", filepath="/nowhere/{{{{ ds }}}}", timeout=0.5, soft_fail=True,
                poke_interval=0.1,
            )
            TimeDeltaSensor("settled", delta=0)
            TimeDeltaSensor("later", delta="3650d", timeout=0.5, poke_interval=0.1)
        """,
    )
    run, tasks = run_once(store, dags_dir, "sensing")
    states = {t: row.state for t, row in tasks.items()}
    assert states == {
        "third_time": "success",
        "never": "failed",
        "raises": "failed",
        "there": "success",
        "missing": "skipped",
        "settled": "success",
        "later": "failed",
    }
    assert run.state == "failed"
    rows = ti_rows(store, run.id)
    found = outcomes(store, run.id)
    assert found["third_time"] == [(1, "rescheduled"), (1, "rescheduled"), (1, "success")]
    assert rows["third_time"]["return_value"] == '{"pokes": 3}'
    assert (rows["third_time"]["try_number"], rows["third_time"]["pokes"]) == (1, 2)
    assert found["never"] == [(1, "timed_out")]
    assert rows["never"]["duration"] >= 0.5
    assert rows["never"]["last_error"] == "sensor timed out after 0.5 s"
    assert found["raises"] == [(1, "failed"), (2, "failed")]
    assert rows["raises"]["last_error"] == "RuntimeError: no access"
    assert found["there"] == [(1, "success")]
    assert found["missing"][-1] == (1, "timed_out")
    assert rows["missing"]["pokes"] >= 2
    assert found["later"][-1] == (1, "timed_out")
    assert rows["later"]["last_error"] == "sensor timed out after 0.5 s"


EXTERNAL = """
from dagrun import DAG, task
from dagrun.runtime.sensors import ExternalTaskSensor

with DAG("upstream", schedule="@daily", start_date="2026-01-01"):
    @task
    def load():
        {load}

    load()

with DAG("downstream", schedule="@daily", start_date="2026-01-01"):
    ExternalTaskSensor("whole_run", external_dag_id="upstream", retries=2, poke_interval=0.1)
    ExternalTaskSensor(
        "one_task", external_dag_id="upstream", external_task_id="load", retries=2
    )
    ExternalTaskSensor(
        "no_run", external_dag_id="elsewhere", timeout=0.5, soft_fail=True, poke_interval=0.1
    )
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("load", "upstream", "sensed", "attempt"),
    [("return 1", "success", "success", "success"), ("1 / 0", "failed", "failed", "non_retryable")],
)
def test_an_external_task_sensor_follows_the_other_dags_run(
    store: Store, dags_dir: Path, load, upstream, sensed, attempt
):
    write_dag(dags_dir, "external.py", EXTERNAL.format(load=load))
    first, _ = run_once(store, dags_dir, "upstream", run_id="up")
    assert first.state == upstream
    run, tasks = run_once(store, dags_dir, "downstream", run_id="down")
    assert run.logical_date == first.logical_date
    assert {t: row.state for t, row in tasks.items()} == {
        "whole_run": sensed,
        "one_task": sensed,
        "no_run": "skipped",
    }
    found = outcomes(store, run.id)
    assert found["whole_run"] == found["one_task"] == [(1, attempt)], "never retried"
    if sensed == "failed":
        assert tasks["one_task"].last_error == (
            "NonRetryableError: task 'load' of DAG 'upstream' at 2026-01-01T00:00:00+00:00 "
            "is failed"
        )


NATIVE_OPTIONS = """
from dagrun import DAG, BashTask, TaskGroup, task
from dagrun.sensors import ExternalTaskSensor

with DAG("upstream", schedule="@daily", start_date="2026-01-01"):
    @task
    def load():
        return 1

    load()
    with TaskGroup("grp"):
        BashTask("a", command="true") >> BashTask("b", command="true")
    BashTask("skipped", command="exit 99", skip_on_exit_code=99)

with DAG("downstream", schedule="@daily", start_date="2026-01-01"):
    fast = {"poke_interval": 0.1, "timeout": 30}
    up = {"external_dag_id": "upstream"}
    ExternalTaskSensor("tasks", external_task_ids=["load", "grp.a"], **up, **fast)
    ExternalTaskSensor("group", external_task_group_id="grp", **up, **fast)
    ExternalTaskSensor(
        "skip", external_task_id="skipped", skipped_states=["skipped"], **up, **fast
    )
    ExternalTaskSensor(
        "allowed", external_task_id="skipped", allowed_states=["skipped"], **up, **fast
    )
    ExternalTaskSensor(
        "yesterday",
        external_task_id="load",
        execution_delta="1d",
        timeout=0.3,
        poke_interval=0.1,
        soft_fail=True,
        **up,
    )
    ExternalTaskSensor(
        "unknown", external_task_group_id="nope", check_existence=True, retries=2, **up
    )
"""


@pytest.mark.slow
def test_an_external_task_sensor_watches_tasks_groups_and_chosen_states(
    store: Store, dags_dir: Path
):
    write_dag(dags_dir, "options.py", NATIVE_OPTIONS)
    first, _ = run_once(store, dags_dir, "upstream", run_id="up")
    assert first.state == "success"
    run, tasks = run_once(store, dags_dir, "downstream", run_id="down")
    assert {t: row.state for t, row in tasks.items()} == {
        "tasks": "success",
        "group": "success",
        "skip": "skipped",
        "allowed": "success",
        "yesterday": "skipped",
        "unknown": "failed",
    }
    found = outcomes(store, run.id)
    assert found["yesterday"][-1] == (1, "timed_out"), "no run the day before: it waits"
    assert found["unknown"] == [(1, "non_retryable")]
    assert tasks["unknown"].last_error == (
        "NonRetryableError: the external task group 'nope' of DAG 'upstream' does not exist"
    )
    assert tasks["skip"].last_error.startswith("SkipTask: task 'skipped' of DAG 'upstream'")
