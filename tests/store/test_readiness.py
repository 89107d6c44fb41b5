"""Tests for dagrun.store.readiness: trigger rules, cascades, branch and short-circuit choices,
depends_on_past and run outcomes."""

from __future__ import annotations

import itertools

import pytest

from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.states import RunState, TaskState, TriggerRule
from dagrun.store.readiness import Decisions, counted_states, evaluate, run_outcome
from tests.helpers import bare_spec

S, F, UF, K = TaskState.SUCCESS, TaskState.FAILED, TaskState.UPSTREAM_FAILED, TaskState.SKIPPED
R, N, Q, Y = TaskState.RUNNING, TaskState.NONE, TaskState.QUEUED, TaskState.UP_FOR_RETRY
QUEUED, WAIT = "queued", None
FAILED_STATES = {F, UF}


def make_spec(*tasks: TaskSpec) -> DagSpec:
    return bare_spec(*tasks)


def t(
    task_id: str, *upstream: str, rule: str = "all_success", past: bool = False, **more
) -> TaskSpec:
    return TaskSpec(
        task_id=task_id,
        kind="bash",
        upstream=upstream,
        trigger_rule=rule,
        depends_on_past=past,
        **more,
    )


def setup(task_id: str, *upstream: str) -> TaskSpec:
    return t(task_id, *upstream, is_setup=True)


def teardown(task_id: str, *upstream: str, fail_run: bool = False) -> TaskSpec:
    return t(
        task_id,
        *upstream,
        rule="all_done_setup_success",
        is_teardown=True,
        on_failure_fail_dagrun=fail_run,
    )


def verdict(
    rule: str, upstream_states: tuple[TaskState, ...], setup_states: tuple[TaskState, ...] = ()
) -> str | None:
    """What evaluate decides for task ``t`` whose upstreams are in ``upstream_states``, and
    whose upstream setup tasks (if any) are in ``setup_states``."""
    names = [f"u{i}" for i in range(len(upstream_states))]
    setups = [f"s{i}" for i in range(len(setup_states))]
    spec = make_spec(
        *(setup(n) for n in setups), *(t(n) for n in names), t("t", *setups, *names, rule=rule)
    )
    states = {
        **dict(zip(names, upstream_states, strict=True)),
        **dict(zip(setups, setup_states, strict=True)),
        "t": N,
    }
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
    ("one_done", (S, R), QUEUED),
    ("one_done", (F, N), QUEUED),
    ("one_done", (K, F), QUEUED),
    ("one_done", (UF, S), QUEUED),
    ("one_done", (S, S), QUEUED),
    ("one_done", (K, K), "skipped"),
    ("one_done", (UF, K), "skipped"),
    ("one_done", (UF, UF), "skipped"),
    ("one_done", (UF, R), WAIT),
    ("one_done", (K, Y), WAIT),
    ("all_done_min_one_success", (S, F), QUEUED),
    ("all_done_min_one_success", (S, UF), QUEUED),
    ("all_done_min_one_success", (S, S), QUEUED),
    ("all_done_min_one_success", (S,), QUEUED),
    ("all_done_min_one_success", (F, F), "upstream_failed"),
    ("all_done_min_one_success", (UF,), "upstream_failed"),
    ("all_done_min_one_success", (S, K), "skipped"),
    ("all_done_min_one_success", (F, K), "skipped"),  # a skip decides before a failure
    ("all_done_min_one_success", (K, K), "skipped"),
    ("all_done_min_one_success", (S, R), WAIT),
    ("all_done_min_one_success", (K, Y), WAIT),
    # With no setup upstream a teardown's rule is all_done (setups: SETUP_RULE_CASES).
    ("all_done_setup_success", (S, F), QUEUED),
    ("all_done_setup_success", (K, UF), QUEUED),
    ("all_done_setup_success", (K, K), QUEUED),
    ("all_done_setup_success", (S, R), WAIT),
    ("all_done_setup_success", (F, N), WAIT),
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


