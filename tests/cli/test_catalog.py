"""Tests for dagrun.cli.catalog: the command table, Airflow's names, plain help."""

from __future__ import annotations

import importlib

import click
import pytest

from dagrun.cli.catalog import AIRFLOW_NAMES, COMMANDS, plain, translate


def test_the_table_names_every_command_of_every_module_and_only_those():
    modules = {entry.module for entry in COMMANDS.values()}
    defined = {
        command.name: module
        for module in modules
        for command in importlib.import_module(f"dagrun.cli.{module}").COMMANDS
    }
    assert defined == {name: entry.module for name, entry in COMMANDS.items()}


def test_every_summary_is_one_plain_line():
    for name, entry in COMMANDS.items():
        assert "``" not in entry.summary and "\n" not in entry.summary, name
        assert len(f"  {name:<12} {entry.summary}") <= 80, name


@pytest.mark.parametrize(
    ("airflow", "dagrun"),
    [
        (["dags", "trigger", "d", "--conf", "{}"], ["trigger", "d", "--conf", "{}"]),
        (["dags", "list-runs", "d"], ["runs", "list", "d"]),
        (["dags", "state", "d", "2026-01-02"], ["runs", "state", "d", "--date", "2026-01-02"]),
        (
            ["tasks", "state", "d", "t", "2026-01-02"],
            ["tasks", "state", "d", "t", "--date", "2026-01-02"],
        ),
        (
            ["tasks", "state", "d", "t", "--date", "2026-01-02"],
            ["tasks", "state", "d", "t", "--date", "2026-01-02"],
        ),
        (["tasks", "list", "d"], ["dags", "show", "d"]),
        (["db", "migrate"], ["db", "init"]),
        (["dags", "list"], ["dags", "list"]),
    ],
)
def test_airflow_words_become_dagruns(airflow, dagrun):
    assert translate(airflow) == dagrun


def test_every_airflow_name_runs_a_command_that_exists():
    for name in AIRFLOW_NAMES:
        entry = COMMANDS[name.target[0]]
        command = next(
            c
            for c in importlib.import_module(f"dagrun.cli.{entry.module}").COMMANDS
            if c.name == name.target[0]
        )
        if len(name.target) > 1:
            assert isinstance(command, click.Group) and name.target[1] in command.commands


def test_help_text_is_plain():
    assert (
        plain('Pools cap tasks naming them (``pool="db"``).')
        == 'Pools cap tasks naming them (pool="db").'
    )
    assert plain(None) is None
