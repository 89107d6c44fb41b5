"""The pages after an operator's hand changes, on both engines through the real transitions:
try numbers after a clear, and a state marked by hand (no duration, no bar of its own, never
on the critical path)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dagrun.states import TaskState
from dagrun.store import Store, operator_actions, run_reads, runs
from dagrun.webapp.gantt import read_gantt
from tests.webapp.test_webapp import Elements, World, build_world, call, run_path, shop_failures
from tests.webapp.test_webapp import work_off as work

LAST_DAY = 2  # alpha_report fails for good on the third day; notify is upstream_failed


def task_row(page: str, task_id: str) -> list[str]:
    """The cells of a task's row on the run page, as text."""
    row = re.search(rf'<tr id="task-{re.escape(task_id)}".*?</tr>', page, re.S)
    assert row is not None, task_id
    return [
        re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td>(.*?)</td>", row[0], re.S)
    ]


def resume(world: World) -> None:
    """Start the reopened run and work it off (alpha_report fails again on its day)."""
    with world.store.write() as conn:
        runs.admit_and_start(conn, world.spec, world.store.now(conn))
    work(world.store, world.spec, world.logs, shop_failures)


def run_pk(world: World) -> int:
    with world.store.read() as conn:
        return run_reads.run_by_id(conn, "shop", world.run_ids[LAST_DAY]).id


@pytest.mark.slow  # a DAG folder parsed and three runs worked off: near 1.8 s on PostgreSQL
def test_a_cleared_task_counts_its_tries_on_and_shows_try_2_of_2(store: Store, tmp_path: Path):
    """After a clear the run page read "try 2 of 1": tries count on across clears, and the
    clear adds the task's tries to its most, as Airflow does."""
    world = build_world(store, tmp_path)
    assert task_row(call(world.app, run_path(world, LAST_DAY)).text, "alpha_report")[2] == (
        "1 of 1"
    )
    with store.write() as conn:
        selection = {run_pk(world): {"alpha_report", "notify"}}
        operator_actions.clear_runs(conn, world.spec, selection, store.now(conn))
    resume(world)
    page = call(world.app, run_path(world, LAST_DAY)).text
    state, tries = task_row(page, "alpha_report")[1:3]
    assert (state, tries) == ("failed", "2 of 2")
    assert "try 1: failed" in page and "try 2: failed" in page
    api = call(world.app, f"/api{run_path(world, LAST_DAY)}").json()
    [alpha] = [t for t in api["tasks"] if t["task_id"] == "alpha_report"]
    assert (alpha["try_number"], alpha["max_tries"]) == (2, 2)
    gantt = read_gantt(store, "shop", world.run_ids[LAST_DAY])
    [row] = [r for r in gantt.rows if r.label == "alpha_report"]
    assert "try 2 of 2" in row.bars[-1].title


@pytest.mark.slow
def test_a_task_marked_success_by_hand_has_no_duration_no_bar_and_no_critical_path(
    store: Store, tmp_path: Path
):
    """alpha_report failed in 1.5 s; marked success by hand, the run page showed that try's
    duration and the Gantt a bar from its start to the mark, on the critical path."""
    world = build_world(store, tmp_path)
    with store.write() as conn:
        reason = "marked success by hand"
        operator_actions.mark_tasks(
            conn,
            world.spec,
            run_pk(world),
            {"alpha_report"},
            TaskState.SUCCESS,
            reason,
            store.now(conn),
        )
    resume(world)
    page = call(world.app, run_path(world, LAST_DAY)).text
    cells = task_row(page, "alpha_report")
    state, started, duration, attempts = cells[1], cells[3], cells[5], cells[6]
    assert (state, started, duration) == ("success", "-", "-")
    assert attempts == "try 1: failed", "its try keeps its own record"
    assert task_row(page, "notify")[5] == "1.50s", "what ran after it shows its time"

    gantt = read_gantt(store, "shop", world.run_ids[LAST_DAY])
    [row] = [r for r in gantt.rows if r.label == "alpha_report"]
    assert [b.earlier for b in row.bars] == [True], "only its failed try has a bar"
    assert row.mark is not None and row.mark.hand and "by hand" in row.mark.title
    assert gantt.critical == ["notify"], "a state set by hand ran for no time"
    reply = call(world.app, f"{run_path(world, LAST_DAY)}/gantt")
    assert Elements(reply.text).select("rect", "hand")