# (rule, states of the plain upstream tasks, states of the upstream setups, expected)
SETUP_RULE_CASES = [
    ("all_done_setup_success", (F,), (S,), QUEUED),  # the work failed: clean up anyway
    ("all_done_setup_success", (S,), (S,), QUEUED),
    ("all_done_setup_success", (K,), (S,), QUEUED),
    ("all_done_setup_success", (UF,), (S, F), QUEUED),  # one setup succeeded is enough
    ("all_done_setup_success", (), (S,), QUEUED),
    ("all_done_setup_success", (UF,), (F,), "upstream_failed"),  # nothing to clean up
    ("all_done_setup_success", (K,), (K, F), "upstream_failed"),
    ("all_done_setup_success", (UF,), (UF,), "upstream_failed"),
    ("all_done_setup_success", (K,), (K,), "skipped"),
    ("all_done_setup_success", (K,), (K, K), "skipped"),
    ("all_done_setup_success", (R,), (S,), WAIT),  # the work still runs
    ("all_done_setup_success", (Y,), (S,), WAIT),
    ("all_done_setup_success", (S,), (S, R), WAIT),
    ("all_done_setup_success", (N,), (F,), WAIT),
    # Only this rule reads setups apart: for the others a setup is an upstream like any.
    ("all_success", (S,), (F,), "upstream_failed"),
    ("all_done", (S,), (F,), QUEUED),
    ("one_done", (K,), (S,), QUEUED),
]


@pytest.mark.parametrize(
    ("rule", "upstream", "setups", "expected"),
    SETUP_RULE_CASES,
    ids=[
        f"{r}-{'+'.join(s.value for s in u)}-setups-{'+'.join(s.value for s in su)}"
        for r, u, su, _ in SETUP_RULE_CASES
    ],
)
def test_trigger_rule_table_with_setups_upstream(rule, upstream, setups, expected):
    assert verdict(rule, upstream, setups) == expected


@pytest.mark.parametrize(
    ("alias", "rule"),
    [("none_failed_or_skipped", "none_failed_min_one_success"), ("dummy", "always")],
)
def test_airflows_deprecated_rule_names_are_the_rules_they_stand_for(alias, rule):
    assert TriggerRule(alias) == TriggerRule(rule)
    assert TriggerRule(alias).value == rule


@pytest.mark.parametrize("rule", [r.value for r in TriggerRule])
def test_a_root_task_is_queued_whatever_its_rule(rule):
    decisions = evaluate(make_spec(t("root", rule=rule)), {"root": N})
    assert decisions.queue == ["root"]


def _fires(rule: str, states: tuple[TaskState, ...], setups: tuple[TaskState, ...] = ()) -> bool:
    """Independent statement of when each rule runs its task (DESIGN section 2, Airflow's
    trigger rule documentation); ``setups`` are the states of upstream setup tasks, which
    only ``all_done_setup_success`` reads apart from the other upstreams."""
    every = states + setups
    done = all(s.finished for s in every)
    failed = any(s in FAILED_STATES for s in every)
    return {
        "all_success": all(s == S for s in every),
        "all_done": done,
        "all_failed": all(s in FAILED_STATES for s in every),
        "one_success": S in every,
        "one_failed": failed,
        "one_done": S in every or F in every,
        "none_failed": done and not failed,
        "none_failed_min_one_success": done and not failed and S in every,
        "none_skipped": done and K not in every,
        "all_skipped": all(s == K for s in every),
        "all_done_min_one_success": done and K not in every and S in every,
        "all_done_setup_success": done and (not setups or S in setups),
        "always": True,
    }[rule]


#: The rules under which an upstream failure fails the task rather than skipping it.
FAILURE_PROPAGATES = {
    "all_success",
    "one_success",
    "none_failed",
    "none_failed_min_one_success",
    "all_done_min_one_success",
}
#: The rules under which a skipped upstream skips the task, even beside a failure.
SKIP_FIRST = {"all_done_min_one_success"}


def _expected(
    rule: str, states: tuple[TaskState, ...], setups: tuple[TaskState, ...] = ()
) -> str | None:
    """Queued when the rule fires; otherwise wait while an upstream is unfinished, then
    upstream_failed if the rule propagates a failure that happened (a skip first for the
    rules that say so), else skipped. A teardown's rule that does not fire once all ended
    means no setup succeeded: skipped if they were all skipped, else upstream_failed."""
    every = states + setups
    if _fires(rule, states, setups):
        return QUEUED
    if not all(s.finished for s in every):
        return WAIT
    if rule == "all_done_setup_success":
        return "skipped" if all(s == K for s in setups) else "upstream_failed"
    if rule in SKIP_FIRST and K in every:
        return "skipped"
    if rule in FAILURE_PROPAGATES and any(s in FAILED_STATES for s in every):
        return "upstream_failed"
    return "skipped"


