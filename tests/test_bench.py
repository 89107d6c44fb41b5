"""The benchmark must never rot: a tiny run through the real CLI, checking shape, not speed.

Timings are never asserted (CI machines vary); only that every workload produced positive
numbers and a floor to compare them with.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tiny_benchmark_reports_every_workload_against_a_floor(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--tiny",
            "--only",
            "W1,W2,W3,W6,W7",
            "--repeat",
            "1",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    document = json.loads(out.read_text())
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
    beside = document["workloads"]["W7"]["beside_sensors"]["100"]
    assert beside["pokes_per_s_alone"]["median"] > 0 and beside["kept"] > 0
    assert "ratio to floor" in done.stdout


TINY = [sys.executable, "-m", "bench", "--tiny", "--repeat", "1"]


def run_tiny(tmp_path: Path, only: str) -> tuple[dict, str]:
    """``python -m bench --tiny --only ONLY --repeat 1``: its JSON document and its report."""
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [*TINY, "--only", only, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text()), done.stdout


def growth_targets(result: dict) -> list[dict]:
    """The targets that compare a per-unit cost at the small size with the large one."""
    found = [t for t in result["targets"] if "small" in t]
    assert found
    for t in found:
        assert t["small"] > 0 and t["large"] > 0 and t["value"] == t["large"] / t["small"]
    return found


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(240)
def test_tiny_scale_workloads_report_growth_ratios(tmp_path: Path) -> None:
    """W1XL, W3XL, W5XL and the herd in one tiny invocation (one start-up for all four)."""
    document, stdout = run_tiny(tmp_path, "W1XL,W3XL,W5XL,W4H")
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
