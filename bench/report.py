"""The printed report: a Markdown table (ratios first) and the targets, from the JSON document.

Markdown so that the same text reads in a terminal and pastes into the README unchanged.
"""

from __future__ import annotations

HEADERS = [
    "workload",
    "ratio to floor (best/best)",
    "dagrun /s",
    "floor /s",
    "wall s median (min-max)",
    "ms per unit",
    "CPU ms per unit (floor)",
    "peak RSS MB (PSS)",
    "what",
]


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _wall(spread: dict | None) -> str:
    if not spread:
        return "-"
    return f"{spread['median']:.3f} ({spread['min']:.3f}-{spread['max']:.3f})"


def _row(name: str, r: dict) -> list[str]:
    units = r.get("units")
    median = r.get("wall_s", {}).get("median") if r.get("wall_s") else None
    per_unit = 1000 * median / units if units and median else None
    memory = f"{_num(r.get('peak_rss_mb'), 0)} ({_num(r.get('peak_pss_mb'), 0)})"
    return [
        name,
        f"{_num(r.get('ratio'), 3)} ({_num(r.get('ratio_best'), 3)})",
        _num(r.get("rate"), 0),
        _num(r.get("floor", {}).get("rate"), 0),
        _wall(r.get("wall_s")),
        _num(per_unit, 2),
        f"{_num(r.get('cpu_ms_per_unit'), 2)} ({_num(r.get('floor_cpu_ms_per_unit'), 2)})",
        memory,
        f"{r.get('title', '')} ({units} {r.get('unit', 'unit')}s)" if units else r.get("title", ""),
    ]


def rows(document: dict) -> list[list[str]]:
    """One row per workload; W4 gets one per worker count, W5 its status or summary."""
    out = []
    for name, r in document["workloads"].items():
        if r.get("kind") in ("scale", "herd", "fixed") and r.get("status") == "ok":
            continue  # in the scale, herd or fixed-cost table
        if r.get("status") != "ok":
            out.append([name, *["-"] * 7, f"{r.get('title', '')} {r['status']}"])
        elif "workers" in r:
            for count, w in r["workers"].items():
                entry = {
                    **w,
                    "units": r["units"],
                    "unit": "task",
                    "floor": r["floor"],
                    "rate": w["executions_per_s"],
                    "cpu_ms_per_unit": w["median_run"].get("workers_cpu_ms_per_task"),
                    "floor_cpu_ms_per_unit": r.get("floor_cpu_ms_per_unit"),
                    "title": _worker_title(count, w),
                }
                out.append(_row(f"{name} x{count}", entry))
        elif "units" in r:
            out.append(_row(name, r))
            out.extend(_extra_rows(name, r))
        else:
            summary = ", ".join(f"{k}={v}" for k, v in r.items() if _scalar(v))[:160]
            out.append([name, *["-"] * 7, summary])
    return out


def _worker_title(count: str, w: dict) -> str:
    busy = w["median_run"].get("machine_cpu_busy")
    busy_pct = _num(100 * busy if busy is not None else None, 0)
    return (
        f"{count} worker(s) x 2 children, claims/s {w['claims_per_s']:.0f}, "
        f"speedup {w['speedup_vs_1']:.2f}, machine CPU busy {busy_pct}%, "
        f"exactly once: {w['exactly_once']}"
    )


def _scalar(value) -> bool:
    return isinstance(value, int | float | str) and not isinstance(value, bool)


def _context_row(label: str, spread: dict, memory: dict | None, what: str) -> list[str]:
    mem = f"{memory['peak_rss_mb']:.0f} ({memory['peak_pss_mb']:.0f})" if memory else "-"
    return [label, "-", "-", "-", _wall(spread), "-", "-", mem, what]


