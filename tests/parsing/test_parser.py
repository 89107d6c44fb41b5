"""Tests for dagrun.parsing.parser: discovery, isolated import, graphs, and per-file errors."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from dagrun.parsing import loader, parser
from dagrun.parsing.spec import DagSpec
from tests.helpers import write_dag
from tests.test_processes import forked_once_the_guard_is_free

GOOD = """
    from dagrun import DAG, BashTask

    with DAG("{dag_id}"):
        BashTask("t", command="echo {dag_id}")
"""


def parse(*paths: Path, timeout: float = 10.0) -> dict[str, parser.FileResult]:
    """Parse exactly these files, in this order; results keyed by the file's path."""
    found = {str(p): parser.file_hash(str(p)) for p in paths}
    return parser.parse_files(found, timeout=timeout)


def dag_ids(result: parser.FileResult) -> list[str]:
    return [d.dag_id for d in result.dags]


def parse_one(dags_dir: Path, source: str, name: str = "f.py") -> parser.FileResult:
    path = write_dag(dags_dir, name, source)
    return parse(path, timeout=2.0)[str(path)]


# ---------------------------------------------------------------- discovery


def test_discover_is_recursive_and_skips_hidden_and_caches(dags_dir: Path):
    for rel in [
        "top.py",
        "team/nested.py",
        "team/deeper/deepest.py",
        ".hidden/secret.py",
        "team/.git/hook.py",
        "__pycache__/top.cpython-311.py",
        "team/__pycache__/x.py",
        ".dotfile.py",
        "notes.txt",
        "data.pyc",
    ]:
        write_dag(dags_dir / Path(rel).parent, Path(rel).name, "x = 1\n")
    found = parser.discover(dags_dir)
    assert sorted(found) == sorted(
        str(dags_dir / rel) for rel in ["top.py", "team/nested.py", "team/deeper/deepest.py"]
    )
    assert found[str(dags_dir / "top.py")] == parser.file_hash(str(dags_dir / "top.py"))


def test_discover_hash_follows_content(dags_dir: Path):
    path = write_dag(dags_dir, "a.py", "x = 1\n")
    before = parser.discover(dags_dir)[str(path)]
    path.write_text("x = 2\n")
    assert parser.discover(dags_dir)[str(path)] != before
    path.write_text("x = 1\n")
    assert parser.discover(dags_dir)[str(path)] == before


def test_discover_missing_folder_finds_nothing(tmp_path: Path):
    assert parser.discover(tmp_path / "nope") == {}


def test_module_names_are_unique_per_path_and_stable():
    one = loader.module_name("/dags/a/pipeline.py")
    two = loader.module_name("/dags/b/pipeline.py")
    assert one != two
    assert one == loader.module_name("/dags/a/pipeline.py")
    assert one.isidentifier()


# ---------------------------------------------------------------- isolated import


def test_good_file_gives_its_dags(dags_dir: Path):
    result = parse_one(
        dags_dir,
        """
        from datetime import timedelta
        from dagrun import DAG, BashTask, task

        with DAG("first", schedule="30 0 * * *", start_date="2026-01-01",
                 timezone="Asia/Dhaka", max_active_runs=2, tags=["x"],
                 default_args={"retries": 3}) as dag:
            BashTask("b", command="echo", retries=1)

        def make(n):
            with DAG(f"made_{n}", schedule=timedelta(hours=n), start_date="2026-01-01"):
                BashTask("t", command="echo")

        for n in (1, 2):
            make(n)
        """,
    )
    assert result.error is None
    assert dag_ids(result) == ["first", "made_1", "made_2"]
    first = result.dags[0]
    assert first.fileloc == result.path
    assert first.schedule == "30 0 * * *"
    assert first.timezone == "Asia/Dhaka"
    assert first.start_date == "2025-12-31T18:00:00+00:00"
    assert first.max_active_runs == 2
    assert first.tags == ("x",)
    assert first.line == 4
    assert first.tasks[0].retries == 1
    assert result.dags[1].schedule == 3600.0
    assert result.dags[1].timetable.next_interval(None).start.isoformat() == (
        "2026-01-01T00:00:00+00:00"
    )


