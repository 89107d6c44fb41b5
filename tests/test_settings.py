"""Tests for dagrun.settings: where each setting's value comes from, and bad files."""

from __future__ import annotations

import textwrap
import tomllib
from pathlib import Path

import pytest

from dagrun import settings
from dagrun.settings import ConfigError


@pytest.fixture(autouse=True)
def no_config(monkeypatch, tmp_path):
    """Each test reads its own file: none named, none found above it, no home file."""
    monkeypatch.delenv(settings.CONFIG_ENV, raising=False)
    monkeypatch.setenv("DAGRUN_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    for s in settings.SETTINGS:
        if s.variable != "DAGRUN_HOME":
            monkeypatch.delenv(s.variable, raising=False)
    yield
    monkeypatch.undo()
    settings.reload()


def write(folder: Path, text: str) -> Path:
    path = folder / settings.FILE_NAME
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_without_a_file():
    found = settings.reload().lookup("worker.lease_seconds")
    assert (found.value, found.source) == (30.0, "default")


def test_flag_over_env_over_file_over_default(tmp_path, monkeypatch):
    path = write(tmp_path, "[worker]\nlease_seconds = 12\n[core]\nparse_timeout = 5\n")
    config = settings.reload()
    assert config.lookup("worker.lease_seconds").source == f"file {path}:2"
    assert config.get("worker.lease_seconds") == 12.0
    monkeypatch.setenv("DAGRUN_LEASE_SECONDS", "20")
    assert config.lookup("worker.lease_seconds").source == "env DAGRUN_LEASE_SECONDS"
    assert config.get("worker.lease_seconds") == 20.0
    config.override("worker.lease_seconds", 40.0)
    assert config.lookup("worker.lease_seconds").value == 40.0
    assert config.get("core.parse_timeout") == 5.0


def test_the_nearest_parent_file_wins_over_home(tmp_path, monkeypatch):
    (tmp_path / "home").mkdir()
    write(tmp_path / "home", "[core]\nparse_timeout = 7\n")
    assert settings.reload().get("core.parse_timeout") == 7.0
    project = tmp_path / "project" / "sub"
    project.mkdir(parents=True)
    write(tmp_path / "project", "[core]\nparse_timeout = 9\n")
    monkeypatch.chdir(project)
    assert settings.reload().get("core.parse_timeout") == 9.0


def test_a_named_file_wins_and_a_missing_one_is_an_error(tmp_path, monkeypatch):
    write(tmp_path, "[core]\nparse_timeout = 9\n")
    named = tmp_path / "other.toml"
    named.write_text("[core]\nparse_timeout = 3\n")
    monkeypatch.setenv(settings.CONFIG_ENV, str(named))
    assert settings.reload().get("core.parse_timeout") == 3.0
    monkeypatch.setenv(settings.CONFIG_ENV, str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="no such file"):
        settings.reload()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[core]\n\nparse_timout = 5\n",
            ":3: core.parse_timout: unknown setting (did you mean core.parse_timeout?)",
        ),
        (
            '[worker]\nlease_seconds = "soon"\n',
            ":2: worker.lease_seconds: must be a number, not 'soon'",
        ),
        ("[smtp]\nstarttls = 1\n", ":2: smtp.starttls: must be true or false, not 1"),
        ('[logging]\nformat = "xml"\n', ":2: logging.format: must be one of text, json, not 'xml'"),
        ("[core]\nmax_map_length = -1\n", ":2: core.max_map_length: must not be negative, not -1"),
        ("[nope]\nx = 1\n", ":2: nope.x: unknown setting"),
        ("[core\n", ":1: file: not valid TOML"),
    ],
)
def test_a_bad_file_names_its_line_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        settings.reload()
    assert str(caught.value).startswith(f"{path}{message}")


def test_a_bad_environment_value_names_its_variable(monkeypatch):
    monkeypatch.setenv("DAGRUN_SMTP_PORT", "twenty-five")
    with pytest.raises(ConfigError, match=r"env DAGRUN_SMTP_PORT: smtp\.port: must be a whole"):
        settings.reload().get("smtp.port")


def test_secrets_are_masked():
    config = settings.reload()
    config.override("core.db_url", "postgresql://app:s3cret@db:5432/dagrun")
    config.override("smtp.password", "hunter2")
    shown = {v.setting.name: v.shown() for v in config.all()}
    assert shown["core.db_url"] == "postgresql://app:***@db:5432/dagrun"
    assert shown["smtp.password"] == "***"
    assert shown["smtp.host"] == ""


def test_the_starter_file_is_valid_and_names_every_setting(tmp_path):
    text = settings.starter_file()
    uncommented = "\n".join(
        line.removeprefix("# ") if " = " in line else line
        for line in text.splitlines()
        if not line.startswith("# ") or " = " in line
    )
    parsed = tomllib.loads(uncommented)
    names = {f"{section}.{key}" for section, keys in parsed.items() for key in keys}
    assert names == set(settings.BY_NAME)
    write(tmp_path, uncommented)
    config = settings.reload()
    from_file = [v for v in config.all() if v.source.startswith("file")]
    assert len(from_file) == len(settings.SETTINGS) - 1  # all but home, set in the env
    assert all(v.value == v.setting.default for v in from_file)
