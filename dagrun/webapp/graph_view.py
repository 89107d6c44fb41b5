"""The Graph view of a DAG: where each task's box, each edge and each group's frame go, and
what a run paints on them, for the SVG the graph page draws on the server.

The layout depends only on the DAG's spec, so it is computed once per spec (a small LRU keyed
by the spec object, which ``dagrun.parsing.spec.spec_from`` already shares per stored hash) and a
request only colours it with a run's task instances.

Tasks go left to right by layer (``networkx.topological_generations``: every edge goes to a
later layer), ordered within a layer by barycentre sweeps to cut crossings. A task group
must stay one rectangle, so the vertical placement is done per group, inside out: a group's
tasks and sub-group blocks are stacked on a per-layer skyline (an item sits below whatever
already occupies any of its layers), each pulled down toward the boxes its upstreams sit in.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import reduce
from statistics import fmean
from typing import ClassVar

import networkx as nx

from dagrun.parsing.graph_export import GroupNode, group_tree
from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.states import TaskState, merged
from dagrun.store.run_reads import RunRow
from dagrun.store.task_reads import TaskRow
from dagrun.webapp.documents import GraphPictureJson
from dagrun.webapp.urls import run_url

BOX_WIDTH = 176
BOX_HEIGHT = 34
#: Space between two boxes stacked in one layer.
ROW_GAP = 14
#: Room between two columns of boxes for the edges, whatever frames take of it.
EDGE_GAP = 56
#: A group frame's margin around what it holds (left, right, bottom), per nesting level.
FRAME_PAD = 10
#: The band at the top of a group frame that holds its label.
FRAME_HEAD = 20
MARGIN = 16
#: Characters of a task id that fit in a box (12px type); longer ids are cut with "…".
LABEL_CHARS = 22
#: Average width of a character of a group label (11px type), to cut labels to their frame.
GROUP_CHAR_WIDTH = 6.5
#: What a mapped task shows when no run tells how many instances it has.
MAPPED_MARK = " [ ]"
#: What it shows in a run where it was expanded: its number of instances.
MAPPED_COUNT = " \N{MULTIPLICATION SIGN} {}"
#: Characters of a task's kind that fit in small type in the box's top-right corner.
KIND_CHARS = 26
LAYOUT_CACHE_SIZE = 64


@dataclass(frozen=True)
class Node:
    """A task's box: its layer (column) and the top-left corner of its box."""

    task_id: str
    layer: int
    x: int
    y: int
    mapped: bool
    #: What the task is, in small type on its box (``kind_of``).
    kind: str = ""
    width: ClassVar[int] = BOX_WIDTH
    height: ClassVar[int] = BOX_HEIGHT

    @property
    def label_at(self) -> tuple[int, int]:
        """Where the caption's baseline starts: inset, a little below the middle for 12px
        type, under the kind."""
        return self.x + 8, self.y + BOX_HEIGHT // 2 + 7

    @property
    def kind_at(self) -> tuple[int, int]:
        """Where the kind's baseline ends (it is right-aligned): the top-right corner."""
        return self.x + BOX_WIDTH - 6, self.y + 10


def kind_of(task: TaskSpec) -> str:
    """What a task is, as its box says it: ``bash``, ``python``, ``@task`` or an Airflow
    operator's class name, ``sensor`` for a native sensor, and ``mapped`` after a mapped
    task's; cut to ``KIND_CHARS``."""
    kind = "sensor" if task.sensor is not None and not task.kind.endswith("Sensor") else task.kind
    kind += " \N{MIDDLE DOT} mapped" if task.mapped else ""
    return kind if len(kind) <= KIND_CHARS else kind[: KIND_CHARS - 1] + "…"


@dataclass(frozen=True)
class Edge:
    """An arrow from the right side of the upstream box to the left side of the downstream
    one: ``d`` is the SVG path (a cubic curve)."""

    upstream: str
    downstream: str
    d: str
    #: Its label (Airflow's ``Label``), drawn at ``label_at``, the curve's middle.
    label: str | None = None
    label_at: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class Frame:
    """A task group's frame, enclosing the boxes of its tasks and of its nested groups."""

    path: str
    label: str
    x: int
    y: int
    width: int
    height: int

    @property
    def label_at(self) -> tuple[int, int]:
        """Where the label's baseline starts, in the band at the top of the frame."""
        return self.x + 8, self.y + FRAME_HEAD - 6