def test_spec_round_trips_through_json(dags_dir: Path):
    result = parse_one(
        dags_dir,
        """
        from dagrun import DAG, BashTask, Param, task

        with DAG("rt", schedule="@daily", start_date="2026-01-01",
                 params={"k": 1, "n": Param(type="integer", description="how many")},
                 default_args={"retries": 2, "retry_delay": "1m"}):
            @task(trigger_rule="all_done", priority_weight=5, pool="db")
            def summary(raw):
                return raw

            @task
            def extract():
                return 1

            summary(extract()) >> BashTask("notify", command="echo")
        """,
    )
    spec = result.dags[0]
    assert DagSpec.from_json(spec.to_json()) == spec
    assert spec.cron == ((0,), (0,), ("*",), ("*",), ("*",))  # @daily, parsed by croniter
    assert DagSpec.from_json(spec.to_json()).to_json() == spec.to_json()
    summary = spec.task_map["summary"]
    assert summary.upstream == ("extract",)
    assert summary.data_inputs == ("extract",)
    assert (summary.trigger_rule, summary.priority_weight, summary.pool) == ("all_done", 5, "db")
    assert (summary.retries, summary.retry_delay, summary.max_tries) == (2, 60.0, 3)
    assert spec.params == {
        "k": {"default": 1, "schema": {}, "description": None},
        "n": {"schema": {"type": "integer"}, "description": "how many"},
    }
    assert DagSpec.from_json(spec.to_json()).params == spec.params  # compare=False above


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("b = t('b'); a = t('a'); a >> b", ["a", "b"]),
        ("c = t('c'); a = t('a'); b = t('b'); a >> b", ["c", "a", "b"]),
        (
            "load = t('load'); ex = t('extract'); cl = t('clean'); s = t('summary');"
            " ex >> cl; [cl, load] >> s",
            ["load", "extract", "clean", "summary"],
        ),
        ("z = t('z'); y = t('y'); x = t('x'); x >> y >> z", ["x", "y", "z"]),
        (
            "d = t('d'); c = t('c'); b = t('b'); a = t('a'); [d, c] >> a; b >> c",
            ["d", "b", "c", "a"],
        ),
    ],
)
def test_topological_order_is_stable_with_definition_order_breaking_ties(
    dags_dir: Path, body: str, expected: list[str]
):
    source = (
        "from dagrun import DAG, BashTask\n"
        "with DAG('topo'):\n"
        "    def t(name):\n"
        "        return BashTask(name, command='echo')\n"
        f"    {body}\n"
    )
    first = parse_one(dags_dir, source, "topo.py").dags[0]
    again = parse_one(dags_dir, source, "topo_again.py").dags[0]
    assert [t.task_id for t in first.tasks] == expected
    assert [t.task_id for t in again.tasks] == expected
    graph = first.graph()
    position = {task_id: i for i, task_id in enumerate(expected)}
    assert all(position[u] < position[v] for u, v in graph.edges)


def test_the_files_folder_is_importable_for_helpers(dags_dir: Path):
    write_dag(dags_dir / "team", "naming.py", "PREFIX = 'team'\n")
    write_dag(dags_dir / "team" / "lib", "__init__.py", "SUFFIX = 'lib'\n")
    path = write_dag(
        dags_dir / "team",
        "pipeline.py",
        """
        from dagrun import DAG, BashTask
        import naming
        from lib import SUFFIX

        with DAG(f"{naming.PREFIX}_{SUFFIX}"):
            BashTask("t", command="echo")
        """,
    )
    result = parse(path)[str(path)]
    assert result.error is None
    assert dag_ids(result) == ["team_lib"]


