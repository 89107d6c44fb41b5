"""One attempt in-process (dagrun.runtime.runner.execute): what a worker child does thousands
of times in a row, so nothing may leak from one attempt into the next."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import multiprocessing
import os
import shutil
import sys
import types
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dagrun.parsing.loader import isolated, module_name
from dagrun.runtime.requests import AttemptRequest, AttemptResult
from dagrun.runtime.runner import DagCache, execute
from dagrun.states import AttemptOutcome
from dagrun.store import logfiles
from tests.helpers import attempt_request, write_dag

DAY = datetime(2026, 1, 5, tzinfo=UTC)


def request(
    path: Path, task_id: str, log_dir: Path | None, dag_id: str = "rt", **fields
) -> AttemptRequest:
    return attempt_request(path, task_id, log_dir, dag_id, **fields)


def log_text(result: AttemptResult) -> str:
    """The attempt's own range of its segment."""
    return logfiles.read(result.log.path, result.log.offset, result.log.length)[0]


def process_state() -> dict:
    """What an attempt borrows and must give back."""
    root = logging.getLogger()
    return {
        "fds": sorted(fd for fd in os.listdir("/proc/self/fd") if _is_open(int(fd))),
        "fd1": (os.fstat(1).st_dev, os.fstat(1).st_ino),
        "fd2": (os.fstat(2).st_dev, os.fstat(2).st_ino),
        "streams": (sys.stdout, sys.stderr),
        "handlers": list(root.handlers),
        "level": root.level,
        "path": list(sys.path),
    }


def _is_open(fd: int) -> bool:
    """False for the directory fd that listing /proc/self/fd itself used (closed by now)."""
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def state_besides_segment(log_dir: Path) -> dict:
    """The process state, less the one file a worker child keeps open on purpose: its log
    segment (one fd however many attempts ran)."""
    state = process_state()
    state["fds"].remove(str(logfiles.segment(str(log_dir)).fd))
    return state


CHATTY = """
    import logging, os, subprocess, sys
    from dagrun import DAG, task

    with DAG("rt", schedule=None):
        @task
        def chatty(try_number):
            print(f"printed {try_number}")
            logging.getLogger("user").info("logged %s", try_number)
            os.write(1, f"fd1 {try_number}\\n".encode())
            sys.stderr.write(f"stderr {try_number}\\n")
            if try_number % 50 == 0:
                subprocess.run(["echo", f"shell {try_number}"], check=True)

        chatty()
"""


def test_many_attempts_give_back_fds_handlers_level_and_streams(dags_dir, tmp_path):
    path = write_dag(dags_dir, "chatty.py", CHATTY)
    cache = DagCache()
    logs = tmp_path / "logs"
    before = process_state()
    results = {}
    for n in range(1, 301):
        results[n] = execute(request(path, "chatty", logs, try_number=n), cache)
        assert results[n].outcome == AttemptOutcome.SUCCESS, results[n].error
    assert state_besides_segment(logs) == before
    ranges = [results[n].log for n in range(1, 301)]
    assert len({r.path for r in ranges}) == 1  # one segment, attempts one after the other
    assert all(a.offset + a.length == b.offset for a, b in itertools.pairwise(ranges))
    for n in (1, 50, 99, 100, 300):
        text = log_text(results[n])
        for kind in ("printed", "logged", "fd1", "stderr"):
            assert text.count(f"{kind} ") == 1 and f"{kind} {n}\n" in text, (kind, text)
        assert f"attempt {n} of rt.chatty" in text and "INFO dagrun.task: success" in text
        assert ("shell " in text) == (n % 50 == 0)


def test_a_log_folder_removed_between_attempts_is_made_again(dags_dir, tmp_path):
    path = write_dag(dags_dir, "chatty.py", CHATTY)
    cache = DagCache()
    folder = tmp_path / "logs"
    for n in (1, 2):
        result = execute(request(path, "chatty", folder, try_number=n), cache)
        assert f"printed {n}" in log_text(result)
        shutil.rmtree(folder)


def test_a_task_that_closes_stdout_does_not_break_the_next_attempt(dags_dir, tmp_path):
    path = write_dag(
        dags_dir,
        "closer.py",
        """
        import sys
        from dagrun import DAG, task

        with DAG("rt", schedule=None):
            @task
            def closer(try_number):
                print(f"printed {try_number}")
                if try_number == 1:
                    sys.stdout.close()

            closer()
        """,
    )
    cache = DagCache()
    before = process_state()
    with contextlib.suppress(ValueError):  # its own success line cannot be written
        execute(request(path, "closer", tmp_path, try_number=1), cache)
    assert state_besides_segment(tmp_path) == before
    result = execute(request(path, "closer", tmp_path, try_number=2), cache)
    assert result.outcome == AttemptOutcome.SUCCESS
    assert "printed 2" in log_text(result) and "printed 1" not in log_text(result)


