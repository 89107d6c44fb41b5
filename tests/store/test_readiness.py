"""Tests for dagrun.store.readiness: trigger rules, cascades, branch and short-circuit choices,
depends_on_past and run outcomes."""

from __future__ import annotations

import itertools

import pytest

from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.states import RunState, TaskState, TriggerRule
from dagrun.store.readiness import Decisions, evaluate, run_outcome
from tests.helpers import bare_spec

S, F, UF, K = TaskState.SUCCESS, TaskState.FAILED, TaskState.UPSTREAM_FAILED, TaskState.SKIPPED
R, N, Q, Y = TaskState.RUNNING, TaskState.NONE, TaskState.QUEUED, TaskState.UP_FOR_RETRY
QUEUED, WAIT = "queued", None
FAILED_STATES = {F, UF}


def make_spec(*tasks: TaskSpec) -> DagSpec:
    return bare_spec(*tasks)


def t(task_id: str, *upstream: str, rule: str = "all_success", past: bool = False) -> TaskSpec:
    return TaskSpec(
        task_id=task_id,
        kind="bash",
        upstream=upstream,
        trigger_rule=rule,
        depends_on_past=past,
    )


def verdict(rule: str, upstream_states: tuple[TaskState, ...]) -> str | None:
    """What evaluate decides for task ``t`` whose upstreams are in ``upstream_states``."""
    names = [f"u{i}" for i in range(len(upstream_states))]
    spec = make_spec(*(t(n) for n in names), t("t", *names, rule=rule))
    states = {**dict(zip(names, upstream_states, strict=True)), "t": N}
    return verdict_of("t", evaluate(spec, states))


def verdict_of(task_id: str, decisions: Decisions) -> str | None:
    """The one decision ``decisions`` holds for ``task_id``, or WAIT."""
    found = [
        state
        for state, ids in (
            (QUEUED, decisions.queue),
            ("upstream_failed", decisions.upstream_failed),
            ("skipped", decisions.skip),
        )
        if task_id in ids
    ]
    assert len(found) <= 1
    return found[0] if found else WAIT


# (rule, upstream states, expected verdict for the task)
RULE_CASES = [
    ("all_success", (S, S), QUEUED),
    ("all_success", (S,), QUEUED),
    ("all_success", (S, R), WAIT),
    ("all_success", (S, Q), WAIT),
    ("all_success", (S, Y), WAIT),
    ("all_success", (S, N), WAIT),
    ("all_success", (S, F), "upstream_failed"),
    ("all_success", (S, UF), "upstream_failed"),
    ("all_success", (F, F), "upstream_failed"),
    ("all_success", (S, K), "skipped"),
    ("all_success", (K, K), "skipped"),
    ("all_done", (S, F), QUEUED),
    ("all_done", (K, UF), QUEUED),
    ("all_done", (F, F), QUEUED),
    ("all_done", (S, S), QUEUED),
    ("all_done", (S, R), WAIT),
    ("all_done", (F, Y), WAIT),
    ("all_failed", (F, F), QUEUED),
    ("all_failed", (F, UF), QUEUED),
    ("all_failed", (F, S), "skipped"),
    ("all_failed", (F, K), "skipped"),
    ("all_failed", (S, S), "skipped"),
    ("all_failed", (F, R), WAIT),
    ("one_success", (S, R), QUEUED),
    ("one_success", (N, S), QUEUED),
    ("one_success", (K, S), QUEUED),
    ("one_success", (F, S), QUEUED),
    ("one_success", (F, F), "upstream_failed"),
    ("one_success", (F, K), "upstream_failed"),
    ("one_success", (K, K), "skipped"),
    ("one_success", (F, R), WAIT),
    ("one_success", (Y, K), WAIT),
    ("one_failed", (F, R), QUEUED),
    ("one_failed", (UF, N), QUEUED),
    ("one_failed", (S, F), QUEUED),
    ("one_failed", (S, S), "skipped"),
    ("one_failed", (S, K), "skipped"),
    ("one_failed", (S, R), WAIT),
    ("one_failed", (Y, S), WAIT),
    ("none_failed", (S, K), QUEUED),
    ("none_failed", (K, K), QUEUED),
    ("none_failed", (S, S), QUEUED),
    ("none_failed", (S, F), "upstream_failed"),
    ("none_failed", (UF, S), "upstream_failed"),
    ("none_failed", (S, R), WAIT),
    ("none_failed", (K, Y), WAIT),
    ("none_failed_min_one_success", (S, K), QUEUED),
    ("none_failed_min_one_success", (S, S), QUEUED),
    ("none_failed_min_one_success", (S,), QUEUED),
    ("none_failed_min_one_success", (K, K), "skipped"),
    ("none_failed_min_one_success", (K,), "skipped"),
    ("none_failed_min_one_success", (S, F), "upstream_failed"),
    ("none_failed_min_one_success", (K, UF), "upstream_failed"),
    ("none_failed_min_one_success", (S, R), WAIT),
    ("none_failed_min_one_success", (K, N), WAIT),
    ("none_failed_min_one_success", (F, Y), WAIT),
    ("none_skipped", (S, S), QUEUED),
    ("none_skipped", (S, F), QUEUED),
    ("none_skipped", (F, UF), QUEUED),
    ("none_skipped", (S, K), "skipped"),
    ("none_skipped", (F, K), "skipped"),
    ("none_skipped", (K, K), "skipped"),
    ("none_skipped", (S, R), WAIT),
    ("none_skipped", (K, Q), WAIT),
    ("all_skipped", (K, K), QUEUED),
    ("all_skipped", (K,), QUEUED),
    ("all_skipped", (K, S), "skipped"),
    ("all_skipped", (K, F), "skipped"),
    ("all_skipped", (UF, UF), "skipped"),
    ("all_skipped", (K, R), WAIT),
    ("all_skipped", (S, N), WAIT),
    ("always", (S, S), QUEUED),
    ("always", (F, K), QUEUED),
    ("always", (N, N), QUEUED),
    ("always", (R, Q), QUEUED),
    ("always", (Y, UF), QUEUED),
]