def test_sibling_helpers_with_the_same_name_do_not_collide(dags_dir: Path):
    paths = []
    for team in ("alpha", "beta"):
        write_dag(dags_dir / team, "utils.py", f"TEAM = {team!r}\n")
        paths.append(
            write_dag(
                dags_dir / team,
                "pipeline.py",
                """
                from dagrun import DAG, BashTask
                import utils

                with DAG(utils.TEAM + "_pipeline"):
                    BashTask("t", command="echo")
                """,
            )
        )
    results = parse(*paths)
    assert [dag_ids(results[str(p)]) for p in paths] == [["alpha_pipeline"], ["beta_pipeline"]]


def test_a_file_does_not_see_helpers_of_files_parsed_before_it(dags_dir: Path):
    write_dag(dags_dir / "alpha", "only_in_alpha.py", "VALUE = 1\n")
    uses_own = write_dag(dags_dir / "alpha", "a.py", "import only_in_alpha\n")
    borrows = write_dag(dags_dir / "beta", "b.py", "import only_in_alpha\n")
    results = parse(uses_own, borrows)
    assert results[str(uses_own)].error is None
    error = results[str(borrows)].error
    assert error is not None
    assert "ModuleNotFoundError: No module named 'only_in_alpha'" in error.reason
    assert error.line == 1


def test_files_with_the_same_name_in_two_folders_both_load(dags_dir: Path):
    one = write_dag(dags_dir / "x", "pipeline.py", GOOD.format(dag_id="x_pipeline"))
    two = write_dag(dags_dir / "y", "pipeline.py", GOOD.format(dag_id="y_pipeline"))
    results = parse(one, two)
    assert dag_ids(results[str(one)]) == ["x_pipeline"]
    assert dag_ids(results[str(two)]) == ["y_pipeline"]


def test_import_does_not_touch_the_callers_modules(dags_dir: Path):
    import sys

    path = write_dag(
        dags_dir,
        "polluter.py",
        """
        import sys
        sys.modules["json"] = None
        sys.path.insert(0, "/nonexistent")
        """,
    )
    before = list(sys.path)
    assert parse(path)[str(path)].error is None
    assert sys.modules["json"] is not None
    assert sys.path == before
    assert loader.module_name(str(path)) not in sys.modules


# ---------------------------------------------------------------- errors, one per file

SLEEPS_FOREVER = """
    import time
    while True:
        time.sleep(60)
"""

# (file name, source, expected line, expected words in the reason)
ERROR_CASES = [
    ("syntax.py", "x = 1\ndef broken(:\n    pass\n", 2, ["syntax error"]),
    (
        "raises.py",
        "import os\n\nvalue = 1 / 0\n",
        3,
        ["ZeroDivisionError: division by zero"],
    ),
    (
        "raises_in_function.py",
        "def load():\n    return {}['missing']\n\nload()\n",
        2,
        ["KeyError: 'missing'"],
    ),
    (
        "cycle.py",
        """
        from dagrun import DAG, BashTask

        with DAG("cyclic"):
            a = BashTask("a", command="echo")
            b = BashTask("b", command="echo")
            c = BashTask("c", command="echo")
            ok = BashTask("ok", command="echo")
            ok >> a >> b >> c >> a
        """,
        3,
        ["cycle", "'cyclic'", "a -> b -> c -> a"],
    ),
    (
        "self_loop.py",
        """
        from dagrun import DAG, BashTask

        with DAG("loop"):
            a = BashTask("a", command="echo")
            a >> a
        """,
        3,
        ["cycle", "a -> a"],
    ),
    (
        "duplicate_task.py",
        """
        from dagrun import DAG, BashTask

        with DAG("dup"):
            BashTask("load", command="echo")
            BashTask("load", command="echo")
        """,
        5,
        ["duplicate task id 'load'", "'dup'"],
    ),
    (
        "bad_cron.py",
        """
        from dagrun import DAG

        DAG("bad_cron", schedule="61 * * * *", start_date="2026-01-01")
        """,
        3,
        ["invalid cron expression '61 * * * *'"],
    ),
    (
        "bad_tz.py",
        """
        from dagrun import DAG

        DAG("bad_tz", schedule="@daily", start_date="2026-01-01", timezone="Mars/Olympus")
        """,
        3,
        ["unknown timezone 'Mars/Olympus'"],
    ),
    (
        "no_start.py",
        """
        from dagrun import DAG

        DAG("no_start", schedule="@daily")
        """,
        3,
        ["start_date is required"],
    ),
    (
        "bad_start.py",
        """
        from dagrun import DAG

        DAG("bad_start", schedule="@daily", start_date="last tuesday")
        """,
        3,
        ["invalid start_date 'last tuesday'"],
    ),
    (
        "unknown_context.py",
        """
        from dagrun import DAG, task

        with DAG("ctx"):
            @task
            def report(ds, partition):
                return ds

            report()
        """,
        8,
        ["task 'report' in DAG 'ctx'", "'partition'"],
    ),
    (
        "duplicate_dag.py",
        """
        from dagrun import DAG, BashTask

        for n in range(2):
            with DAG("same"):
                BashTask(f"t{n}", command="echo")
        """,
        4,
        ["DAG id 'same' is defined twice in this file (lines 4 and 4)"],
    ),
    ("sys_exit.py", "import sys\nsys.exit()\n", 2, ["SystemExit"]),
    ("sys_exit_code.py", "import sys\nsys.exit(4)\n", 2, ["SystemExit: 4"]),
    ("os_exit.py", "import os\nos._exit(3)\n", None, ["exited with code 3"]),
    (
        "killed.py",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
        None,
        ["killed by signal 9 (SIGKILL)"],
    ),
    ("sleeps.py", SLEEPS_FOREVER, None, ["did not finish within"]),
]


