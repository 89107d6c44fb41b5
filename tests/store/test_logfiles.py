"""Attempt log segments: one append-only file per writing process, read back by byte range."""

from __future__ import annotations

import os

import pytest

from dagrun.store import logfiles
from dagrun.store.logfiles import LogRange


def write_attempt(folder: str, text: str) -> LogRange:
    """What the runner does around an attempt: note the offset, append, measure."""
    segment = logfiles.segment(folder)
    offset = segment.start()
    os.write(segment.fd, text.encode())
    return LogRange(segment.path, offset, segment.end() - offset)


@pytest.fixture
def folder(tmp_path, monkeypatch) -> str:
    monkeypatch.setattr(logfiles, "_segments", {})  # a fresh process's view
    return str(tmp_path / "logs")


def test_attempts_follow_each_other_in_one_segment_and_read_back_exactly(folder):
    first = write_attempt(folder, "one\n")
    second = write_attempt(folder, "two\nlines\n")
    assert first.path == second.path and second.offset == first.offset + first.length
    assert logfiles.read(first.path, first.offset, first.length) == ("one\n", 0)
    assert logfiles.read(second.path, second.offset, second.length) == ("two\nlines\n", 0)
    day = os.path.basename(os.path.dirname(first.path))
    assert len(day) == 10 and day[4] == "-"  # logs/<UTC day>/<host>-<pid>-<n>.log


def test_a_full_segment_is_left_for_a_new_one(folder, monkeypatch):
    monkeypatch.setattr(logfiles, "SEGMENT_BYTES", 10)
    first = write_attempt(folder, "x" * 12)
    second = write_attempt(folder, "next\n")
    assert second.path != first.path and second.offset == 0
    assert logfiles.read(second.path, second.offset, second.length)[0] == "next\n"


def test_a_removed_segment_is_replaced_before_the_next_attempt(folder):
    first = write_attempt(folder, "gone\n")
    os.remove(first.path)
    second = write_attempt(folder, "kept\n")
    assert os.path.exists(second.path)
    assert logfiles.read(second.path, second.offset, second.length)[0] == "kept\n"


def test_the_tail_after_the_last_reported_attempt_is_what_a_dead_writer_left(folder):
    reported = write_attempt(folder, "finished\n")
    segment = logfiles.segment(folder)
    os.write(segment.fd, b"crashing...\nFatal Python error\n")
    tail = logfiles.tail_of(folder, os.getpid(), reported)
    assert (
        logfiles.read(tail.path, tail.offset, tail.length)[0] == "crashing...\nFatal Python error\n"
    )
    whole = logfiles.tail_of(folder, os.getpid(), None)  # died in its first attempt
    assert whole.offset == 0
    assert logfiles.tail_of(folder, os.getpid() + 1_000_000, None) is None


def test_the_tail_is_found_in_the_newest_segment(folder, monkeypatch):
    reported = write_attempt(folder, "old segment\n")
    monkeypatch.setattr(logfiles, "SEGMENT_BYTES", 1)
    segment = logfiles.segment(folder)
    segment.start()  # rotates: the crashed attempt began in a new file
    os.write(segment.fd, b"new attempt\n")
    tail = logfiles.tail_of(folder, os.getpid(), reported)
    assert tail.path == segment.path != reported.path and tail.offset == 0
    assert logfiles.read(tail.path, tail.offset, tail.length)[0] == "new attempt\n"


def test_a_long_log_is_read_as_its_tail_and_says_how_much_was_skipped(folder):
    log = write_attempt(folder, "HEAD\n" + "x" * 100 + "\nTAIL\n")
    write_attempt(folder, "the next attempt\n")
    text, skipped = logfiles.read(log.path, log.offset, log.length, tail=10)
    assert text.endswith("TAIL\n") and "HEAD" not in text and "next" not in text
    assert skipped == log.length - 10


def test_a_log_recorded_without_a_range_is_the_whole_file(tmp_path):
    path = tmp_path / "old.log"
    path.write_text("a file per attempt, as before schema version 2\n")
    assert logfiles.read(str(path), None, None)[0] == path.read_text()


def test_a_segment_left_by_an_earlier_process_with_the_same_pid_is_not_reused(folder):
    first = write_attempt(folder, "mine\n")
    day_folder = os.path.dirname(first.path)
    os.remove(first.path)
    for n in (2, 3):  # what a process that had this pid before left behind
        name = os.path.basename(first.path).replace("-1.log", f"-{n}.log")
        with open(os.path.join(day_folder, name), "w") as handle:
            handle.write("someone else's\n")
    second = write_attempt(folder, "mine again\n")
    assert second.path.endswith("-4.log") and second.offset == 0
    tail = logfiles.tail_of(folder, os.getpid(), None)
    assert logfiles.read(tail.path, tail.offset, tail.length)[0] == "mine again\n"
