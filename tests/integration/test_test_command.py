"""``dagrun test`` and ``tasks test`` decide what ``dagrun run`` decides (DESIGN 7.2), as a
user runs them: the DAGs of the suite that branch, short-circuit, map, sense, skip, join by
trigger rules and bracket work with setups and teardowns, each run by ``test`` and by
``run`` for the same date on SQLite and PostgreSQL, every task's state compared; and
``test`` writes no run history unless ``--record``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.airflow.test_commands import PATHS, days_ago
from tests.airflow.test_sensors import SUBCLASSES
from tests.authoring.test_mapping import BRANCHING, CHAINED, FAILING_INDEX, FAN_OUT
from tests.helpers import db_rows, run_cli, write_dag
from tests.runtime.test_worker_setup_teardown import CLUSTER, REACH

pytestmark = pytest.mark.slow

DATE = "2026-01-05"


@dataclass(frozen=True)
class Case:
    """A DAG file of the suite: its DAG, the source given a fresh folder for what its tasks
    write (so ``test`` and ``run`` each start from nothing), the date to run, and a task fed
    by a mapped task, whose value ``tasks test`` must give as the run does."""

    dag_id: str
    source: Callable[[Path], str]
    date: str = DATE
    fed_by_mapping: str | None = None


def _cluster(folder: Path) -> str:
    return CLUSTER.format(
        log=str(folder / "ran.log"), fixed=str(folder), fail_run=False, teardown_fails=False
    )


CASES = {
    "airflow-paths": Case("paths", lambda _: PATHS, days_ago(1), fed_by_mapping="summed"),
    "branch-after-mapping": Case("branchy", lambda _: BRANCHING.format(gate="False")),
    "truthy-short-circuit": Case("branchy", lambda _: BRANCHING.format(gate="'yes'")),
    "short-circuit-reach-all": Case("reach", lambda _: REACH.format(reach=True)),
    "short-circuit-reach-direct": Case("reach", lambda _: REACH.format(reach=False)),
    "mapping": Case("fan", lambda _: FAN_OUT, fed_by_mapping="collect"),
    "mapping-over-mapping": Case("chained", lambda _: CHAINED, fed_by_mapping="total"),
    "failed-index": Case(
        "divide",
        lambda folder: FAILING_INDEX.format(fixed=str(folder / "fixed")),
        fed_by_mapping="total",
    ),
    "sensors": Case("sensing", lambda folder: SUBCLASSES.format(folder=str(folder))),
    "setup-teardown": Case("cluster", _cluster),
}


@pytest.fixture
def env(db_url: str, cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "DAGRUN_DB_URL": db_url}


def write_case(case: Case, dags_dir: Path, folder: Path) -> None:
    folder.mkdir()
    write_dag(dags_dir, f"{case.dag_id}.py", case.source(folder))


def states_shown(output: str) -> dict[tuple[str, int], str]:
    """The table ``dagrun test`` ends with: (task, map index) -> state."""
    lines = [line.split() for line in output.splitlines()]
    rows = lines[lines.index(["task_id", "index", "state"]) + 1 :]
    return {(r[0], int(r[1]) if len(r) == 3 else -1): r[-1] for r in rows}


def run_rows(env: dict[str, str], dag_id: str, run_id: str) -> dict[tuple[str, int], tuple]:
    """(task, map index) -> (state, return value) of one run, read from the store."""
    rows = db_rows(
        env,
        "SELECT t.task_id, t.map_index, t.state, t.return_value FROM task_instance t "
        f"JOIN dag_run r ON r.id = t.run_pk WHERE r.dag_id = '{dag_id}' AND r.run_id = '{run_id}'",
    )
    return {(task, index): (state, value) for task, index, state, value in rows}


def history(env: dict[str, str]) -> dict[str, int]:
    """Rows of run history in the store: runs, task instances, attempts."""
    tables = ("dag_run", "task_instance", "task_attempt")
    return {t: db_rows(env, f"SELECT COUNT(*) FROM {t}")[0][0] for t in tables}


def the_run_id(env: dict[str, str], dag_id: str) -> str:
    (found,) = db_rows(env, f"SELECT run_id FROM dag_run WHERE dag_id = '{dag_id}'")
    return found[0]


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_test_and_run_decide_every_task_alike(case, env, dags_dir, tmp_path):
    write_case(case, dags_dir, tmp_path / "for-test")
    tested = run_cli("test", case.dag_id, case.date, env=env)
    assert history(env) == dict.fromkeys(("dag_run", "task_instance", "task_attempt"), 0)

    write_case(case, dags_dir, tmp_path / "for-run")
    ran = run_cli("run", case.dag_id, "--date", case.date, env=env)
    found = run_rows(env, case.dag_id, the_run_id(env, case.dag_id))
    assert found, ran.stdout + ran.stderr
    assert states_shown(tested.stdout) == {key: state for key, (state, _) in found.items()}, (
        tested.stdout + tested.stderr
    )
    assert tested.returncode == ran.returncode, "the run's end: success, or failed"


@pytest.mark.parametrize(
    "case", [c for c in CASES.values() if c.fed_by_mapping], ids=lambda c: c.dag_id
)
def test_tasks_test_hands_a_mapped_tasks_whole_list_downstream(case, env, dags_dir, tmp_path):
    """``tasks test`` of a task fed by a mapped task runs what it needs first, one instance
    per element, and the task gets the whole list: its state and value are the run's."""
    write_case(case, dags_dir, tmp_path / "for-run")
    run_cli("run", case.dag_id, "--date", case.date, env=env)
    state, value = run_rows(env, case.dag_id, the_run_id(env, case.dag_id))[
        (case.fed_by_mapping, -1)
    ]

    write_case(case, dags_dir, tmp_path / "for-test")
    tested = run_cli("tasks", "test", case.dag_id, case.fed_by_mapping, case.date, env=env)
    assert re.search(rf"^{case.fed_by_mapping}: {state}\b", tested.stderr, re.M), tested.stderr
    shown = re.findall(r"^returned (.*)$", tested.stdout, re.M)
    assert shown == ([value] if value is not None else []), tested.stdout
    assert tested.returncode == (0 if state in ("success", "skipped") else 1)