@pytest.mark.parametrize(
    ("rule", "upstream", "expected"),
    RULE_CASES,
    ids=[f"{r}-{'+'.join(s.value for s in u)}" for r, u, _ in RULE_CASES],
)
def test_trigger_rule_table(rule, upstream, expected):
    assert verdict(rule, upstream) == expected


def test_every_rule_appears_in_the_table():
    assert {rule for rule, _, _ in RULE_CASES} == {r.value for r in TriggerRule}


@pytest.mark.parametrize("rule", [r.value for r in TriggerRule])
def test_a_root_task_is_queued_whatever_its_rule(rule):
    decisions = evaluate(make_spec(t("root", rule=rule)), {"root": N})
    assert decisions.queue == ["root"]


def _fires(rule: str, states: tuple[TaskState, ...]) -> bool:
    """Independent statement of when each rule runs its task (DESIGN section 2)."""
    done = all(s.finished for s in states)
    failed = any(s in FAILED_STATES for s in states)
    return {
        "all_success": all(s == S for s in states),
        "all_done": done,
        "all_failed": all(s in FAILED_STATES for s in states),
        "one_success": S in states,
        "one_failed": failed,
        "none_failed": done and not failed,
        "none_failed_min_one_success": done and not failed and S in states,
        "none_skipped": done and K not in states,
        "all_skipped": all(s == K for s in states),
        "always": True,
    }[rule]


#: The rules under which an upstream failure fails the task rather than skipping it.
FAILURE_PROPAGATES = {"all_success", "one_success", "none_failed", "none_failed_min_one_success"}


def _expected(rule: str, states: tuple[TaskState, ...]) -> str | None:
    """Queued when the rule fires; otherwise wait while an upstream is unfinished, then
    upstream_failed if the rule propagates a failure that happened, else skipped."""
    if _fires(rule, states):
        return QUEUED
    if not all(s.finished for s in states):
        return WAIT
    if rule in FAILURE_PROPAGATES and any(s in FAILED_STATES for s in states):
        return "upstream_failed"
    return "skipped"


@pytest.mark.parametrize("rule", [r.value for r in TriggerRule])
def test_every_state_combination_obeys_the_rule(rule):
    """Exhaustive over one to three upstreams: every combination of states gets exactly the
    verdict the independent statement of the rule gives."""
    for size in (1, 2, 3):
        for combo in itertools.product(list(TaskState), repeat=size):
            assert verdict(rule, combo) == _expected(rule, combo), (rule, combo)


# ---------------------------------------------------------------- cascades