def _extra_rows(name: str, r: dict) -> list[list[str]]:
    """The context numbers some workloads carry besides their main measurement."""
    extra = []
    if "single_task_run_s" in r:
        extra.append(
            _context_row(
                f"{name} 1-task",
                r["single_task_run_s"],
                None,
                "run of a 1-task DAG: the fixed cost",
            )
        )
    if "cli_version_s" in r:
        extra.append(
            _context_row(
                f"{name} --version",
                r["cli_version_s"],
                None,
                "dagrun --version: interpreter start and CLI imports",
            )
        )
    for count, beside in r.get("beside_sensors", {}).items():
        during, alone = beside["pokes_per_s"]["median"], beside["pokes_per_s_alone"]["median"]
        title = (
            f"the same beside {count} sensors poking every second, kept {beside['kept']:.2f} "
            f"of its ratio ({during:.0f} pokes/s during it, {alone:.0f} before it)"
        )
        extra.append(_row(f"{name} + {count} sensors", {**beside, "title": title}))
    if "beside_waiting_sensors" in r:
        quiet = r["beside_waiting_sensors"]
        title = f"{quiet['command']}, kept {quiet['kept']:.2f} of its ratio"
        extra.append(_row(f"{name} + waiting sensors", {**quiet, "title": title}))
    if "unchanged_s" in r:
        extra.append(
            _context_row(
                f"{name} unchanged",
                r["unchanged_s"],
                r["unchanged_memory"],
                "dags list again, nothing changed",
            )
        )
        extra.append(
            _context_row(
                f"{name} sync", r["unchanged_sync_s"], None, "sync_dags in-process, nothing changed"
            )
        )
    return extra


def table(headers: list[str], body: list[list[str]]) -> str:
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in body:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines)


def targets(document: dict) -> list[str]:
    lines = []
    for name, r in document["workloads"].items():
        for t in r.get("targets", []):
            verdict = "met" if t["met"] else "MISSED"
            value = "" if t["value"] is None else f": {t['value']:.3f}"
            limit = "" if t["limit"] is None else f" (limit {t['limit']:.3g})"
            lines.append(f"- {name} {t['target']}{value}{limit}: {verdict}")
    return lines


FIXED_TITLE = (
    "fixed cost (issue 29): F1 to F3 in times an interpreter floor "
    '(python -c "import sqlite3, click, json") run just before each command, '
    "F4 in commits per chained task"
)
FIXED_HEADERS = [
    "workload",
    "what",
    "command s median (min-max)",
    "floor s median (min-max)",
    "value",
    "target",
    "met",
]


def fixed_rows(document: dict) -> list[list[str]]:
    """The fixed-cost workloads: F1 to F3 in times the floor, F4 in commits per task."""
    out = []
    for name, r in document["workloads"].items():
        if r.get("kind") != "fixed" or r.get("status") != "ok":
            continue
        t = r["targets"][0]
        if "commits_per_task" in r:
            what = (
                f"{r['title']} ({r['chain_commits']['median']:.0f} commits in the chain's "
                f"run, {r['single_commits']['median']:.0f} in a 1-task run)"
            )
            wall, floor, value = "-", "-", f"{t['value']:.2f} commits"
            limit = f"<= {t['limit']:g} commits"
        else:
            wall, floor = _wall(r["wall_s"]), _wall(r["floor_s"])
            what, value, limit = r["title"], f"{t['value']:.2f}x", f"<= {t['limit']:g}x"
        out.append([name, what, wall, floor, value, limit, "met" if t["met"] else "MISSED"])
    return out


SCALE_HEADERS = ["workload", "what", "small", "large", "growth", "target", "met"]
HERD_HEADERS = [
    "workers",
    "drain s",
    "tasks/s",
    "exactly once",
    "run started, s late (first / last)",
    "task began, s late (first / last)",
    "claims/s per PG core",
    "peak RSS MB",
]


def _size(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.3g} {unit}"


def scale_rows(document: dict) -> list[list[str]]:
    """One row per growth target of the scale workloads; their sizes as context rows."""
    out = []
    for name, r in document["workloads"].items():
        if r.get("kind") != "scale" or r.get("status") != "ok":
            continue
        for t in r.get("targets", []):
            growth = "small" in t
            out.append(
                [
                    name,
                    t["target"],
                    _num(t.get("small"), 3) if growth else "-",
                    _num(t.get("large") if growth else t["value"], 3),
                    f"{t['value']:.2f}x" if growth and t["value"] is not None else "-",
                    f"<= {t['limit']:g}x" if growth else f"< {t['limit']:g}",
                    "met" if t["met"] else "MISSED",
                ]
            )
        out.extend(_scale_context(name, r))
    return out


