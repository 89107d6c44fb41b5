"""The benchmark must never rot: a tiny run through the real CLI, checking shape, not speed.

Timings are never asserted (CI machines vary); only that every workload produced positive
numbers and a floor to compare them with. A tiny run is bounded by the suite's own hang
bound, never by a guess at its speed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Seconds before the suite's hang bound at which a tiny run is killed: time to collect its
#: output and fail with its stderr before pytest-timeout ends the test without it.
KILL_MARGIN_S = 30.0


@pytest.fixture
def hang_bound(request: pytest.FixtureRequest) -> float | None:
    """The suite's hang bound (pytest-timeout's ``--timeout``, else the ``timeout`` of
    pyproject's ini options) less ``KILL_MARGIN_S``; None when the suite has no bound."""
    configured = request.config.getoption("timeout", None) or request.config.getini("timeout")
    bound = float(configured or 0)
    return bound - KILL_MARGIN_S if bound > KILL_MARGIN_S else None


def run_tiny(tmp_path: Path, only: str, bound: float | None) -> tuple[dict, str]:
    """``python -m bench --tiny --only ONLY --repeat 1``: its JSON document and its report.
    It runs in a session of its own, so that a hung run is killed with everything it
    started."""
    out = tmp_path / "bench.json"
    args = ["--tiny", "--only", only, "--repeat", "1", "--out", str(out)]
    with subprocess.Popen(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as bench:
        try:
            stdout, stderr = bench.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(bench.pid, signal.SIGKILL)
            stdout, stderr = bench.communicate()
            pytest.fail(f"python -m bench {' '.join(args)} still ran after {bound} s:\n{stderr}")
    assert bench.returncode == 0, stderr[-4000:]
    return json.loads(out.read_text()), stdout


@pytest.mark.slow
def test_tiny_benchmark_reports_every_workload_against_a_floor(
    tmp_path: Path, hang_bound: float | None
) -> None:
    document, stdout = run_tiny(tmp_path, "W1,W2,W3,W6,W7", hang_bound)
    assert set(document["workloads"]) == {"W1", "W2", "W3", "W6", "W7"}
    for name, result in document["workloads"].items():
        assert result["status"] == "ok", name
        assert result["units"] > 0, name
        assert result["wall_s"]["median"] > 0, name
        assert result["rate"] > 0 and result["ratio"] > 0, name
        assert result["floor"]["rate"] > 0 and result["floor"]["wall_s"]["median"] > 0, name
        assert result["peak_rss_mb"] > 0, name
    assert document["workloads"]["W2"]["per_task_ms"] > 0
    assert document["workloads"]["W3"]["unchanged_sync_s"]["median"] > 0
    assert issue_29_target(document["workloads"]["W3"])["limit"] == 0.3
    beside = document["workloads"]["W7"]["beside_sensors"]["100"]
    assert beside["pokes_per_s_alone"]["median"] > 0 and beside["kept"] > 0
    assert "ratio to floor" in stdout
    assert "W3 cold files/s >= 0.3 of floor (issue 29)" in stdout


def issue_29_target(result: dict) -> dict:
    """The one target of ``result`` that issue 29 set, with its verdict."""
    (found,) = [t for t in result["targets"] if "issue 29" in t["target"]]
    assert isinstance(found["met"], bool) and found["value"] > 0
    return found


@pytest.mark.slow
def test_tiny_fixed_cost_workloads_report_their_targets(
    tmp_path: Path, hang_bound: float | None
) -> None:
    """F1 to F3 set beside the interpreter floor, F4's commits per chained task."""
    document, stdout = run_tiny(tmp_path, "F1,F2,F3,F4", hang_bound)
    assert "fixed cost (issue 29)" in stdout
    for name in ("F1", "F2", "F3"):
        result = document["workloads"][name]
        assert result["status"] == "ok", result["status"]
        assert result["wall_s"]["median"] > 0 and result["floor_s"]["median"] > 0, name
        assert result["times_floor"] == result["wall_s"]["median"] / result["floor_s"]["median"]
        assert result["peak_rss_mb"] > 0, name
    commits = document["workloads"]["F4"]
    assert commits["status"] == "ok", commits["status"]
    assert commits["chain_commits"]["median"] > commits["single_commits"]["median"] > 0
    assert commits["commits_per_task"] > 0
    for name, result in document["workloads"].items():
        (target,) = result["targets"]
        assert isinstance(target["met"], bool) and target["value"] > 0, name
        assert f"- {name} {target['target']}" in stdout


def growth_targets(result: dict) -> list[dict]:
    """The targets that compare a per-unit cost at the small size with the large one."""
    found = [t for t in result["targets"] if "small" in t]
    assert found
    for t in found:
        assert t["small"] > 0 and t["large"] > 0 and t["value"] == t["large"] / t["small"]
    return found


@pytest.mark.slow
@pytest.mark.postgres
def test_tiny_scale_workloads_report_growth_ratios(
    tmp_path: Path, hang_bound: float | None
) -> None:
    """W1XL, W3XL, W5XL and the herd in one tiny invocation (one start-up for all four)."""
    document, stdout = run_tiny(tmp_path, "W1XL,W3XL,W5XL,W4H", hang_bound)
    assert "scale (issue 18)" in stdout
    check_w1xl(document["workloads"]["W1XL"])
    check_w3xl_w5xl(document["workloads"]["W3XL"], document["workloads"]["W5XL"])
    check_herd(document["workloads"]["W4H"], stdout)


def check_w1xl(result: dict) -> None:
    assert result["status"] == "ok"
    assert len(growth_targets(result)) >= 2
    sqlite = result["engines"]["sqlite"]
    assert sqlite["large"]["tasks"] == 10 * sqlite["small"]["tasks"]
    assert sqlite["large"]["db_mb"] > 0 and sqlite["large"]["peak_rss_mb"] > 0
    postgres = result["engines"]["postgres"]
    if postgres["status"] == "ok":
        assert postgres["large"]["db_mb"] > 0


def check_w3xl_w5xl(w3xl: dict, w5xl: dict) -> None:
    assert w3xl["status"] == "ok" and w5xl["status"] == "ok"
    growth_targets(w3xl)
    assert w3xl["large"]["files"] == 10 * w3xl["small"]["files"]
    assert {t["target"].split(":")[0] for t in growth_targets(w5xl)} >= {
        "html grid, newest page",
        "html grid, deep page",
        "dag list",
    }
    assert w5xl["large"]["sizes"]["runs"] == 10 * w5xl["small"]["sizes"]["runs"]
    assert w5xl["large"]["db_mb"] > w5xl["small"]["db_mb"] > 0


def check_herd(result: dict, stdout: str) -> None:
    assert result["status"] == "ok", result["status"]
    for count, found in result["workers"].items():
        assert found["exactly_once"], count
        assert found["runs_succeeded"] == result["runs"] and found["runs_not_started"] == 0
        assert found["tasks_per_s"] > 0 and found["last_run_started_late_s"] >= 0
    assert "claims/s per PG core" in stdout