@dataclass(frozen=True)
class Layout:
    """Where everything of one spec goes; frames outermost first, so they draw underneath."""

    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    frames: tuple[Frame, ...]
    width: int
    height: int


@dataclass(frozen=True)
class TaskBox:
    """A task's box as drawn: its node, its state in the run (``none`` without a run), the
    visible caption, the hover title, and the link to the task instance (None without a run)."""

    node: Node
    state: str
    caption: str
    title: str
    href: str | None

    @property
    def task_id(self) -> str:
        return self.node.task_id


@dataclass(frozen=True)
class GraphPicture:
    """The SVG model: a layout and its boxes coloured by a run (or by none)."""

    layout: Layout
    boxes: list[TaskBox]

    @property
    def edges(self) -> tuple[Edge, ...]:
        return self.layout.edges

    @property
    def frames(self) -> tuple[Frame, ...]:
        return self.layout.frames

    def to_json(self) -> GraphPictureJson:
        """The picture as data for ``/api/dags/<id>/graph``: what the page draws, in the
        page's coordinates, so a client can draw it the same way."""
        return {
            "width": self.layout.width,
            "height": self.layout.height,
            "nodes": [
                {
                    "task_id": b.task_id,
                    "layer": b.node.layer,
                    "x": b.node.x,
                    "y": b.node.y,
                    "width": b.node.width,
                    "height": b.node.height,
                    "mapped": b.node.mapped,
                    "state": b.state,
                }
                for b in self.boxes
            ],
            "edges": [(e.upstream, e.downstream) for e in self.edges],
            "groups": [
                {"group": f.path, "x": f.x, "y": f.y, "width": f.width, "height": f.height}
                for f in self.frames
            ],
        }


def picture(spec: DagSpec, run: RunRow | None, instances: list[TaskRow]) -> GraphPicture:
    """The graph of ``spec`` coloured by ``run``'s task instances (every box ``none`` when
    ``run`` is None); instances of tasks the spec no longer has are not drawn."""
    layout = layout_of(spec)
    if run is None:
        return GraphPicture(layout, [_plain_box(node) for node in layout.nodes])
    by_task: dict[str, list[TaskRow]] = {}
    for row in instances:
        by_task.setdefault(row.task_id, []).append(row)
    page = run_url(spec.dag_id, run.run_id)
    boxes = [_run_box(node, page, by_task.get(node.task_id, [])) for node in layout.nodes]
    return GraphPicture(layout, boxes)


# ---------------------------------------------------------------- colouring by a run


def _plain_box(node: Node) -> TaskBox:
    mark = MAPPED_MARK if node.mapped else ""
    title = node.task_id + ("\nmapped: one instance per element" if node.mapped else "")
    return TaskBox(node, TaskState.NONE.value, _fit(node.task_id, mark), title, None)


def _run_box(node: Node, run_page: str, rows: list[TaskRow]) -> TaskBox:
    """A box in a run: a mapped task's indexes add up to one state (``states.merged``) and
    show their count; the link goes to the first instance's line of the run page."""
    indexes = [r for r in rows if r.map_index >= 0]
    states = [TaskState(r.state) for r in rows]
    state = reduce(merged, states) if states else TaskState.NONE
    anchor = node.task_id + (f"-{indexes[0].map_index}" if indexes else "")
    href = f"{run_page}#task-{anchor}"
    tried = _tried(rows)
    if not node.mapped:
        return TaskBox(node, state.value, _fit(node.task_id, ""), _title(node, state, tried), href)
    if not indexes:
        caption, detail = _fit(node.task_id, MAPPED_MARK), "mapped, not expanded yet"
    else:
        counts = Counter(r.state for r in indexes)
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=_most_first))
        caption = _fit(node.task_id, MAPPED_COUNT.format(len(indexes)))
        detail = f"{len(indexes)} mapped: {summary}" + (f" · at most {tried}" if tried else "")
    return TaskBox(node, state.value, caption, _title(node, state, detail), href)


def _tried(rows: list[TaskRow]) -> str:
    """``try N of M`` (the most tries of a mapped task's indexes); empty before any try."""
    tries = max((r.try_number for r in rows), default=0)
    return f"try {tries} of {max(r.max_tries for r in rows)}" if tries else ""


