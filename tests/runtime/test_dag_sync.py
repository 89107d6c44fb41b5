"""Tests for dagrun.runtime.dag_sync: keeping the store's DAG registry in step with the dags
folder."""

from __future__ import annotations

import os
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import update

from dagrun.errors import DagNotFound, UsageError
from dagrun.parsing import discovery, parser
from dagrun.parsing.discovery import Stat
from dagrun.runtime.dag_sync import choose_folder, rebind_folder, sync_dags
from dagrun.store import Store, audit, dag_reads, registry, schema
from tests.helpers import write_dag


def counting_dag(dag_id: str, counter: Path, extra: str = "") -> str:
    """A DAG file that appends its dag_id to ``counter`` each time it is imported."""
    return f"""
        from dagrun import DAG, BashTask

        with open({str(counter)!r}, "a") as handle:
            handle.write({dag_id!r} + "\\n")

        with DAG({dag_id!r}, schedule="@daily", start_date="2026-01-01"):
            BashTask("t", command="echo {extra}")
        """


def simple_dag(dag_id: str, **dag_args: object) -> str:
    args = "".join(f", {k}={v!r}" for k, v in dag_args.items())
    return f"""
        from dagrun import DAG, BashTask

        with DAG({dag_id!r}{args}):
            BashTask("t", command="echo")
        """


def imports(counter: Path) -> list[str]:
    return counter.read_text().split() if counter.exists() else []


def active(store: Store) -> dict[str, str]:
    with store.read() as conn:
        return {r.dag_id: r.fileloc for r in dag_reads.active_dags(conn)}


def errors(store: Store) -> dict[str, str]:
    with store.read() as conn:
        return {e.path: e.error for e in dag_reads.import_errors(conn)}


def dag_row(store: Store, dag_id: str) -> dag_reads.DagRow:
    with store.read() as conn:
        return dag_reads.get_dag(conn, dag_id)


def sync(store: Store, dags_dir: Path):
    return sync_dags(store, str(dags_dir), timeout=10)


def test_sync_records_dags_and_import_errors(store: Store, dags_dir: Path):
    good = write_dag(
        dags_dir,
        "good.py",
        simple_dag("good", schedule="30 0 * * *", start_date="2026-01-01", timezone="Asia/Dhaka"),
    )
    bad = write_dag(dags_dir, "bad.py", "x = 1 / 0\n")
    report = sync(store, dags_dir)
    assert report.parsed == sorted([str(good), str(bad)])
    assert report.unchanged == 0
    assert active(store) == {"good": str(good)}
    row = dag_row(store, "good")
    assert row.spec.schedule == "30 0 * * *"
    assert row.spec.timezone == "Asia/Dhaka"
    assert [t.task_id for t in row.spec.tasks] == ["t"]
    assert row.is_paused is False
    assert errors(store) == {str(bad): "ZeroDivisionError: division by zero"}
    with store.read() as conn:
        assert dag_reads.import_errors(conn)[0].error_line == 1


def test_only_changed_files_are_imported_again(sqlite_store: Store, dags_dir: Path, tmp_path):
    counter = tmp_path / "imports.txt"
    write_dag(dags_dir, "one.py", counting_dag("one", counter))
    two = write_dag(dags_dir, "two.py", counting_dag("two", counter))
    first = sync(sqlite_store, dags_dir)
    assert sorted(imports(counter)) == ["one", "two"]
    assert len(first.parsed) == 2

    second = sync(sqlite_store, dags_dir)
    assert second.parsed == []
    assert second.unchanged == 2
    assert sorted(imports(counter)) == ["one", "two"]

    write_dag(dags_dir, "two.py", counting_dag("two", counter, extra="changed"))
    third = sync(sqlite_store, dags_dir)
    assert third.parsed == [str(two)]
    assert third.unchanged == 1
    assert sorted(imports(counter)) == ["one", "two", "two"]
    assert dag_row(sqlite_store, "two").spec.tasks[0].task_id == "t"
    assert set(active(sqlite_store)) == {"one", "two"}


