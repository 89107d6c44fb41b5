"""Freezing a DAG into its spec (dagrun.parsing.loader): the tasks in topological order,
ties in the order they were declared, exactly as networkx orders them, and a cycle named."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from dagrun import DAG, BashTask
from dagrun.errors import DagFileError
from dagrun.parsing.loader import build_spec


def random_dag(seed: int) -> tuple[DAG, nx.DiGraph]:
    """A DAG of 30 tasks declared in a shuffled order, each with random upstreams among
    the tasks before it in a hidden order (so it has no cycle), and the same graph in
    networkx."""
    rng = random.Random(seed)
    names = [f"t{i:02d}" for i in range(30)]
    hidden = names[:]
    rng.shuffle(hidden)
    graph = nx.DiGraph()
    with DAG(f"random_{seed}", schedule=None) as dag:
        tasks = {name: BashTask(name, command="true") for name in names}
        graph.add_nodes_from(names)
        for i, name in enumerate(hidden):
            for up in rng.sample(hidden[:i], min(i, rng.randint(0, 3))):
                tasks[up] >> tasks[name]
                graph.add_edge(up, name)
    return dag, graph


@pytest.mark.parametrize("seed", range(20))
def test_tasks_are_ordered_as_networkx_orders_them(seed):
    dag, graph = random_dag(seed)
    declared = {name: i for i, name in enumerate(dag.tasks)}
    expected = list(nx.lexicographical_topological_sort(graph, key=declared.__getitem__))
    assert [t.task_id for t in build_spec(dag, "random.py").tasks] == expected


def test_a_cycle_is_named():
    with DAG("loop", schedule=None) as dag:
        a, b, c = (BashTask(n, command="true") for n in "abc")
        a >> b >> c >> b
    with pytest.raises(DagFileError, match=r"has a cycle: b -> c -> b"):
        build_spec(dag, "loop.py")