def test_tasks_test_skips_a_branch_not_taken_without_running_it(env, dags_dir, tmp_path):
    """``branchy`` picks ``big``: ``small`` and what follows it are skipped, as in a run, and
    their functions are never called; the chosen one runs after its upstream."""
    write_dag(dags_dir, "branchy.py", BRANCHING.format(gate="False"))
    small = run_cli("tasks", "test", "branchy", "after_small", DATE, env=env)
    assert small.returncode == 0, small.stderr
    assert "after_small: skipped, not run" in small.stderr
    assert "--- small" not in small.stderr and "--- after_small" not in small.stderr
    assert "--- pick: success" in small.stderr, "the branch ran to decide"
    big = run_cli("tasks", "test", "branchy", "big", DATE, env=env)
    assert big.returncode == 0 and 'returned "big"' in big.stdout, big.stderr
    starts = re.findall(r"^--- double\[(\d+)\]$", big.stderr, re.M)
    assert starts == ["0", "1", "2"], "one instance per element"
    assert history(env)["dag_run"] == 0


def test_test_records_a_run_only_with_record(env, dags_dir):
    """Without ``--record`` nothing of the run reaches the store; with it the run is
    recorded as ``dagrun run`` records one, a new run (``test__DATE``, then ``.2``) each
    time, with the states ``test`` decided."""
    write_dag(dags_dir, "fan.py", FAN_OUT)
    plain = run_cli("test", "fan", DATE, env=env)
    assert plain.returncode == 0, plain.stderr
    assert history(env) == dict.fromkeys(("dag_run", "task_instance", "task_attempt"), 0)

    recorded = run_cli("test", "fan", DATE, "--record", env=env)
    assert recorded.returncode == 0, recorded.stderr
    again = run_cli("test", "fan", DATE, "--record", env=env)
    assert again.returncode == 0, again.stderr
    key = f"test__{DATE}T00:00:00+00:00"
    ids = {r[0] for r in db_rows(env, "SELECT run_id FROM dag_run WHERE dag_id = 'fan'")}
    assert ids == {key, f"{key}.2"}
    found = history(env)
    each = 1 + 3 + 6 + 1  # make, add per element, times per pair, collect
    assert found["task_instance"] == found["task_attempt"] == 2 * each
    states = {k: state for k, (state, _) in run_rows(env, "fan", key).items()}
    assert states == states_shown(plain.stdout)
    assert run_rows(env, "fan", key)[("collect", -1)][1] == (
        '{"values": [103, 101, 102], "more": [10, 20, 30, 20, 40, 60]}'
    )