def _scale_context(name: str, r: dict) -> list[list[str]]:
    rows = []
    for engine, found in r.get("engines", {}).items():
        if "small" not in found:
            rows.append([name, f"{engine}: {found.get('status')}", "-", "-", "-", "-", "-"])
            continue
        small, large = found["small"], found["large"]
        rows.append(
            [
                name,
                f"{engine}: tasks; wall s; database size",
                f"{small['tasks']}; {small['wall_s']:.1f} s; {_size(small['db_mb'], 'MB')}",
                f"{large['tasks']}; {large['wall_s']:.1f} s; {_size(large['db_mb'], 'MB')}",
                "-",
                "-",
                "-",
            ]
        )
    if "marginal_ms_per_file" in r:
        small, large = r["small"], r["large"]
        rows.append(
            [
                name,
                "files; cold s; unchanged s; marginal ms per file past the small size",
                f"{small['files']}; {small['cold_s']:.2f}; {small['unchanged_s']:.2f}",
                f"{large['files']}; {large['cold_s']:.2f}; {large['unchanged_s']:.2f}; "
                f"{r['marginal_ms_per_file']:.2f}",
                "-",
                "-",
                "-",
            ]
        )
    if "sizes" in r.get("large", {}):
        small, large = r["small"], r["large"]
        rows.append(
            [
                name,
                "runs; store build s; database size",
                f"{small['sizes']['runs']}; {small['build_seconds']}; "
                f"{_size(small.get('db_mb'), 'MB')}",
                f"{large['sizes']['runs']}; {large['build_seconds']}; "
                f"{_size(large.get('db_mb'), 'MB')}",
                "-",
                "-",
                "-",
            ]
        )
    return rows


def herd_rows(r: dict) -> list[list[str]]:
    out = []
    for count, w in r["workers"].items():
        first, last = w["first_run_started_late_s"], w["last_run_started_late_s"]
        began = w.get("first_task_started_late_s"), w.get("last_task_started_late_s")
        out.append(
            [
                f"{count} (+ scheduler)",
                f"{w['drain_s']:.1f}",
                f"{w['tasks_per_s']:.0f}",
                str(w["exactly_once"]),
                f"{_num(first, 1)} / {_num(last, 1)}",
                f"{_num(began[0], 1)} / {_num(began[1], 1)}",
                _num(w["claims_per_pg_core_s"], 0),
                f"{w['peak_rss_mb']:.0f}",
            ]
        )
    return out


def render(document: dict) -> str:
    m = document["machine"]
    head = (
        f"dagrun benchmark{' (tiny)' if document['tiny'] else ''}: {document['started']}, "
        f"Python {m['python']}, {m['cpus']} CPUs, median of {document['repeat']} run(s), "
        f"dagrun at {m.get('git', '?')}, load average at start "
        f"{m['load_average_at_start'][0]:.1f}, SQLite commit (fsync) "
        f"{m.get('commit_ms', {}).get('median', 0):.2f} ms median, "
        f"{m.get('commit_ms', {}).get('max', 0):.2f} ms max\n"
        "ratio = dagrun units/s / floor units/s (plain Python + sqlite3, one commit per "
        "task, WAL, synchronous=FULL, run as a subprocess); higher is better, 1.0 = the floor"
    )
    body = rows(document)
    parts = [head, *(["", table(HEADERS, body)] if body else [])]
    fixed = fixed_rows(document)
    if fixed:
        parts += ["", FIXED_TITLE, "", table(FIXED_HEADERS, fixed)]
    scaled = scale_rows(document)
    if scaled:
        parts += ["", "scale (issue 18): per-unit cost at the small and the large size", ""]
        parts.append(table(SCALE_HEADERS, scaled))
    for name, r in document["workloads"].items():
        if r.get("kind") == "herd" and r.get("status") == "ok":
            parts += ["", f"{name} {r['title']}", "", table(HERD_HEADERS, herd_rows(r))]
    found = targets(document)
    if found:
        parts += ["", "targets (issues 7, 18 and 29):", *found]
    return "\n".join(parts if len(parts) > 1 else [head, "", "(no workloads)"])
