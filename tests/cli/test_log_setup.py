"""Tests for dagrun.cli.log_setup: the [logging] settings of the long-running commands."""

from __future__ import annotations

import json
import logging

import pytest

from dagrun.cli.log_setup import JsonLines, logger_levels
from dagrun.settings import ConfigError


def test_a_json_line_carries_time_level_logger_message_and_run_fields():
    record = logging.LogRecord(
        "dagrun.worker", logging.WARNING, __file__, 1, "run %s failed", ("r1",), None
    )
    record.dag_id, record.run_id = "sales", "r1"

    line = json.loads(JsonLines().format(record))

    assert line["level"] == "WARNING" and line["logger"] == "dagrun.worker"
    assert line["message"] == "run r1 failed"
    assert (line["dag_id"], line["run_id"]) == ("sales", "r1")
    assert line["time"].endswith("+00:00") and "task_id" not in line


def test_logger_levels_read_name_equals_level():
    assert logger_levels("dagrun.worker=debug, dagrun.web=WARNING,") == {
        "dagrun.worker": logging.DEBUG,
        "dagrun.web": logging.WARNING,
    }
    assert logger_levels("") == {}


@pytest.mark.parametrize("text", ["dagrun.worker", "=debug", "dagrun.worker=loud"])
def test_a_bad_logger_level_is_a_config_error(text):
    with pytest.raises(ConfigError, match="must be LOGGER=LEVEL"):
        logger_levels(text)
