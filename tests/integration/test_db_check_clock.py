"""``dagrun db check`` says how far this host's clock is from the database's, on each engine,
and spells it out when it is off (a host clock an hour ahead, under libfaketime)."""

from __future__ import annotations

import re

import pytest

from tests.faults.test_clock_skew import LIBFAKETIME, needs_faketime
from tests.helpers import run_cli

MEASURED = re.compile(r"clock: the database's minus this host's: ([+-]\d+\.\d{3}) s")


def check_lines(env: dict[str, str]) -> list[str]:
    result = run_cli("db", "check", env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_on_sqlite_the_hosts_clock_is_the_only_one(cli_env):
    assert run_cli("db", "init", env=cli_env).returncode == 0
    ok, clock = check_lines(cli_env)
    assert ok.startswith("ok: ")
    assert clock == "clock: SQLite reads this host's clock, the only one: no difference to measure"


@pytest.mark.slow  # two commands on PostgreSQL: close to 1.8 s on a busy machine
def test_on_postgresql_the_difference_is_measured(cli_env, pg_url):
    env = {**cli_env, "DAGRUN_DB_URL": pg_url}
    assert run_cli("db", "init", env=env).returncode == 0
    ok, clock = check_lines(env)
    found = MEASURED.fullmatch(clock)
    assert ok.startswith("ok: ") and found, clock
    assert abs(float(found.group(1))) < 2  # one host, one clock


@pytest.mark.slow
@needs_faketime
def test_a_host_clock_an_hour_ahead_is_spelled_out(cli_env, pg_url):
    env = {**cli_env, "DAGRUN_DB_URL": pg_url}
    assert run_cli("db", "init", env=env).returncode == 0
    ahead = {**env, "LD_PRELOAD": LIBFAKETIME, "FAKETIME": "+1h"}
    _, clock = check_lines(ahead)
    found = MEASURED.match(clock)
    assert found and -3602 < float(found.group(1)) < -3598, clock
    assert "s ahead of the database's" in clock and "the database's decides what is due" in clock