def test_upstream_failed_cascades_down_a_chain_in_one_pass():
    spec = make_spec(t("a"), t("b", "a"), t("c", "b"), t("d", "c"))
    decisions = evaluate(spec, {"a": F, "b": N, "c": N, "d": N})
    assert decisions.upstream_failed == ["b", "c", "d"]
    assert decisions.queue == []
    assert decisions.run_state == RunState.FAILED


def test_skips_cascade_and_a_skipped_run_succeeds():
    spec = make_spec(t("a"), t("b", "a"), t("c", "b"))
    decisions = evaluate(spec, {"a": K, "b": N, "c": N})
    assert decisions.skip == ["b", "c"]
    assert decisions.run_state == RunState.SUCCESS


def test_cascade_stops_at_a_rule_that_runs_after_failure():
    spec = make_spec(
        t("a"),
        t("b", "a"),
        t("cleanup", "b", rule="all_done"),
        t("alert", "b", rule="one_failed"),
        t("after_cleanup", "cleanup"),
    )
    decisions = evaluate(spec, {"a": F, "b": N, "cleanup": N, "alert": N, "after_cleanup": N})
    assert decisions.upstream_failed == ["b"]
    assert decisions.queue == ["cleanup", "alert"]
    assert decisions.run_state is None


def test_only_tasks_in_state_none_are_decided():
    spec = make_spec(t("a"), t("b", "a"), t("c", "a"))
    decisions = evaluate(spec, {"a": S, "b": R, "c": N})
    assert decisions.queue == ["c"]
    assert decisions.run_state is None


def test_a_task_without_an_instance_is_ignored():
    spec = make_spec(t("a"), t("added_later", "a"))
    decisions = evaluate(spec, {"a": S})
    assert decisions.queue == []
    assert decisions.run_state == RunState.SUCCESS


def test_diamond_waits_for_both_branches():
    spec = make_spec(t("a"), t("b", "a"), t("c", "a"), t("d", "b", "c"))
    assert evaluate(spec, {"a": S, "b": S, "c": R, "d": N}).queue == []
    assert evaluate(spec, {"a": S, "b": S, "c": S, "d": N}).queue == ["d"]


# ---------------------------------------------------------------- branch and short-circuit


def branch_spec(join_rule: str) -> DagSpec:
    """branch >> [a, b >> b2] >> join: two paths, one of them two tasks long."""
    return make_spec(
        t("branch"),
        t("a", "branch"),
        t("b", "branch"),
        t("b2", "b"),
        t("join", "a", "b2", rule=join_rule),
    )


@pytest.mark.parametrize(
    ("join_rule", "join_verdict"),
    [("none_failed_min_one_success", QUEUED), ("all_success", "skipped")],
)
def test_a_branch_skips_the_path_it_did_not_choose(join_rule, join_verdict):
    spec = branch_spec(join_rule)
    choices = {"branch": frozenset({"a"})}
    states = {"branch": S, "a": N, "b": N, "b2": N, "join": N}
    first = evaluate(spec, states, choices=choices)
    assert first.queue == ["a"]
    assert first.skip == ["b", "b2"]
    assert first.run_state is None
    after = {**states, "a": S, "b": K, "b2": K}
    assert verdict_of("join", evaluate(spec, after, choices=choices)) == join_verdict


def test_a_branch_choosing_nothing_skips_every_direct_downstream_whatever_its_rule():
    spec = make_spec(
        t("branch"),
        t("a", "branch", rule="all_done"),
        t("b", "branch", rule="always"),
        t("c", "branch", rule="none_skipped"),
        t("after", "a", "b", "c", rule="all_done"),
    )
    states = {"branch": S, "a": N, "b": N, "c": N, "after": N}
    decisions = evaluate(spec, states, choices={"branch": frozenset()})
    assert decisions.skip == ["a", "b", "c"]
    assert decisions.queue == ["after"]


def test_a_chosen_task_follows_its_own_rule():
    spec = make_spec(
        t("branch"),
        t("broken"),
        t("chosen", "branch", "broken", rule="all_done"),
        t("other", "branch", "broken", rule="all_done"),
    )
    states = {"branch": S, "broken": F, "chosen": N, "other": N}
    decisions = evaluate(spec, states, choices={"branch": frozenset({"chosen"})})
    assert decisions.queue == ["chosen"]
    assert decisions.skip == ["other"]


