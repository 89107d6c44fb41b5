"""Dynamic task mapping, branching and short-circuits end to end in-process (attempts in real
child processes), on SQLite and PostgreSQL: instances made when the upstream value is
known, results in index order, empty and bad lists, a failed index, clearing one index, and
the choices of branch and short-circuit tasks skipping through the trigger rules."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from dagrun.authoring import mapping
from dagrun.runtime.driver import RunDriver
from dagrun.runtime.worker import WorkerOptions
from dagrun.store import dag_reads, operator_actions
from dagrun.store.schema import task_attempt, task_instance
from tests.helpers import run_once, write_dag


def instances(store) -> dict[tuple[str, int], tuple]:
    """(task_id, map_index) -> (state, return value, try number, error)."""
    with store.read() as conn:
        rows = conn.execute(
            select(
                task_instance.c.task_id,
                task_instance.c.map_index,
                task_instance.c.state,
                task_instance.c.return_value,
                task_instance.c.try_number,
                task_instance.c.last_error,
            )
        ).all()
    return {(r[0], r[1]): tuple(r[2:]) for r in rows}


def states(store) -> dict[tuple[str, int], str]:
    return {key: value[0] for key, value in instances(store).items()}


FAN_OUT = """
from dagrun import DAG, task

with DAG("fan", schedule=None):
    @task
    def make():
        return [3, 1, 2]

    @task
    def add(x, y):
        return x + y

    @task
    def times(x, factor):
        return x * factor

    @task
    def collect(values, more):
        return {"values": values, "more": more}

    collect(add.partial(y=100).expand(x=make()), times.expand(x=[1, 2], factor=[10, 20, 30]))
"""


def test_a_mapped_task_runs_once_per_element_and_downstream_gets_the_list(store, dags_dir):
    write_dag(dags_dir, "fan.py", FAN_OUT)
    run, _ = run_once(store, dags_dir, "fan")
    assert run.state == "success"
    got = instances(store)
    assert [got["add", i][:2] for i in range(3)] == [("success", str(v)) for v in (103, 101, 102)]
    assert ("add", -1) not in got, "the unexpanded instance became index 0"
    products = [got["times", i][1] for i in range(6)]
    assert products == ["10", "20", "30", "20", "40", "60"], "product order, last list fastest"
    assert got["collect", -1][1] == (
        '{"values": [103, 101, 102], "more": [10, 20, 30, 20, 40, 60]}'
    )
    with store.read() as conn:
        per_instance = conn.execute(
            select(task_attempt.c.ti_id).where(task_attempt.c.task_id == "add")
        ).all()
    assert len(per_instance) == len({r.ti_id for r in per_instance}) == 3


CHAINED = """
from dagrun import DAG, task

with DAG("chained", schedule=None):
    @task
    def double(num):
        return num * 2

    @task
    def add_one(num):
        return num + 1

    @task
    def total(values):
        return sum(values)

    total(add_one.expand(num=double.expand(num=[1, 2, 3])))
"""


def test_a_task_maps_over_a_mapped_tasks_results(store, dags_dir):
    """One instance per upstream index, each given that index's value (Airflow's meaning):
    an index's own value is one element, not a list to map over."""
    write_dag(dags_dir, "chained.py", CHAINED)
    run, _ = run_once(store, dags_dir, "chained")
    got = instances(store)
    assert run.state == "success", got
    assert [got["add_one", i][:2] for i in range(3)] == [("success", v) for v in ("3", "5", "7")]
    assert got["total", -1][:2] == ("success", "15")


def test_an_empty_list_skips_the_mapped_task(store, dags_dir):
    write_dag(
        dags_dir,
        "empty.py",
        """
        from dagrun import DAG, task

        with DAG("empty", schedule=None):
            @task
            def make():
                return []

            @task
            def each(x):
                return x

            @task(trigger_rule="all_done")
            def after(values):
                return values

            after(each.expand(x=make()))
        """,
    )
    run, _ = run_once(store, dags_dir, "empty")
    assert run.state == "success"
    assert states(store) == {
        ("make", -1): "success",
        ("each", -1): "skipped",
        ("after", -1): "success",
    }


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        ("{'a': 1}", "its return value must be a list to map over, not dict"),
        (
            "list(range(5))",
            "its return value has 5 elements to map over, more than DAGRUN_MAX_MAP_LENGTH (4)",
        ),
    ],
)
def test_a_value_that_cannot_be_mapped_fails_the_task_that_made_it(
    store, dags_dir, monkeypatch, returned, error
):
    monkeypatch.setattr(mapping, "MAX_MAP_LENGTH", 4)  # the children are forked from here
    write_dag(
        dags_dir,
        "bad.py",
        f"""
        from dagrun import DAG, task

        with DAG("bad", schedule=None):
            @task(retries=3)
            def make():
                return {returned}

            @task
            def each(x):
                return x

            each.expand(x=make())
        """,
    )
    run, _ = run_once(store, dags_dir, "bad")
    got = instances(store)
    assert run.state == "failed"
    assert got["make", -1][0] == "failed" and got["make", -1][2] == 1, "no retry: same value"
    assert got["make", -1][3] == f"NonRetryableError: {error}"
    assert got["each", -1][0] == "upstream_failed"


