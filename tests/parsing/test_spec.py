"""A spec as stored: its tasks keep only what differs from the defaults, and read back equal."""

from __future__ import annotations

import json

from dagrun.authoring.sensor_options import ExternalMarker, SensorSpec
from dagrun.parsing.spec import DagSpec, TaskSpec, spec_from
from tests.helpers import bare_spec


def test_a_task_of_defaults_stores_its_id_kind_and_upstream_only():
    spec = bare_spec(TaskSpec(task_id="t", kind="bash", upstream=()))
    assert json.loads(spec.to_json())["tasks"] == [{"task_id": "t", "kind": "bash", "upstream": []}]
    assert DagSpec.from_json(spec.to_json()) == spec


def test_a_task_that_sets_every_field_reads_back_equal():
    rich = TaskSpec(
        task_id="t",
        kind="python",
        upstream=("a", "b"),
        trigger_rule="all_done",
        retries=3,
        retry_delay=2.5,
        retry_exponential_backoff=False,
        max_retry_delay=60.0,
        execution_timeout=30.0,
        depends_on_past=True,
        priority_weight=5,
        pool="p",
        group="g.h",
        data_inputs=("a",),
        callbacks=("failure",),
        choice="branch",
        mapped=(("x", "a", None), ("y", None, 3)),
        outlets=("asset",),
        sensor=SensorSpec(60.0, 3600.0, "reschedule", False),
        is_setup=True,
        is_teardown=False,
        on_failure_fail_dagrun=True,
        ignore_downstream_trigger_rules=False,
        marker=ExternalMarker("other", "wait", "{{ ds }}", 10),
    )
    spec = bare_spec(TaskSpec(task_id="a", kind="bash", upstream=()), rich)
    stored = json.loads(spec.to_json())["tasks"][1]
    assert set(stored) == {f for f in stored if getattr(rich, f) != getattr(TaskSpec, f, None)}
    assert len(stored) == 23  # every field but is_teardown, left at its default
    assert DagSpec.from_json(spec.to_json()) == spec


def test_a_received_spec_is_what_a_read_of_its_text_gives_without_decoding_again():
    spec = bare_spec(TaskSpec(task_id="t", kind="bash", upstream=()), dag_id="received")
    received = DagSpec.from_wire(spec.to_json())
    assert spec_from(received.digest, "not JSON: never decoded") is received


def test_a_task_is_decoded_without_init_so_it_must_not_need_a_post_init():
    """``from_json`` builds tasks from their fields directly (fast): a ``__post_init__``
    would be skipped, so TaskSpec must not grow one."""
    assert not hasattr(TaskSpec, "__post_init__")