@pytest.mark.parametrize(
    ("name", "source", "line", "words"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES]
)
@pytest.mark.slow
def test_each_error_is_reported_with_file_line_and_reason(
    dags_dir: Path, name: str, source: str, line: int | None, words: list[str]
):
    started = time.monotonic()
    result = parse_one(dags_dir, source, name)
    assert time.monotonic() - started < 10
    assert result.dags == []
    error = result.error
    assert error is not None
    assert error.file == str(dags_dir / name)
    assert error.line == line
    for word in words:
        assert word in error.reason
    assert str(error).startswith(f"{dags_dir / name}{f':{line}' if line else ''}: ")
    assert "Traceback" not in error.reason
    assert "\n" not in error.reason


def test_syntax_error_in_a_helper_names_the_helper(dags_dir: Path):
    write_dag(dags_dir, "helper.py", "x = 1\ny = (\n")
    result = parse_one(dags_dir, "import os\nimport helper\n", "uses_helper.py")
    assert result.error is not None
    assert "syntax error" in result.error.reason
    assert "helper.py" in result.error.reason
    assert result.error.line == 2


def test_one_bad_file_never_hides_the_others(dags_dir: Path):
    """Every bad kind in one parse, good files between and after them, one short timeout."""
    paths = []
    for i, (name, source, _line, _words) in enumerate(ERROR_CASES):
        paths.append(write_dag(dags_dir, f"{i:02d}_{name}", source))
        paths.append(write_dag(dags_dir, f"{i:02d}_good.py", GOOD.format(dag_id=f"good_{i:02d}")))
    started = time.monotonic()
    results = parse(*paths, timeout=1.0)
    assert time.monotonic() - started < 30
    assert sorted(results) == sorted(str(p) for p in paths)
    good = {str(p) for p in paths if p.name.endswith("_good.py")}
    for path, result in results.items():
        if path in good:
            assert result.error is None, result.error
            assert len(result.dags) == 1
        else:
            assert result.error is not None, path
            assert result.dags == []


def test_timeout_kills_the_hung_import_and_carries_on(dags_dir: Path):
    hung = write_dag(dags_dir, "hung.py", SLEEPS_FOREVER)
    after = write_dag(dags_dir, "after.py", GOOD.format(dag_id="after"))
    started = time.monotonic()
    results = parse(hung, after, timeout=1.0)
    elapsed = time.monotonic() - started
    assert "did not finish within 1 s" in results[str(hung)].error.reason
    assert dag_ids(results[str(after)]) == ["after"]
    assert elapsed < 8