FAILING_INDEX = """
import os
from dagrun import DAG, task

with DAG("divide", schedule=None):
    @task
    def divide(x):
        print("dividing", x)
        if x == 0 and not os.path.exists({fixed!r}):
            raise ZeroDivisionError("x is 0")
        return 10 // max(x, 1)

    @task
    def total(values):
        return sum(values)

    total(divide.expand(x=[5, 0, 2]))
"""


def test_a_failed_index_fails_downstream_and_clearing_it_reruns_only_it(store, dags_dir, tmp_path):
    fixed = tmp_path / "fixed"
    write_dag(dags_dir, "divide.py", FAILING_INDEX.format(fixed=str(fixed)))
    run, _ = run_once(store, dags_dir, "divide")
    assert run.state == "failed"
    assert states(store) == {
        ("divide", 0): "success",
        ("divide", 1): "failed",
        ("divide", 2): "success",
        ("total", -1): "upstream_failed",
    }
    fixed.touch()
    with store.write() as conn:
        spec = dag_reads.get_dag(conn, "divide").spec
        cleared = operator_actions.clear_runs(
            conn, spec, {run.id: {"divide", "total"}}, store.now(conn), map_index=1
        )
    assert cleared == (1, 2), "index 1 of divide, and total (not mapped) whole"
    options = WorkerOptions(concurrency=2, log_dir=tmp_path / "logs")
    RunDriver(store, spec, [run.id], worker_options=options).run()
    got = instances(store)
    assert {key: value[0] for key, value in got.items()} == {
        ("divide", 0): "success",
        ("divide", 1): "success",
        ("divide", 2): "success",
        ("total", -1): "success",
    }
    assert [got["divide", i][2] for i in range(3)] == [1, 2, 1], "only index 1 ran again"
    assert got["total", -1][1] == str(2 + 10 + 5)


BRANCHING = """
from dagrun import DAG, task

with DAG("branchy", schedule=None):
    @task
    def sizes():
        return [1, 20, 3]

    @task
    def double(x):
        return 2 * x

    @task.branch
    def pick(values):
        return "big" if max(values) > 10 else ["small"]

    @task
    def big():
        return "big"

    @task
    def small():
        return "small"

    @task(trigger_rule="none_failed_min_one_success")
    def join():
        return "joined"

    @task
    def after_small():
        return "after"

    @task.short_circuit
    def gate():
        return {gate}

    @task
    def gated():
        return "gated"

    @task(trigger_rule="all_done")
    def gated_later():
        return "later"

    chosen = pick(double.expand(x=sizes()))
    chosen >> [big(), small()]
    big >> join()
    small >> join
    small >> after_small()
    gate() >> gated() >> gated_later()
"""


def test_a_branch_after_a_mapped_fan_out_picks_its_path_and_skips_the_other(store, dags_dir):
    write_dag(dags_dir, "branchy.py", BRANCHING.format(gate="False"))
    run, _ = run_once(store, dags_dir, "branchy")
    assert run.state == "success"
    assert states(store) == {
        ("sizes", -1): "success",
        **{("double", i): "success" for i in range(3)},
        ("pick", -1): "success",
        ("big", -1): "success",
        ("small", -1): "skipped",
        ("join", -1): "success",
        ("after_small", -1): "skipped",
        ("gate", -1): "success",
        ("gated", -1): "skipped",
        ("gated_later", -1): "skipped",  # a falsy short-circuit skips all downstream
    }


def test_a_truthy_short_circuit_lets_downstream_run(store, dags_dir):
    write_dag(dags_dir, "branchy.py", BRANCHING.format(gate="'yes'"))
    run_once(store, dags_dir, "branchy")
    got = states(store)
    assert got["gated", -1] == "success" and got["gated_later", -1] == "success"