def _most_first(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def _title(node: Node, state: TaskState, detail: str) -> str:
    return f"{node.task_id}\n{state.value}" + (f" · {detail}" if detail else "")


def _fit(text: str, suffix: str, chars: int = LABEL_CHARS) -> str:
    """``text`` cut with "…" so that it and ``suffix`` fit in ``chars`` characters: the box
    keeps its width, the full id is in the title."""
    room = max(1, chars - len(suffix))
    return (text if len(text) <= room else text[: room - 1] + "…") + suffix


# ---------------------------------------------------------------- the layout, once per spec

_CACHE: OrderedDict[int, tuple[DagSpec, Layout]] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def layout_of(spec: DagSpec) -> Layout:
    """The layout of ``spec``, from the LRU when this very spec object was laid out before.
    Keyed by identity, with the spec held in the entry so its id cannot be reused: hashing
    or comparing a 200-task spec on every request would cost more than a lookup should."""
    key = id(spec)
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None:
            _CACHE.move_to_end(key)
            return found[1]
    layout = compute_layout(spec)
    with _CACHE_LOCK:
        _CACHE[key] = (spec, layout)
        _CACHE.move_to_end(key)
        while len(_CACHE) > LAYOUT_CACHE_SIZE:
            _CACHE.popitem(last=False)
    return layout


def compute_layout(spec: DagSpec) -> Layout:
    """Lay ``spec`` out from scratch (``layout_of`` caches this)."""
    graph = spec.graph()
    upstream = {t.task_id: t.upstream for t in spec.tasks}
    layer_of = _layers(graph)
    rank = _ranks(spec, graph, layer_of)
    tree = group_tree(spec)
    depth = _nesting(tree) - 1
    block = _arrange(tree, _Context(layer_of, rank, upstream))
    column = BOX_WIDTH + EDGE_GAP + 2 * FRAME_PAD * depth

    def left(layer: int) -> int:
        return MARGIN + FRAME_PAD * depth + layer * column

    nodes = {
        t.task_id: Node(
            t.task_id,
            layer_of[t.task_id],
            left(layer_of[t.task_id]),
            MARGIN + block.tops[t.task_id],
            bool(t.mapped),
            kind_of(t),
        )
        for t in spec.tasks
    }
    labels = spec.labels
    edges = tuple(
        _edge(nodes[up], nodes[t.task_id], labels.get((up, t.task_id)))
        for t in spec.tasks
        for up in t.upstream
    )
    frames = tuple(_frame(f, left) for f in block.frames)
    layers = max(layer_of.values(), default=0) + 1
    width = left(layers - 1) + BOX_WIDTH + FRAME_PAD * depth + MARGIN
    return Layout(tuple(nodes.values()), edges, frames, width, block.height + 2 * MARGIN)


def _layers(graph: nx.DiGraph) -> dict[str, int]:
    """Each task's column: its topological generation (the longest chain above it)."""
    return {
        task_id: layer
        for layer, generation in enumerate(nx.topological_generations(graph))
        for task_id in generation
    }


def _ranks(spec: DagSpec, graph: nx.DiGraph, layer_of: dict[str, int]) -> dict[str, float]:
    """Each task's place in its layer as a fraction (0..1), after barycentre sweeps down,
    up and down again: a task moves toward the mean place of its neighbours on the side the
    sweep comes from (spec order, which is definition order, breaks ties)."""
    layers: list[list[str]] = [[] for _ in range(max(layer_of.values(), default=-1) + 1)]
    for t in spec.tasks:
        layers[layer_of[t.task_id]].append(t.task_id)
    rank = {t: (i + 0.5) / len(layer) for layer in layers for i, t in enumerate(layer)}
    sweeps = [(layers[1:], graph.predecessors), (layers[-2::-1], graph.successors)]
    for sweep, neighbours in [*sweeps, sweeps[0]]:
        for layer in sweep:
            places = {t: _barycentre(t, neighbours(t), rank) for t in layer}
            layer.sort(key=places.__getitem__)
            rank.update((t, (i + 0.5) / len(layer)) for i, t in enumerate(layer))
    return rank


def _barycentre(task_id: str, neighbours: Iterable[str], rank: dict[str, float]) -> float:
    places = [rank[n] for n in neighbours]
    return fmean(places) if places else rank[task_id]


def _nesting(group: GroupNode) -> int:
    """Levels of groups in ``group``, itself included (the root counts as one)."""
    return 1 + max((_nesting(child) for child in group.children.values()), default=0)


@dataclass(frozen=True)
class _Context:
    """What placing the graph's nodes needs: each node's layer, rank and upstream."""

    layer_of: dict[str, int]
    rank: dict[str, float]
    upstream: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class _PlacedFrame:
    """A frame by layers (its x comes from them) and by height above its block's top."""

    path: str
    first: int
    last: int
    y: int
    height: int
    nesting: int


@dataclass
class _Block:
    """A stack of boxes and frames: the layers it spans, its height, and the top of each
    task's box and each frame relative to the block's top."""

    first: int
    last: int
    height: int
    tops: dict[str, int]
    frames: list[_PlacedFrame] = field(default_factory=list)
    key: float = 0.0


def _arrange(group: GroupNode, ctx: _Context) -> _Block:
    """Stack a group's tasks and its sub-groups' framed blocks. Items are taken by first
    layer, then by rank; each goes below what already occupies its layers (so within a
    layer the rank order holds and two items never overlap) and no higher than the mean
    height of its placed upstream boxes, so chains run straight and joins sit between."""
    items = [_task_block(t, ctx) for t in group.tasks]
    items += [_framed(child, ctx) for child in group.children.values()]
    if not items:  # a DAG without tasks
        return _Block(0, 0, 0, {})
    items.sort(key=lambda b: (b.first, b.key))
    skyline: dict[int, int] = {}
    tops: dict[str, int] = {}
    frames: list[_PlacedFrame] = []
    for item in items:
        layers = range(item.first, item.last + 1)
        top = max(skyline.get(layer, 0) for layer in layers)
        top = max(top, _pulled(item, tops, ctx))
        skyline.update((layer, top + item.height + ROW_GAP) for layer in layers)
        tops.update((t, top + y) for t, y in item.tops.items())
        frames += [_shifted(f, top) for f in item.frames]
    return _Block(
        first=min(b.first for b in items),
        last=max(b.last for b in items),
        height=max(skyline.values()) - ROW_GAP,
        tops=tops,
        frames=frames,
        key=fmean(ctx.rank[t] for t in tops),
    )


def _task_block(task_id: str, ctx: _Context) -> _Block:
    layer = ctx.layer_of[task_id]
    return _Block(layer, layer, BOX_HEIGHT, {task_id: 0}, key=ctx.rank[task_id])


def _framed(group: GroupNode, ctx: _Context) -> _Block:
    """A sub-group's block inside its frame: a label band above, a margin below."""
    inner = _arrange(group, ctx)
    nesting = 1 + max((f.nesting for f in inner.frames), default=0)
    height = FRAME_HEAD + inner.height + FRAME_PAD
    own = _PlacedFrame(group.path, inner.first, inner.last, 0, height, nesting)
    return _Block(
        inner.first,
        inner.last,
        height,
        {t: FRAME_HEAD + y for t, y in inner.tops.items()},
        [own, *(_shifted(f, FRAME_HEAD) for f in inner.frames)],
        inner.key,
    )


def _pulled(item: _Block, tops: dict[str, int], ctx: _Context) -> int:
    """Where the item's top would put each of its boxes level with an upstream box already
    placed in this group, on average; 0 when none is placed yet."""
    wishes = [tops[up] - y for t, y in item.tops.items() for up in ctx.upstream[t] if up in tops]
    return round(fmean(wishes)) if wishes else 0


def _shifted(frame: _PlacedFrame, by: int) -> _PlacedFrame:
    return _PlacedFrame(
        frame.path, frame.first, frame.last, frame.y + by, frame.height, frame.nesting
    )


def _frame(frame: _PlacedFrame, left: Callable[[int], int]) -> Frame:
    """A frame in page coordinates: wider by one margin per group level it holds, so nested
    frames stay apart and frames in neighbouring columns never meet."""
    pad = FRAME_PAD * frame.nesting
    x = left(frame.first) - pad
    width = left(frame.last) + BOX_WIDTH + pad - x
    chars = int((width - 2 * FRAME_PAD) / GROUP_CHAR_WIDTH)
    return Frame(frame.path, _fit(frame.path, "", chars), x, MARGIN + frame.y, width, frame.height)


def _edge(up: Node, down: Node, label: str | None = None) -> Edge:
    """A cubic curve leaving the upstream box rightwards and entering the downstream box
    from the left, its bend no wider than one column gap; its label at its middle."""
    x1, y1 = up.x + BOX_WIDTH, up.y + BOX_HEIGHT // 2
    x2, y2 = down.x, down.y + BOX_HEIGHT // 2
    bend = min((x2 - x1) // 2, EDGE_GAP + BOX_WIDTH // 2)
    path = f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"
    return Edge(up.task_id, down.task_id, path, label, ((x1 + x2) // 2, (y1 + y2) // 2 - 4))