def test_files_parsed_by_other_code_are_parsed_again_once(store: Store, dags_dir: Path):
    """After a dagrun upgrade an unchanged file may load (an Airflow file that failed) or
    make a richer spec: every file is parsed once more, then unchanged ones are not."""
    good = write_dag(
        dags_dir,
        "good.py",
        "from dagrun import DAG, BashTask\nwith DAG('good'):\n    BashTask('t', command='echo')\n",
    )
    bad = write_dag(dags_dir, "bad.py", "import no_such_module_here\n")
    assert len(sync(store, dags_dir).parsed) == 2
    assert sync(store, dags_dir).parsed == []
    with store.write() as conn:
        registry.set_parsed_by(conn, "an older dagrun")
    assert sync(store, dags_dir).parsed == sorted([str(bad), str(good)])
    assert sync(store, dags_dir).parsed == []
    with store.read() as conn:
        assert dag_reads.parsed_by(conn) != "an older dagrun"


def test_touching_a_file_without_changing_it_does_not_reimport(
    sqlite_store: Store, dags_dir: Path, tmp_path
):
    counter = tmp_path / "imports.txt"
    path = write_dag(dags_dir, "one.py", counting_dag("one", counter))
    sync(sqlite_store, dags_dir)
    path.write_text(path.read_text())
    assert sync(sqlite_store, dags_dir).parsed == []
    assert imports(counter) == ["one"]


def settle(path: Path, seconds_ago: float) -> int:
    """Give ``path`` a modification time ``seconds_ago`` in the past, past the clock tick of
    any write to come (``discovery.settled``); its new ``mtime_ns``."""
    mtime = time.time_ns() - int(seconds_ago * 1e9)
    os.utime(path, ns=(mtime, mtime))
    return mtime


@dataclass
class Watched:
    """What syncs did beside reading the store: parse children forked, files read and
    hashed, write transactions opened."""

    forks: list[object] = field(default_factory=list)
    hashed: list[str] = field(default_factory=list)
    writes: list[Store] = field(default_factory=list)

    def clear(self) -> None:
        self.forks.clear()
        self.hashed.clear()
        self.writes.clear()


@pytest.fixture
def watch(monkeypatch) -> Watched:
    watched = Watched()

    class CountedChild(parser._ParseChild):
        def __init__(self) -> None:
            super().__init__()
            watched.forks.append(self)

    def file_hash(path: str) -> str:
        watched.hashed.append(path)
        return real_hash(path)

    def write(store: Store):
        watched.writes.append(store)
        return real_write(store)

    real_hash, real_write = discovery.file_hash, Store.write
    monkeypatch.setattr(parser, "_ParseChild", CountedChild)
    monkeypatch.setattr(discovery, "file_hash", file_hash)
    monkeypatch.setattr(Store, "write", write)
    return watched


def known_stat(store: Store, path: Path) -> Stat | None:
    with store.read() as conn:
        return dag_reads.known_files(conn)[str(path)].stat


def test_a_sync_with_nothing_changed_forks_no_child_reads_no_file_and_writes_nothing(
    store: Store, dags_dir: Path, watch: Watched
):
    """What every scheduler tick and ``dags list`` pays when nothing changed: one read
    transaction and a stat per file."""
    paths = [
        write_dag(dags_dir, "shared.py", 'COMMAND = "echo"\n'),
        write_dag(dags_dir, "user.py", USES_HELPER.format(module="shared", dag_id="user")),
        write_dag(dags_dir, "bad.py", "x = 1 / 0\n"),
        write_dag(dags_dir, "plain.py", simple_dag("plain")),
    ]
    for path in paths:
        settle(path, 60)
    first = sync(store, dags_dir)
    assert len(first.parsed) == 4 and watch.forks and len(watch.writes) == 1
    watch.clear()
    again = sync(store, dags_dir)
    assert (again.parsed, again.unchanged, again.removed) == ([], 4, [])
    assert (watch.forks, watch.hashed, watch.writes) == ([], [], [])
    assert set(active(store)) == {"user", "plain"} and str(paths[2]) in errors(store)