def test_a_branch_does_not_skip_a_direct_downstream_that_is_also_below_its_choice():
    spec = make_spec(t("branch"), t("work", "branch"), t("join", "branch", "work"))
    choices = {"branch": frozenset({"work"})}
    first = evaluate(spec, {"branch": S, "work": N, "join": N}, choices=choices)
    assert (first.queue, first.skip) == (["work"], [])
    after = evaluate(spec, {"branch": S, "work": S, "join": N}, choices=choices)
    assert after.queue == ["join"]


def test_a_choice_skips_only_tasks_still_waiting():
    spec = branch_spec("all_success")
    states = {"branch": S, "a": N, "b": R, "b2": N, "join": N}
    decisions = evaluate(spec, states, choices={"branch": frozenset({"a"})})
    assert decisions.queue == ["a"]
    assert decisions.skip == []


def short_circuit_spec() -> DagSpec:
    """check >> a >> cleanup (all_done) >> report (always), beside an independent chain."""
    return make_spec(
        t("check"),
        t("a", "check"),
        t("cleanup", "a", rule="all_done"),
        t("report", "cleanup", rule="always"),
        t("other"),
        t("after_other", "other"),
    )


SHORT_CIRCUIT_STATES = {
    "check": S,
    "a": N,
    "cleanup": N,
    "report": N,
    "other": S,
    "after_other": N,
}


def test_a_falsy_short_circuit_skips_everything_below_it_whatever_the_rules():
    decisions = evaluate(short_circuit_spec(), SHORT_CIRCUIT_STATES, choices={"check": None})
    assert decisions.skip == ["a", "cleanup", "report"]
    assert decisions.queue == ["after_other"]
    assert decisions.run_state is None


def test_a_truthy_short_circuit_is_absent_and_changes_nothing():
    spec = short_circuit_spec()
    decisions = evaluate(spec, SHORT_CIRCUIT_STATES, choices={})
    assert decisions == evaluate(spec, SHORT_CIRCUIT_STATES)
    assert decisions.queue == ["a", "report", "after_other"]
    assert decisions.skip == []


@pytest.mark.parametrize("choices", [None, {}])
def test_without_choices_every_path_follows_its_rules(choices):
    spec = branch_spec("all_success")
    states = {"branch": S, "a": N, "b": N, "b2": N, "join": N}
    decisions = evaluate(spec, states, choices=choices)
    assert decisions == evaluate(spec, states)
    assert decisions.queue == ["a", "b"]
    assert decisions.skip == []


# ---------------------------------------------------------------- depends_on_past


@pytest.mark.parametrize(
    ("past_ok", "queued"),
    [
        (None, True),
        ({}, True),
        ({"p": True}, True),
        ({"p": False}, False),
        ({"other": False}, True),
    ],
    ids=["no-info", "no-previous-run", "previous-ok", "previous-not-ok", "other-task"],
)
def test_depends_on_past_waits_for_the_previous_run(past_ok, queued):
    spec = make_spec(t("p", past=True), t("q", "p"))
    decisions = evaluate(spec, {"p": N, "q": N}, past_ok)
    assert decisions.queue == (["p"] if queued else [])
    assert decisions.run_state is None


def test_depends_on_past_does_not_hold_back_an_upstream_failure():
    spec = make_spec(t("a"), t("p", "a", past=True))
    decisions = evaluate(spec, {"a": F, "p": N}, {"p": False})
    assert decisions.upstream_failed == ["p"]
    assert decisions.run_state == RunState.FAILED


def test_depends_on_past_only_affects_its_own_task():
    spec = make_spec(t("p", past=True), t("free"))
    decisions = evaluate(spec, {"p": N, "free": N}, {"p": False})
    assert decisions.queue == ["free"]


# ---------------------------------------------------------------- run outcome


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([], None),
        ([S, S], RunState.SUCCESS),
        ([S, K], RunState.SUCCESS),
        ([K, K], RunState.SUCCESS),
        ([S, F], RunState.FAILED),
        ([S, UF], RunState.FAILED),
        ([F, F], RunState.FAILED),
        ([S, R], None),
        ([F, R], None),
        ([S, Q], None),
        ([F, N], None),
        ([S, Y], None),
    ],
)
def test_run_outcome(states, expected):
    assert run_outcome(states) == expected
    assert run_outcome(iter(states)) == expected


def test_evaluate_reports_the_run_end_after_its_own_decisions():
    spec = make_spec(t("a"), t("b", "a", rule="all_failed"))
    decisions = evaluate(spec, {"a": S, "b": N})
    assert decisions.skip == ["b"]
    assert decisions.run_state == RunState.SUCCESS