@pytest.mark.parametrize("rule", [r.value for r in TriggerRule])
def test_every_state_combination_obeys_the_rule(rule):
    """Exhaustive over one to three upstreams: every combination of states gets exactly the
    verdict the independent statement of the rule gives."""
    for size in (1, 2, 3):
        for combo in itertools.product(list(TaskState), repeat=size):
            assert verdict(rule, combo) == _expected(rule, combo), (rule, combo)


@pytest.mark.parametrize(("plain", "setups"), [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1)])
def test_every_state_combination_with_setups_obeys_the_teardown_rule(plain, setups):
    """Exhaustive over plain and setup upstreams together for a teardown's rule."""
    rule = "all_done_setup_success"
    for combo in itertools.product(list(TaskState), repeat=plain + setups):
        states, setup_states = combo[:plain], combo[plain:]
        assert verdict(rule, states, setup_states) == _expected(rule, states, setup_states), (
            states,
            setup_states,
        )


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


def reach_spec(reach_all: bool) -> DagSpec:
    """check (short-circuit) >> a >> [after_a (all_done), strict (all_success)] >> last."""
    return make_spec(
        t("check", choice="short_circuit", ignore_downstream_trigger_rules=reach_all),
        t("a", "check"),
        t("after_a", "a", rule="all_done"),
        t("strict", "a"),
        t("last", "after_a"),
    )


REACH_STATES = {"check": S, "a": N, "after_a": N, "strict": N, "last": N}


def test_a_falsy_short_circuit_that_respects_rules_skips_its_direct_downstream_only():
    decisions = evaluate(reach_spec(False), REACH_STATES, choices={"check": None})
    assert decisions.skip == ["a", "strict"]  # strict by its own rule, a skipped upstream
    assert decisions.queue == ["after_a"]  # all_done: a skipped upstream is done
    assert decisions.run_state is None


def test_a_falsy_short_circuit_that_ignores_rules_skips_all_below_it():
    decisions = evaluate(reach_spec(True), REACH_STATES, choices={"check": None})
    assert decisions.skip == ["a", "after_a", "strict", "last"]
    assert decisions.queue == []


@pytest.mark.parametrize("reach_all", [True, False])
def test_a_truthy_short_circuit_skips_nothing_whatever_its_reach(reach_all):
    decisions = evaluate(reach_spec(reach_all), REACH_STATES, choices={})
    assert decisions.queue == ["a"] and decisions.skip == []


@pytest.mark.parametrize("reach_all", [True, False])
def test_a_falsy_short_circuit_never_skips_a_teardown(reach_all):
    """make (setup) >> check (short-circuit) >> use >> drop (teardown of make): the
    resource is made before the check, so it is dropped whatever the check says."""
    spec = make_spec(
        setup("make"),
        t("check", "make", choice="short_circuit", ignore_downstream_trigger_rules=reach_all),
        t("use", "check"),
        teardown("drop", "make", "use"),
    )
    states = {"make": S, "check": S, "use": N, "drop": N}
    first = evaluate(spec, states, choices={"check": None})
    assert first.skip == ["use"]
    assert first.queue == ["drop"]


# ---------------------------------------------------------------- setup and teardown


def scoped_spec(rule: str) -> DagSpec:
    """make (setup) >> w1 >> w2 (``rule``) >> drop (teardown of make) >> after (all_done):
    w1 and w2 are in make's scope, after is not."""
    return make_spec(
        setup("make"),
        t("w1", "make"),
        t("w2", "w1", rule=rule),
        teardown("drop", "make", "w2"),
        t("after", "drop", rule="all_done"),
    )


# (make's state, w1's, w2's rule, what w2 becomes): w2 also needs make, which is not its
# direct upstream, to succeed (Airflow's implicit all_success on the setups in scope).
SCOPE_CASES = [
    (S, S, "all_success", QUEUED),
    (S, F, "all_done", QUEUED),
    (S, K, "none_failed", QUEUED),
    (F, UF, "all_done", "upstream_failed"),  # no resource: the work cannot run
    (UF, UF, "always", "upstream_failed"),
    (K, K, "all_done", "skipped"),
    (K, K, "none_failed", "skipped"),
    (N, S, "all_success", WAIT),  # make was cleared: w2 waits for it again
    (R, S, "all_done", WAIT),
    (N, F, "all_done", WAIT),  # its own rule would run it: it still waits for make
    (N, K, "all_success", "skipped"),  # its own rule ends it before make does
    (N, F, "all_success", "upstream_failed"),
]


