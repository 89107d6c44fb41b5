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
