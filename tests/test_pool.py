"""The pool's own reading of a child's pipe: whole messages, however the bytes arrive.

Children, crashes, timeouts and inboxes are exercised end to end through the worker
(tests/test_worker.py, tests/faults/test_child_crashes.py)."""

from __future__ import annotations

import multiprocessing
import struct
import threading

import pytest

from dagrun.pool import Child, _frame


def test_a_frame_is_found_only_once_it_is_whole():
    body = b"x" * 10
    data = bytearray(struct.pack("!i", len(body)) + body + b"next")
    assert _frame(data) == (4, 14)
    assert _frame(bytearray(data[:13])) is None
    assert _frame(bytearray(b"\x00\x00")) is None


def test_a_huge_frame_uses_the_long_header():
    data = bytearray(struct.pack("!i", -1) + struct.pack("!Q", 3) + b"abc")
    assert _frame(data) == (12, 15)
    assert _frame(bytearray(data[:11])) is None


def reader_of(conn) -> Child:
    """A Child around one end of a pipe, without forking a process."""
    child = Child.__new__(Child)
    child.conn = conn
    child._received = bytearray()
    return child


def test_messages_split_across_reads_arrive_whole_and_in_order():
    ours, theirs = multiprocessing.Pipe()
    sent = [("done", 1), ("big", "y" * 3_000_000), ("done", 3)]
    writer = threading.Thread(target=lambda: [theirs.send(m) for m in sent])
    writer.start()
    child = reader_of(ours)
    got = []
    while len(got) < len(sent):
        got += child.messages()  # blocks until bytes arrive, takes at most 1 MiB a time
    writer.join(10)
    assert got == sent


def test_a_closed_pipe_is_the_childs_end():
    ours, theirs = multiprocessing.Pipe()
    theirs.close()
    with pytest.raises(EOFError):
        reader_of(ours).messages()
