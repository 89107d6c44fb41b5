"""The one way dagrun forks a child it talks to (``ForkedChild``): the fork waits for the
database users, the child leads its own process group and dies with its parent, ``kill``
takes what it started down with it, how it ended is said in one text; and a command's
process ends without the interpreter's teardown, its output, threads and handlers done."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from dagrun.processes import FORK_GUARD, ForkedChild, describe_exit, kill_group
from tests.helpers import wait_until

T = TypeVar("T")


def gone(pid: int) -> bool:
    """No such process, or only its zombie (nobody has reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def forked_once_the_guard_is_free(fork: Callable[[], T]) -> T:
    """Call ``fork`` on a thread while another thread is a database user (``FORK_GUARD``):
    it must wait until that user is done. Returns what ``fork`` returned."""
    inside, leave = threading.Event(), threading.Event()

    def user() -> None:
        with FORK_GUARD.using():
            inside.set()
            leave.wait(30)

    holder = threading.Thread(target=user)
    holder.start()
    forked: list[T] = []
    try:
        assert inside.wait(10)
        forker = threading.Thread(target=lambda: forked.append(fork()))
        forker.start()
        forker.join(0.5)
        assert not forked, "forked while another thread was inside the database"
    finally:
        leave.set()
        holder.join(10)
    forker.join(30)
    assert forked
    return forked[0]


def sleeps(conn) -> None:
    """A child that starts a shell in its own group and one in a session of its own, says
    who is where, and waits to be killed."""
    beside = subprocess.Popen(["sleep", "60"])
    apart = subprocess.Popen(["sleep", "60"], start_new_session=True)
    conn.send((os.getpid(), os.getpgrp(), beside.pid, apart.pid))
    time.sleep(60)  # not reading: the pipe's end must not end it first


def ends_on_eof(conn) -> None:
    try:
        conn.recv()
    except EOFError:
        os._exit(5)


def test_a_fork_waits_for_the_database_users():
    child = forked_once_the_guard_is_free(lambda: ForkedChild(ends_on_eof))
    child.kill()


def test_kill_takes_the_childs_group_and_the_groups_it_names_down():
    child = ForkedChild(sleeps)
    pid, group, beside, apart = child.conn.recv()
    assert pid == group == child.process.pid  # it leads a group of its own
    child.kill([apart])
    assert child.process.exitcode == -signal.SIGKILL and child.conn.closed
    wait_until(lambda: gone(beside) and gone(apart), 10, what="both shells to die")


def test_the_childs_reads_end_when_the_parents_end_closes():
    """The child holds no copy of the parent's end of the pipe."""
    child = ForkedChild(ends_on_eof)
    child.conn.close()
    child.process.join(10)
    assert child.process.exitcode == 5


def says_its_streams(conn, parent_streams: tuple[int, int]) -> None:
    streams = (sys.stdout, sys.stderr)
    fresh = [id(s) != parent for s, parent in zip(streams, parent_streams, strict=True)]
    conn.send(fresh + [s.fileno() for s in streams])


def test_the_child_writes_through_fresh_streams_on_fds_1_and_2():
    child = ForkedChild(says_its_streams, ((id(sys.stdout), id(sys.stderr)),))
    assert child.conn.recv() == [True, True, 1, 2]
    child.kill()


def test_the_child_dies_with_its_parent_after_its_own_cleanup(tmp_path: Path):
    """A middle process forks a child that asked for ``on_parent_death``; a SIGTERM while
    the middle lives changes nothing, the middle's death ends the child, its cleanup ran,
    and the shell in its group went with it."""
    mark = tmp_path / "cleaned up"
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:  # the middle process
        try:
            child = ForkedChild(sleeps, on_parent_death=lambda: mark.write_text("yes"))
            os.write(write, pickle.dumps(child.conn.recv()))
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        pid, _, beside, apart = pickle.load(pipe)
    try:
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.3)
        assert not gone(pid)
    finally:
        os.kill(middle, signal.SIGKILL)
        os.waitpid(middle, 0)
        kill_group(apart)
    wait_until(lambda: gone(pid) and gone(beside), 10, what="the child and its shell")
    assert mark.read_text() == "yes"


def exits(conn, how: str) -> None:
    if how == "code":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize(
    ("how", "text"), [("code", "exited with code 3"), ("signal", "killed by signal 9 (SIGKILL)")]
)
def test_exit_reason_says_how_the_child_ended(how: str, text: str):
    child = ForkedChild(exits, (how,))
    assert child.exit_reason(10) == text
    child.kill()


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (0, "exited with code 0"),
        (3, "exited with code 3"),
        (-signal.SIGSEGV, "killed by signal 11 (SIGSEGV)"),
        (-200, "killed by signal 200 (unknown)"),
        (None, "stopped answering"),
    ],
)
def test_each_exit_code_has_one_text(code: int | None, text: str):
    assert describe_exit(code) == text


def test_a_child_that_has_not_ended_stopped_answering():
    child = ForkedChild(ends_on_eof)
    try:
        assert child.exit_reason(0.1) == "stopped answering"
    finally:
        child.kill()


ENDING = """
import atexit, logging, sys, threading, time
from dagrun import processes

ending = processes.end_without_teardown()


class Loud:
    def __del__(self):
        print("torn down", flush=True)


kept = Loud()
handler = logging.StreamHandler(sys.stderr)
logging.getLogger("t").addHandler(handler)
atexit.register(print, "handler ran")
late = threading.Thread(target=lambda: (time.sleep(0.2), print("thread done")))
late.start()
logging.getLogger("t").warning("logged")
print("x" * 200_000)
ending.code = int(sys.argv[1])
"""


@pytest.mark.parametrize("code", [0, 1, 2])
def test_a_command_ends_with_its_code_its_output_threads_and_handlers_but_no_teardown(code):
    done = subprocess.run(
        [sys.executable, "-c", ENDING, str(code)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == code
    lines = done.stdout.splitlines()
    assert lines == ["x" * 200_000, "thread done", "handler ran"]  # no "torn down"
    assert done.stderr == "logged\n"


def test_the_dagrun_program_ends_with_mains_exit_code(tmp_path: Path):
    env = {**os.environ, "DAGRUN_HOME": str(tmp_path / "home")}
    unknown = [sys.executable, "-m", "dagrun", "no-such-command"]
    done = subprocess.run(unknown, capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stderr.splitlines()[-1][:28]) == (
        2,
        "error: no such command 'no-s",
    )
    version = [sys.executable, "-m", "dagrun", "version"]
    done = subprocess.run(version, capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout.split()[0]) == (0, "dagrun,")