@pytest.mark.parametrize(("make", "w1", "rule", "expected"), SCOPE_CASES)
def test_a_task_in_a_setups_scope_needs_the_setup_to_succeed(make, w1, rule, expected):
    states = {"make": make, "w1": w1, "w2": N, "drop": N, "after": N}
    assert verdict_of("w2", evaluate(scoped_spec(rule), states)) == expected


def test_a_task_past_the_teardown_is_out_of_the_setups_scope():
    spec = scoped_spec("all_done")
    states = {"make": F, "w1": UF, "w2": UF, "drop": N, "after": N}
    decisions = evaluate(spec, states)
    assert decisions.upstream_failed == ["drop"]  # no setup succeeded: nothing to drop
    assert decisions.queue == ["after"]  # all_done, and make's scope ends at drop


def test_a_setup_without_a_teardown_scopes_everything_below_it():
    spec = make_spec(setup("make"), t("w1", "make"), t("w2", "w1", rule="all_done"))
    assert verdict_of("w2", evaluate(spec, {"make": F, "w1": UF, "w2": N})) == "upstream_failed"
    assert verdict_of("w2", evaluate(spec, {"make": N, "w1": S, "w2": N})) == WAIT


def test_the_teardown_runs_after_failed_work_and_the_run_fails_for_the_work():
    spec = scoped_spec("all_success")
    states = {"make": S, "w1": F, "w2": N, "drop": N, "after": N}
    first = evaluate(spec, states)
    assert first.upstream_failed == ["w2"]
    assert first.queue == ["drop"]
    done = evaluate(spec, {**states, "w2": UF, "drop": S, "after": S})
    assert done.run_state == RunState.FAILED


def test_only_deciding_the_tasks_below_an_ended_setup_reads_the_setup():
    """The partial pass a commit makes (``only``) decides with the setups in scope."""
    spec = scoped_spec("all_success")
    states = {"make": R, "w1": S, "w2": N}
    assert evaluate(spec, states, only=["w2"]).queue == []
    assert evaluate(spec, {**states, "make": S}, only=["w2"]).queue == ["w2"]


def test_a_setup_added_after_the_run_was_made_is_not_waited_for():
    """A run made before ``make`` existed has no instance of it (as for any upstream)."""
    states = {"w1": S, "w2": N, "drop": N, "after": N}
    assert verdict_of("w2", evaluate(scoped_spec("all_success"), states)) == QUEUED


def test_a_spec_without_setups_has_no_scopes():
    spec = branch_spec("all_success")
    assert spec.setup_ids == frozenset() and spec.setup_scopes == {}
    assert spec.relevant_setups == {} and spec.setup_dependants == {}


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


@pytest.mark.parametrize(
    ("work", "drop", "fail_run", "expected"),
    [
        (S, S, False, RunState.SUCCESS),
        (S, F, False, RunState.SUCCESS),  # a teardown's failure alone does not fail the run
        (S, F, True, RunState.FAILED),  # unless it was made with on_failure_fail_dagrun
        (F, S, False, RunState.FAILED),  # the work's failure does
        (F, F, False, RunState.FAILED),
        (S, R, False, None),  # the run ends once the teardown has
        (S, Y, True, None),
    ],
)
def test_run_outcome_with_a_teardown(work, drop, fail_run, expected):
    spec = make_spec(
        setup("make"), t("work", "make"), teardown("drop", "make", "work", fail_run=fail_run)
    )
    states = {"make": S, "work": work, "drop": drop}
    assert run_outcome(counted_states(spec, states)) == expected
    assert run_outcome(counted_states(spec, list(states.items()))) == expected
    assert evaluate(spec, states).run_state == expected


def test_evaluate_reports_the_run_end_after_its_own_decisions():
    spec = make_spec(t("a"), t("b", "a", rule="all_failed"))
    decisions = evaluate(spec, {"a": S, "b": N})
    assert decisions.skip == ["b"]
    assert decisions.run_state == RunState.SUCCESS
