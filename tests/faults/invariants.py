"""What every fault test checks after its faults: nothing lost, nothing run twice without a
record of why, every run ended, and no process left behind.

Processes are found by a token in their environment: every process dagrun starts for a
test (worker children, parse children, a BashTask's shell and whatever it runs) inherits
it, whichever process group or session it moved to.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from pathlib import Path

from sqlalchemy import select

from dagrun.store import Store
from dagrun.store.schema import dag_run, task_attempt, task_instance

#: Attempt outcomes that explain a second run of the same task instance.
_EXPLAINED = {"lease_expired", "crashed", "timed_out", "infra_failed", "failed", "released"}


def token_env() -> dict[str, str]:
    """An environment variable that marks every process of one test."""
    return {"DAGRUN_TEST_TOKEN": uuid.uuid4().hex}


def leftovers(env: dict[str, str]) -> list[int]:
    """Pids of live processes carrying the test's token (zombies excluded)."""
    marker = f"DAGRUN_TEST_TOKEN={env['DAGRUN_TEST_TOKEN']}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ.split(b"\0") and state != "Z":
            found.append(int(entry))
    return found


def runs_ended(store: Store) -> dict[str, int]:
    """Run states (every run should have ended: success or failed)."""
    with store.read() as conn:
        return dict(Counter(conn.execute(select(dag_run.c.state)).scalars()))


def task_states(store: Store) -> dict[str, int]:
    with store.read() as conn:
        return dict(Counter(conn.execute(select(task_instance.c.state)).scalars()))


def attempt_outcomes(store: Store) -> dict[tuple[int, str], list[str | None]]:
    """(run, task) -> the outcomes of its attempts, in order."""
    found: dict[tuple[int, str], list[str | None]] = {}
    with store.read() as conn:
        rows = conn.execute(
            select(task_attempt.c.run_pk, task_attempt.c.task_id, task_attempt.c.outcome).order_by(
                task_attempt.c.id
            )
        )
        for run_pk, task_id, outcome in rows:
            found.setdefault((run_pk, task_id), []).append(outcome)
    return found


def check_effects(store: Store, effects: Path) -> Counter:
    """Every successful task's side effect happened once per attempt at most, and happened
    more than once only after an attempt whose outcome explains it (a lost lease, a crash).
    Each attempt of the fault DAGs writes ``<run_id>/<task_id>`` as its effect; returns how
    often each was written."""
    written = Counter(effects.read_text().split()) if effects.exists() else Counter()
    outcomes = attempt_outcomes(store)
    with store.read() as conn:
        rows = conn.execute(
            select(dag_run.c.run_id, task_instance.c.run_pk, task_instance.c.task_id)
            .add_columns(task_instance.c.state)
            .join(dag_run, dag_run.c.id == task_instance.c.run_pk)
        ).all()
    for run_id, run_pk, task_id, state in rows:
        tries = outcomes.get((run_pk, task_id), [])
        times = written[f"{run_id}/{task_id}"]
        assert None not in tries, f"{run_id}/{task_id} has an attempt with no outcome: {tries}"
        assert tries.count("success") <= 1, f"{run_id}/{task_id} succeeded twice: {tries}"
        assert times <= len(tries), f"{run_id}/{task_id} ran {times}x in {tries}"
        if times > 1:
            explained = sum(1 for o in tries if o in _EXPLAINED)
            assert times <= explained + 1, f"{run_id}/{task_id} ran {times}x: {tries}"
        if state == "success":
            assert times >= 1 and tries[-1] == "success", f"{run_id}/{task_id}: {tries}"
    return written