def test_context_names_and_params_are_fresh_for_every_attempt(dags_dir, tmp_path):
    path = write_dag(
        dags_dir,
        "names.py",
        """
        from dagrun import DAG, task

        with DAG("rt", schedule=None, params={"team": "a"}):
            @task
            def up():
                return 1

            @task(params={"day": "{{ ds }}"})
            def wants(value, ds, *, try_number, fence_token=0, **rest):
                return [value, ds, try_number, fence_token, sorted(rest), rest["params"]]

            @task
            def plain(params):
                return params

            wants(up()); plain()

        with DAG("bare", schedule=None):
            @task
            def conf(params, ds_nodash):
                return [params, ds_nodash]

            conf()
        """,
    )
    cache = DagCache()
    for n, day in ((1, DAY), (2, DAY + timedelta(days=3))):
        fields = {"try_number": n, "fence_token": 10 + n, "logical_date": day}
        got = execute(request(path, "wants", None, inputs={"up": 40 + n}, **fields), cache)
        value, ds, try_number, fence, rest, params = json.loads(got.return_value)
        assert (value, ds, try_number, fence) == (40 + n, f"{day:%Y-%m-%d}", n, 10 + n)
        assert rest == [
            "conf",
            "conn",
            "ctx",
            "dag_id",
            "data_interval_end",
            "data_interval_start",
            "ds_nodash",
            "idempotency_key",
            "logical_date",
            "macros",
            "params",
            "run_id",
            "task_id",
            "ts",
            "ts_nodash",
            "var",
        ]
        assert params == {"team": "a", "day": f"{day:%Y-%m-%d}"}
        got = execute(request(path, "plain", None, conf={"n": n}), cache)
        assert json.loads(got.return_value) == {"team": "a", "n": n}
        bare = request(path, "conf", None, "bare", conf={"n": n}, logical_date=day)
        got = execute(bare, cache)
        assert json.loads(got.return_value) == [{"n": n}, f"{day:%Y%m%d}"]


PARAMS_DAG = """
from dagrun import DAG, BashTask, Param, task

with DAG("rt", schedule=None, params={"n": Param(5, type="integer", minimum=1), "region": "EU"}):
    @task
    def show(params, conf):
        return [params, conf]

    @task(params={"where": "{{ conf.x }}-{{ params.region }}"})
    def own(params):
        return params["where"]

    show(); own()
    BashTask("echo", command="echo n={{ params.n }} x={{ conf.x }} region=$REGION",
             env={"REGION": "{{ params.region }}"})
"""


def test_a_task_receives_params_resolved_against_the_conf_and_the_raw_conf(dags_dir):
    path = write_dag(dags_dir, "params.py", PARAMS_DAG)
    cache = DagCache()
    got = execute(request(path, "show", None, conf={"n": 3, "x": "y"}), cache)
    assert json.loads(got.return_value) == [
        {"n": 3, "region": "EU", "x": "y"},
        {"n": 3, "x": "y"},
    ]
    got = execute(request(path, "show", None), cache)
    assert json.loads(got.return_value) == [{"n": 5, "region": "EU"}, {}]
    got = execute(request(path, "own", None, conf={"x": "y"}), cache)
    assert json.loads(got.return_value) == "y-EU"


def test_a_bash_command_renders_params_and_conf(dags_dir, tmp_path):
    path = write_dag(dags_dir, "params.py", PARAMS_DAG)
    result = execute(request(path, "echo", tmp_path, conf={"x": "y", "region": "US"}), DagCache())
    assert result.outcome == AttemptOutcome.SUCCESS
    assert "\nn=5 x=y region=US\n" in log_text(result)


def test_a_conf_that_breaks_a_param_fails_the_attempt_naming_it(dags_dir):
    path = write_dag(dags_dir, "params.py", PARAMS_DAG)
    result = execute(request(path, "show", None, conf={"n": -3}), DagCache())
    assert result.outcome == AttemptOutcome.FAILED
    assert result.error == "ParamError: param 'n': -3 is less than the minimum of 1"


def test_a_helper_imported_by_a_task_is_forgotten_but_a_library_stays(
    dags_dir, tmp_path, monkeypatch
):
    helper, library = f"helper_{uuid.uuid4().hex[:8]}", f"library_{uuid.uuid4().hex[:8]}"
    write_dag(dags_dir, f"{helper}.py", 'VALUE = "helper"\n')
    write_dag(tmp_path / "site", f"{library}.py", 'VALUE = "library"\n')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    path = write_dag(
        dags_dir,
        "lazy.py",
        f"""
        from dagrun import DAG, task

        with DAG("rt", schedule=None):
            @task
            def lazy():
                import {helper}, {library}

                return {helper}.VALUE + "+" + {library}.VALUE

            lazy()
        """,
    )
    cache = DagCache()
    path_before = list(sys.path)
    try:
        for n in (1, 2):  # the second attempt finds the DAG file cached, imports lazily again
            result = execute(request(path, "lazy", tmp_path, try_number=n), cache)
            assert result.return_value == '"helper+library"'
            assert helper not in sys.modules and module_name(str(path)) not in sys.modules
            assert library in sys.modules
            assert sys.path == path_before
    finally:
        sys.modules.pop(library, None)