def test_a_touched_file_keeps_its_parse_and_an_edit_of_the_same_size_is_parsed(
    sqlite_store: Store, dags_dir: Path, tmp_path: Path, watch: Watched
):
    """A new modification time with the same content (``touch``, a copy over itself) is
    read once, keeps its parse and has its stat recorded; an edit that keeps the size but
    not the modification time is parsed."""
    counter = tmp_path / "imports.txt"
    path = write_dag(dags_dir, "one.py", counting_dag("one", counter, extra="a"))
    settle(path, 60)
    sync(sqlite_store, dags_dir)
    touched = settle(path, 30)
    watch.clear()
    report = sync(sqlite_store, dags_dir)
    assert (report.parsed, imports(counter), watch.forks) == ([], ["one"], [])
    assert watch.hashed == [str(path)] and len(watch.writes) == 1
    assert known_stat(sqlite_store, path) == Stat(path.stat().st_size, touched)
    watch.clear()
    assert sync(sqlite_store, dags_dir).parsed == []
    assert (watch.hashed, watch.writes) == ([], [])

    size = path.stat().st_size
    write_dag(dags_dir, "one.py", counting_dag("one", counter, extra="b"))
    edited = settle(path, 10)
    assert path.stat().st_size == size
    assert sync(sqlite_store, dags_dir).parsed == [str(path)]
    assert imports(counter) == ["one", "one"]
    assert known_stat(sqlite_store, path) == Stat(size, edited)


def test_an_edit_within_the_clock_tick_of_the_write_before_is_parsed(
    sqlite_store: Store, dags_dir: Path, tmp_path: Path
):
    """A file written moments ago may be edited again within the same tick of the file
    system's clock, keeping its size and modification time: its stat is not trusted until
    it is older than any such tick, so the edit is found by its hash."""
    counter = tmp_path / "imports.txt"
    path = write_dag(dags_dir, "one.py", counting_dag("one", counter, extra="a"))
    sync(sqlite_store, dags_dir)
    assert known_stat(sqlite_store, path) is None
    same_tick = path.stat().st_mtime_ns
    write_dag(dags_dir, "one.py", counting_dag("one", counter, extra="b"))
    os.utime(path, ns=(same_tick, same_tick))
    assert sync(sqlite_store, dags_dir).parsed == [str(path)]
    assert imports(counter) == ["one", "one"]
    settled = settle(path, 60)
    assert sync(sqlite_store, dags_dir).parsed == []
    assert known_stat(sqlite_store, path) == Stat(path.stat().st_size, settled)


def test_files_recorded_without_a_stat_are_read_once_more_then_no_more(
    store: Store, dags_dir: Path, watch: Watched
):
    """Files recorded before stats were (a store migrated from schema version 11) are read
    and hashed at the next sync, which records their stats without parsing them."""
    paths = [write_dag(dags_dir, f"d{i}.py", simple_dag(f"d{i}")) for i in range(3)]
    for path in paths:
        settle(path, 60)
    sync(store, dags_dir)
    with store.write() as conn:
        conn.execute(update(schema.dag_file).values(size=None, mtime_ns=None))
    watch.clear()
    assert sync(store, dags_dir).parsed == []
    assert (sorted(watch.hashed), len(watch.writes), watch.forks) == (
        sorted(map(str, paths)),
        1,
        [],
    )
    watch.clear()
    assert sync(store, dags_dir).parsed == []
    assert (watch.hashed, watch.writes) == ([], [])


def test_a_new_file_is_parsed_alone(sqlite_store: Store, dags_dir: Path, tmp_path):
    counter = tmp_path / "imports.txt"
    write_dag(dags_dir, "one.py", counting_dag("one", counter))
    sync(sqlite_store, dags_dir)
    new = write_dag(dags_dir / "sub", "new.py", counting_dag("new", counter))
    assert sync(sqlite_store, dags_dir).parsed == [str(new)]
    assert imports(counter) == ["one", "new"]
    assert set(active(sqlite_store)) == {"one", "new"}


