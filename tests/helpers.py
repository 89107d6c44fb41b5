"""Shared test helpers: waiting on conditions with a deadline, running the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path


def wait_until(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.05,
               what: str = "condition") -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test past ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def write_dag(folder: Path, name: str, source: str) -> Path:
    """Write a DAG file (dedented) into ``folder`` and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(source).lstrip())
    return path


def dagrun_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "dagrun", *args]


def run_cli(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 120,
            input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``dagrun ARGS`` as a user would, in a subprocess; returns the completed process."""
    return subprocess.run(
        dagrun_cmd(*args), env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True,
        timeout=timeout, input=input,
    )