def test_children_forked_ahead_parse_the_shares_of_files(dags_dir: Path):
    """``prefork`` (called before the CLI imports the store) forks the children that the next
    parse uses, one per share of the files; a later parse forks its own again."""
    count = min(os.cpu_count() or 1, 4)
    files = [write_dag(dags_dir, f"f{i}.py", GOOD.format(dag_id=f"f{i}")) for i in range(count)]
    parser.prefork(dags_dir)
    spares = list(parser._spares)
    assert len(spares) == count
    results = parse(*files, timeout=10.0)
    assert parser._spares == []
    for spare in spares:
        assert not spare.process.is_alive()
        assert spare.deadline != float("inf")  # it was handed files: the spare did parse
    assert [dag_ids(results[str(p)]) for p in files] == [[f"f{i}"] for i in range(count)]
    assert dag_ids(parse(files[0], timeout=10.0)[str(files[0])]) == ["f0"]


def test_no_more_children_are_forked_ahead_than_there_are_files(dags_dir: Path):
    """A spare with no file to parse would only take a core from the command."""
    parser.prefork(dags_dir / "missing")
    assert parser._spares == []
    first = write_dag(dags_dir, "first.py", GOOD.format(dag_id="first"))
    parser.prefork(dags_dir)
    assert len(parser._spares) == 1
    assert dag_ids(parse(first, timeout=10.0)[str(first)]) == ["first"]
    assert parser._spares == []


def test_a_parse_child_is_forked_only_when_no_thread_is_inside_the_database():
    """A fork copies every lock another thread holds (a database driver's among them) and
    the child would find them held for good: a scheduler parses beside its worker threads."""
    forked_once_the_guard_is_free(parser._ParseChild).kill()


def test_a_hung_file_in_the_forked_ahead_child_still_times_out(dags_dir: Path):
    hung = write_dag(dags_dir, "hung.py", SLEEPS_FOREVER)
    parser.prefork(dags_dir)
    results = parse(hung, timeout=1.0)
    assert "did not finish within 1 s" in results[str(hung)].error.reason


def test_a_file_still_importing_halfway_to_its_limit_is_named_once(dags_dir: Path, caplog):
    hung = write_dag(dags_dir, "hung.py", SLEEPS_FOREVER)
    with caplog.at_level(logging.WARNING, logger="dagrun.parsing"):
        results = parse(hung, timeout=1.0)
    said = [r.getMessage() for r in caplog.records if r.name == "dagrun.parsing"]
    assert said == [f"waiting for {hung} to import (a file fails after 1 s: DAGRUN_PARSE_TIMEOUT)"]
    assert "did not finish within 1 s" in results[str(hung)].error.reason


def test_a_file_that_imports_in_time_is_not_named(dags_dir: Path, caplog):
    good = write_dag(dags_dir, "good.py", GOOD.format(dag_id="good"))
    with caplog.at_level(logging.WARNING, logger="dagrun.parsing"):
        assert dag_ids(parse(good)[str(good)]) == ["good"]
    assert not [r for r in caplog.records if r.name == "dagrun.parsing"]


def test_default_timeout_comes_from_the_environment():
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "from dagrun.parsing import parser; print(parser.DEFAULT_TIMEOUT)"],
        env={**os.environ, "DAGRUN_PARSE_TIMEOUT": "2.5"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "2.5"


def test_no_files_parse_to_nothing():
    assert parser.parse_files({}) == {}


def test_a_spec_from_a_parse_child_is_stored_as_the_child_wrote_it(dags_dir: Path):
    """The parent keeps the child's JSON (no second serialisation): it must be exactly what
    ``to_json`` of the same spec gives, and read back into an equal spec."""
    path = write_dag(dags_dir, "good.py", GOOD.format(dag_id="wire"))
    [spec] = parse(path, timeout=10.0)[str(path)].dags
    fresh = DagSpec.from_json(spec.to_json())
    assert fresh == spec
    assert fresh.to_json() == spec.to_json()
    assert json.loads(spec.to_json())["tasks"][0]["task_id"] == spec.tasks[0].task_id