USES_HELPER = """
    from dagrun import DAG, BashTask
    from {module} import COMMAND

    with DAG({dag_id!r}, schedule=None):
        BashTask("t", command=COMMAND)
    """


def test_editing_a_helper_parses_the_files_that_import_it(store: Store, dags_dir: Path):
    write_dag(dags_dir, "shared.py", 'COMMAND = "echo one"\n')
    write_dag(dags_dir, "other.py", "VALUE = 1\n")
    user = write_dag(dags_dir, "user.py", USES_HELPER.format(module="shared", dag_id="user"))
    bystander = write_dag(dags_dir, "bystander.py", simple_dag("bystander"))
    sync(store, dags_dir)
    with store.read() as conn:
        assert dag_reads.known_files(conn)[str(user)].depends_on == (str(dags_dir / "shared.py"),)
    write_dag(dags_dir, "shared.py", 'COMMAND = "echo two"\n')
    report = sync(store, dags_dir)
    assert str(user) in report.parsed and str(bystander) not in report.parsed
    write_dag(dags_dir, "other.py", "VALUE = 2\n")  # a helper nobody imports
    assert str(user) not in sync(store, dags_dir).parsed


def test_removing_a_helper_shows_the_error_and_restoring_it_fixes_it(
    sqlite_store: Store, dags_dir: Path
):
    helper = write_dag(dags_dir, "shared.py", 'COMMAND = "echo"\n')
    user = write_dag(dags_dir, "user.py", USES_HELPER.format(module="shared", dag_id="user"))
    sync(sqlite_store, dags_dir)
    assert "user" in active(sqlite_store)
    helper.unlink()
    sync(sqlite_store, dags_dir)
    assert "No module named 'shared'" in errors(sqlite_store)[str(user)]
    assert dag_row(sqlite_store, "user").error == errors(sqlite_store)[str(user)]  # kept
    write_dag(dags_dir, "shared.py", 'COMMAND = "echo"\n')  # a new file: try it again
    sync(sqlite_store, dags_dir)
    assert str(user) not in errors(sqlite_store) and "user" in active(sqlite_store)


def test_a_broken_edit_keeps_the_last_good_dag_beside_its_error(store: Store, dags_dir: Path):
    """Adding a ``raise`` keeps the DAG scheduled as last parsed, with the error shown
    beside it and the last good source kept for the workers; fixing it clears the error;
    deleting the broken file removes the DAG."""
    good = textwrap.dedent(simple_dag("kept", schedule="@daily", start_date="2026-01-01"))
    path = write_dag(dags_dir, "kept.py", good)
    sync(store, dags_dir)
    spec = dag_row(store, "kept").spec
    write_dag(dags_dir, "kept.py", good + "\nraise RuntimeError('half-finished edit')\n")
    sync(store, dags_dir)
    row = dag_row(store, "kept")
    assert row.spec == spec and row.is_active
    assert "RuntimeError: half-finished edit" in row.error == errors(store)[str(path)]
    with store.read() as conn:
        assert dag_reads.good_source(conn, str(path)).strip() == good.strip()
        assert dag_reads.known_files(conn)[str(path)].dag_ids == ("kept",)
    write_dag(dags_dir, "kept.py", good.replace("echo", "echo fixed"))
    sync(store, dags_dir)
    assert dag_row(store, "kept").error is None and str(path) not in errors(store)
    with store.read() as conn:
        assert "echo fixed" in dag_reads.good_source(conn, str(path))
    write_dag(dags_dir, "kept.py", "raise RuntimeError('broken again')\n")
    sync(store, dags_dir)
    assert "kept" in active(store)
    path.unlink()
    sync(store, dags_dir)
    assert "kept" not in active(store) and str(path) not in errors(store)


def test_a_file_that_never_loaded_has_no_dags(sqlite_store: Store, dags_dir: Path):
    source = textwrap.dedent(simple_dag("never")) + "\nraise RuntimeError('no')\n"
    write_dag(dags_dir, "never.py", source)
    sync(sqlite_store, dags_dir)
    assert "never" not in active(sqlite_store)
    assert "RuntimeError: no" in errors(sqlite_store)[str(dags_dir / "never.py")]