@pytest.mark.parametrize("removed", ["newest", "older"])
def test_isolated_forgets_a_helper_when_older_modules_were_removed_too(dags_dir, removed):
    """Removing modules from before the block hides where it began; the folder's helpers
    must still go, and only they."""
    helper, older, newest = (f"{p}_{uuid.uuid4().hex[:8]}" for p in ("helper", "old", "new"))
    write_dag(dags_dir, f"{helper}.py", "VALUE = 1\n")
    sys.modules[older] = types.ModuleType(older)
    sys.modules[newest] = types.ModuleType(newest)
    try:
        with isolated(str(dags_dir / "dag.py")):
            del sys.modules[newest if removed == "newest" else older]
            __import__(helper)
        assert helper not in sys.modules
        assert (older in sys.modules) == (removed == "newest")
    finally:
        sys.modules.pop(older, None)
        sys.modules.pop(newest, None)


def test_isolated_keeps_folder_modules_imported_before_it(dags_dir, monkeypatch):
    before, during = (f"{p}_{uuid.uuid4().hex[:8]}" for p in ("before", "during"))
    for name in (before, during):
        write_dag(dags_dir, f"{name}.py", "VALUE = 1\n")
    monkeypatch.syspath_prepend(str(dags_dir))
    __import__(before)
    try:
        with isolated(str(dags_dir / "dag.py")):
            __import__(during)
        assert during not in sys.modules and before in sys.modules
    finally:
        sys.modules.pop(before, None)


def test_a_segfault_writes_its_traceback_into_that_attempts_log(dags_dir, tmp_path):
    path = write_dag(
        dags_dir,
        "crash.py",
        """
        import ctypes
        from dagrun import DAG, task

        with DAG("rt", schedule=None):
            @task
            def fine():
                print("fine ran")

            @task
            def segfaults():
                ctypes.string_at(0)

            fine(); segfaults()
        """,
    )
    logs = tmp_path / "logs"
    reported = tmp_path / "fine.json"
    child = multiprocessing.get_context("fork").Process(
        target=run_in_child, args=(path, logs, reported), daemon=True
    )
    child.start()
    child.join(30)
    assert child.exitcode == -11
    fine = logfiles.LogRange(**json.loads(reported.read_text()))
    crash = logfiles.tail_of(str(logs), child.pid, fine)  # what the pool records for it
    assert crash.path == fine.path and crash.offset == fine.offset + fine.length
    fine_text = logfiles.read(fine.path, fine.offset, fine.length)[0]
    crashed = logfiles.read(crash.path, crash.offset, crash.length)[0]
    assert "fine ran" in fine_text and "Fatal Python error" not in fine_text
    assert "Fatal Python error: Segmentation fault" in crashed and "fine ran" not in crashed
    assert "in segfaults" in crashed


def run_in_child(path: Path, logs: Path, reported: Path) -> None:
    """A worker child's life in short: several attempts in a row, the last one crashes
    (the first one's log range is reported as the pool would have received it)."""
    cache = DagCache()
    fine = execute(request(path, "fine", logs), cache)
    reported.write_text(json.dumps(dataclasses.asdict(fine.log)))
    execute(request(path, "segfaults", logs), cache)


FAILING = """
    import json
    from dagrun import DAG, BashTask, task

    with DAG("rt", schedule=None):
        BashTask("exits", command="echo before; exit 3")

        @task
        def raises():
            def parse(text):
                return json.loads(text)
            parse("{nope")

        raises()
"""


def test_a_failed_command_ends_its_log_with_one_line_and_no_traceback(dags_dir, tmp_path):
    path = write_dag(dags_dir, "failing.py", FAILING)
    result = execute(request(path, "exits", tmp_path), DagCache())
    assert result.outcome == AttemptOutcome.FAILED
    assert result.error == "bash command exited with code 3"
    text = log_text(result)
    assert "Traceback" not in text and "dagrun" + os.sep not in text
    last = text.splitlines()[-1]
    assert last.endswith("ERROR dagrun.task: failed: bash command exited with code 3")


def test_a_raising_python_task_logs_its_own_frames_not_dagruns(dags_dir, tmp_path):
    path = write_dag(dags_dir, "failing.py", FAILING)
    result = execute(request(path, "raises", tmp_path), DagCache())
    assert result.error.startswith("JSONDecodeError: Expecting property name")
    text = log_text(result)
    trace = text[text.index("Traceback") :]
    frames = [line for line in trace.splitlines() if line.startswith('  File "')]
    assert f'"{path}", line 11, in raises' in frames[0]
    assert f'"{path}", line 10, in parse' in frames[1]
    assert "json" + os.sep in frames[-1]  # the library's frames the task's code called stay
    assert not any("dagrun" + os.sep in frame for frame in frames)