def test_a_branch_choosing_a_task_that_is_not_downstream_fails_with_the_reason(store, dags_dir):
    write_dag(
        dags_dir,
        "lost.py",
        """
        from dagrun import DAG, task

        with DAG("lost", schedule=None):
            @task.branch
            def pick():
                return "nowhere"

            @task
            def here():
                pass

            pick() >> here()
        """,
    )
    run, _ = run_once(store, dags_dir, "lost")
    got = instances(store)
    assert run.state == "failed"
    assert got["pick", -1][3] == (
        "NonRetryableError: branch chose 'nowhere', which is not a direct downstream task "
        "(those are: here)"
    )
    assert got["here", -1][0] == "upstream_failed"


def test_a_bash_task_maps_over_commands_and_environments(store, dags_dir, tmp_path):
    out = tmp_path / "out"
    write_dag(
        dags_dir,
        "shells.py",
        f"""
        from dagrun import DAG, BashTask, task

        with DAG("shells", schedule=None):
            @task
            def names():
                return ["a", "b"]

            BashTask.partial("echo", env={{"KIND": "x"}}).expand(
                command=["echo $KIND-one >> {out}", "echo $KIND-two >> {out}"]
            )
            each = BashTask.partial("greet", command="echo $WHO-$KIND >> {out}")
            each.expand(env=[{{"WHO": "ann", "KIND": "y"}}, {{"WHO": "bob"}}])
            up = names()
            BashTask.partial("upstream", command="echo up >> {out}").expand(command=up)
        """,
    )
    run, _ = run_once(store, dags_dir, "shells")
    got = states(store)
    assert run.state == "failed", "names() returns ['a', 'b']: commands a and b do not exist"
    assert [got["echo", i] for i in range(2)] == ["success", "success"]
    assert [got["greet", i] for i in range(2)] == ["success", "success"]
    assert [got["upstream", i] for i in range(2)] == ["failed", "failed"]
    assert sorted(out.read_text().split()) == ["ann-y", "bob-", "x-one", "x-two"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            'BashTask.partial("t").expand(cmd=["a"])',
            "expand: BashTask has no argument 'cmd' to map (it maps command or env)",
        ),
        ('BashTask.partial("t").expand(command=[""])', "expand: command[0] must be a command"),
        ('BashTask.partial("t").expand(command="ls")', "expand: command must be a list"),
        ("f.expand(x=3)", "expand: x must be a list to map over, not int"),
        ("f.expand(y=[1])", "bad arguments"),
        ("g.expand(x=[1])", "a branch task cannot be mapped"),
    ],
)
def test_bad_mapping_is_an_import_error(dags_dir, call, message):
    from dagrun.parsing.loader import load_file

    path = write_dag(
        dags_dir,
        "bad.py",
        f"""
        from dagrun import DAG, BashTask, task

        @task
        def f(x):
            return x

        @task.branch
        def g(x):
            return None

        with DAG("bad", schedule=None):
            {call}
        """,
    )
    specs, error = load_file(str(path))
    assert specs == [] and error is not None
    assert message in str(error), str(error)


def test_the_web_pages_show_each_index_and_its_log(sqlite_store, dags_dir, tmp_path):
    from dagrun.webapp import WebApp, log_url
    from tests.webapp.test_webapp import call

    write_dag(dags_dir, "fan.py", FAN_OUT)
    run, _ = run_once(sqlite_store, dags_dir, "fan", log_dir=tmp_path / "logs")
    app = WebApp(sqlite_store, logs_root=tmp_path / "logs")
    shown = call(app, f"/api/dags/fan/runs/{run.run_id}").json()["tasks"]
    assert [(t["task_id"], t["map_index"]) for t in shown if t["task_id"] == "add"] == [
        ("add", 0),
        ("add", 1),
        ("add", 2),
    ]
    [second] = [t for t in shown if t["task_id"] == "add" and t["map_index"] == 1]
    [attempt] = second["attempts"]
    assert attempt["log_url"] == log_url("fan", run.run_id, "add", 1, 1)
    page = call(app, attempt["log_url"])
    assert page.status == 200 and "of fan.add[1] for" in page.text
    ambiguous = call(app, log_url("fan", run.run_id, "add", 1))
    assert ambiguous.status == 400 and "pick one with --map-index" in ambiguous.text
    assert call(app, f"/dags/fan/runs/{run.run_id}").status == 200