def test_removed_file_deactivates_its_dags(store: Store, dags_dir: Path):
    keep = write_dag(dags_dir, "keep.py", simple_dag("keep"))
    gone = write_dag(dags_dir, "gone.py", simple_dag("gone"))
    sync(store, dags_dir)
    assert set(active(store)) == {"keep", "gone"}
    gone.unlink()
    report = sync(store, dags_dir)
    assert report.removed == [str(gone)]
    assert active(store) == {"keep": str(keep)}
    with pytest.raises(DagNotFound):
        dag_row(store, "gone")
    with store.read() as conn:
        assert dag_reads.load_spec(conn, "gone").dag_id == "gone"
        assert str(gone) not in dag_reads.known_files(conn)


def test_removed_bad_file_clears_its_import_error(sqlite_store: Store, dags_dir: Path):
    bad = write_dag(dags_dir, "bad.py", "raise RuntimeError('boom')\n")
    sync(sqlite_store, dags_dir)
    assert errors(sqlite_store) == {str(bad): "RuntimeError: boom"}
    bad.unlink()
    sync(sqlite_store, dags_dir)
    assert errors(sqlite_store) == {}


def test_fixed_file_clears_its_error_and_adds_its_dag(sqlite_store: Store, dags_dir: Path):
    path = write_dag(dags_dir, "f.py", "from dagrun import DAG\nDAG('fixed', schedule='@daily')\n")
    sync(sqlite_store, dags_dir)
    assert "start_date is required" in errors(sqlite_store)[str(path)]
    assert active(sqlite_store) == {}
    write_dag(dags_dir, "f.py", simple_dag("fixed", schedule="@daily", start_date="2026-01-01"))
    sync(sqlite_store, dags_dir)
    assert errors(sqlite_store) == {}
    assert active(sqlite_store) == {"fixed": str(path)}


def test_a_dag_renamed_in_its_file_replaces_the_old_one(sqlite_store: Store, dags_dir: Path):
    write_dag(dags_dir, "f.py", simple_dag("old_name"))
    sync(sqlite_store, dags_dir)
    write_dag(dags_dir, "f.py", simple_dag("new_name"))
    sync(sqlite_store, dags_dir)
    assert set(active(sqlite_store)) == {"new_name"}


def test_same_dag_id_in_two_files_names_both_and_the_first_keeps_it(store: Store, dags_dir: Path):
    first = write_dag(dags_dir, "a_first.py", simple_dag("shared", tags=["first"]))
    second = write_dag(dags_dir, "b_second.py", simple_dag("shared", tags=["second"]))
    sync(store, dags_dir)
    assert active(store) == {"shared": str(first)}
    assert dag_row(store, "shared").spec.tags == ("first",)
    found = errors(store)
    assert list(found) == [str(second)]
    assert "duplicate DAG id 'shared'" in found[str(second)]
    assert str(first) in found[str(second)]

    first.unlink()
    sync(store, dags_dir)
    assert active(store) == {"shared": str(second)}
    assert dag_row(store, "shared").spec.tags == ("second",)
    assert errors(store) == {}


def test_the_owner_of_a_dag_id_keeps_it_when_it_is_edited(sqlite_store: Store, dags_dir: Path):
    """A later file with a taken dag_id stays rejected, whatever the file names sort as."""
    owner = write_dag(dags_dir, "z_owner.py", simple_dag("shared", tags=["owner"]))
    sync(sqlite_store, dags_dir)
    latecomer = write_dag(dags_dir, "a_latecomer.py", simple_dag("shared", tags=["late"]))
    sync(sqlite_store, dags_dir)
    assert active(sqlite_store) == {"shared": str(owner)}
    assert str(owner) in errors(sqlite_store)[str(latecomer)]

    write_dag(dags_dir, "z_owner.py", simple_dag("shared", tags=["owner", "edited"]))
    sync(sqlite_store, dags_dir)
    assert active(sqlite_store) == {"shared": str(owner)}
    assert dag_row(sqlite_store, "shared").spec.tags == ("owner", "edited")
    assert list(errors(sqlite_store)) == [str(latecomer)]


def test_a_file_with_a_duplicate_keeps_its_other_dags(sqlite_store: Store, dags_dir: Path):
    write_dag(dags_dir, "a.py", simple_dag("shared"))
    both = write_dag(
        dags_dir,
        "b.py",
        """
        from dagrun import DAG, BashTask

        for dag_id in ("shared", "own"):
            with DAG(dag_id):
                BashTask("t", command="echo")
        """,
    )
    sync(sqlite_store, dags_dir)
    assert active(sqlite_store)["own"] == str(both)
    assert active(sqlite_store)["shared"] != str(both)
    assert "duplicate DAG id 'shared'" in errors(sqlite_store)[str(both)]


def test_pause_flag_survives_a_reparse(store: Store, dags_dir: Path):
    write_dag(dags_dir, "p.py", simple_dag("paused_one"))
    sync(store, dags_dir)
    with store.write() as conn:
        registry.set_paused(conn, "paused_one", True)
    write_dag(dags_dir, "p.py", simple_dag("paused_one", tags=["changed"]))
    assert sync(store, dags_dir).parsed
    row = dag_row(store, "paused_one")
    assert row.spec.tags == ("changed",)
    assert row.is_paused is True


@pytest.mark.parametrize(("flag", "paused"), [(None, False), (False, False), (True, True)])
def test_is_paused_upon_creation(sqlite_store: Store, dags_dir: Path, flag, paused):
    args = {} if flag is None else {"is_paused_upon_creation": flag}
    write_dag(dags_dir, "f.py", simple_dag("fresh", **args))
    sync(sqlite_store, dags_dir)
    assert dag_row(sqlite_store, "fresh").is_paused is paused


def test_is_paused_upon_creation_applies_only_at_creation(sqlite_store: Store, dags_dir: Path):
    write_dag(dags_dir, "f.py", simple_dag("fresh", is_paused_upon_creation=True))
    sync(sqlite_store, dags_dir)
    with sqlite_store.write() as conn:
        registry.set_paused(conn, "fresh", False)
    write_dag(dags_dir, "f.py", simple_dag("fresh", is_paused_upon_creation=True, tags=["v2"]))
    sync(sqlite_store, dags_dir)
    assert dag_row(sqlite_store, "fresh").spec.tags == ("v2",)
    assert dag_row(sqlite_store, "fresh").is_paused is False


def test_empty_or_missing_folder_syncs_to_nothing(sqlite_store: Store, tmp_path: Path):
    report = sync_dags(sqlite_store, str(tmp_path / "missing"), timeout=5)
    assert (report.parsed, report.unchanged, report.removed) == ([], 0, [])
    assert active(sqlite_store) == {}


WARNED = """
    from datetime import timedelta

    from airflow import DAG
    from airflow.operators.bash import BashOperator

    with DAG("warned", schedule=None, default_args={"owner": "data"}):
        BashOperator(task_id="a", bash_command="echo", sla=timedelta(hours={hours}))
"""


def warnings(store: Store) -> dict[str, list[tuple[int | None, str]]]:
    with store.read() as conn:
        return {f.path: [tuple(w) for w in f.warnings] for f in dag_reads.file_warnings(conn)}


def test_a_files_warnings_are_kept_from_its_last_parse(store: Store, dags_dir: Path):
    path = write_dag(dags_dir, "warned.py", WARNED.replace("{hours}", "1"))
    write_dag(dags_dir, "plain.py", simple_dag("plain"))
    sync(store, dags_dir)
    stored = [
        (7, "owner: accepted but not acted on by dagrun"),
        (7, "sla: accepted but not acted on by dagrun"),
    ]
    assert warnings(store) == {str(path): stored}  # the native file has none

    write_dag(dags_dir, "warned.py", WARNED.replace("{hours}", "2").replace(", sla=", ", x="))
    sync(store, dags_dir)  # an import error: the file's DAG runs as last parsed, unwarned
    assert warnings(store) == {} and set(errors(store)) == {str(path)}

    write_dag(dags_dir, "warned.py", WARNED.replace("{hours}", "3"))
    sync(store, dags_dir)
    assert warnings(store) == {str(path): stored} and errors(store) == {}

    path.unlink()
    sync(store, dags_dir)
    assert warnings(store) == {}


# ------------------------------------------------------------ the folder the store serves


def served(store: Store) -> str | None:
    with store.read() as conn:
        return dag_reads.served_folder(conn)


def test_the_first_folder_synced_is_the_one_the_store_serves(store, dags_dir, tmp_path):
    write_dag(dags_dir, "a.py", simple_dag("a"))
    sync(store, dags_dir)
    assert served(store) == str(dags_dir)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = sync(store, elsewhere)

    assert report.served == str(dags_dir)
    assert report.removed == []
    assert f"serves the DAGs of {dags_dir}, not {elsewhere}" in report.folder.note
    assert active(store) == {"a": str(dags_dir / "a.py")}


def test_a_sync_from_elsewhere_still_reads_the_store_folder(store, dags_dir, tmp_path):
    write_dag(dags_dir, "a.py", simple_dag("a"))
    sync(store, dags_dir)
    write_dag(dags_dir, "b.py", simple_dag("b"))

    report = sync(store, tmp_path / "no-dags-here")

    assert report.parsed == [str(dags_dir / "b.py")]
    assert set(active(store)) == {"a", "b"}


def test_a_store_folder_missing_on_this_host_keeps_its_dags(store, dags_dir, tmp_path):
    write_dag(dags_dir, "a.py", simple_dag("a"))
    sync(store, dags_dir)
    moved = tmp_path / "unmounted"
    dags_dir.rename(moved)

    report = sync(store, dags_dir)

    assert "is not on this host" in report.folder.note
    assert report.removed == []
    assert set(active(store)) == {"a"}


def test_a_folder_that_does_not_exist_is_not_bound(store, tmp_path, dags_dir):
    sync(store, tmp_path / "missing")
    assert served(store) is None
    write_dag(dags_dir, "a.py", simple_dag("a"))
    sync(store, dags_dir)
    assert served(store) == str(dags_dir)


def test_rebind_moves_the_store_and_is_audited(store, dags_dir, tmp_path):
    write_dag(dags_dir, "a.py", simple_dag("a"))
    sync(store, dags_dir)
    other = tmp_path / "other"
    other.mkdir()
    write_dag(other, "b.py", simple_dag("b"))

    report = rebind_folder(store, str(other))

    assert report.served == str(other)
    assert set(active(store)) == {"b"}
    with store.read() as conn:
        entry = audit.entries(conn, limit=1)[0]
    assert entry.action == "rebind_folder"
    assert entry.detail == {"before": str(dags_dir), "after": str(other)}


def test_rebind_to_a_missing_folder_is_bad_input(store, dags_dir, tmp_path):
    write_dag(dags_dir, "a.py", simple_dag("a"))
    sync(store, dags_dir)
    with pytest.raises(UsageError, match="no folder"):
        rebind_folder(store, str(tmp_path / "nope"))
    assert served(store) == str(dags_dir)


@pytest.mark.parametrize(
    ("bound", "known", "asked", "expect"),
    [
        (None, [], "/p/dags", ("/p/dags", "/p/dags")),
        (None, ["/p/dags/x.py", "/p/dags/s/y.py"], "/p/dags", ("/p/dags", "/p/dags")),
        (None, ["/p/dags/s/y.py"], "/tmp/dags", ("/p/dags/s", None)),
    ],
)
def test_choose_folder_for_a_store_without_one(bound, known, asked, expect, monkeypatch):
    monkeypatch.setattr("os.path.isdir", lambda p: True)
    choice = choose_folder(asked, bound, known)
    assert (choice.served, choice.read) == expect
    assert choice.bind == (choice.read is not None)
