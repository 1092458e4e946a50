"""Kinematic topology of a MuJoCo model: the body tree, its loop-closing cutjoints and their supernodes.

A model is a rooted tree of bodies (``body_parentid``, root = world body 0) plus ``connect``/``weld``
equalities that close loops. Each such equality is a *cutjoint*: the unordered set of the bodies it ties
together (a site's body for site-based equalities). ``aggregation_tree_asd`` is the aggregation subtree
decomposition step of ``shared/asd.md``: for one target cutjoint it returns the region of the tree that
must move as one compound supernode, as an ordinary ``Tree`` whose root lies outside the supernode.

Pure Python (no JAX): nodes are any hashable ids; for models they are body ids.
"""

from __future__ import annotations

import types
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

import mujoco

from mjharness.integrators.errors import UserError

__all__ = ["Tree", "TopologyError", "Supernode", "body_tree", "cutjoints", "equality_report",
           "aggregation_tree_asd", "region_tree", "decompose", "supernodes", "topology_report", "format_topology"]


class TopologyError(UserError, ValueError):
    """A tree or a cutjoint collection is malformed; the message names the offending node or cutjoint."""


def _fmt_set(nodes: Iterable) -> str:
    items = list(nodes)
    try:
        items = sorted(items)
    except TypeError:  # mixed node types: keep the given order
        pass
    return "{" + ", ".join(repr(n) for n in items) + "}"


@dataclass(frozen=True, eq=False)
class Tree:
    """A rooted directed tree: ``root``, ``nodes`` in topological order (root first) and ``parent``
    (every node but the root -> its parent). ``children`` and ``depth`` are derived from them."""

    root: Hashable
    nodes: tuple
    parent: Mapping
    children: Mapping = field(init=False, repr=False)
    depth: Mapping = field(init=False, repr=False)
    _index: Mapping = field(init=False, repr=False)

    def __post_init__(self):
        nodes = tuple(self.nodes)
        parent = types.MappingProxyType(dict(self.parent))
        if not nodes or nodes[0] != self.root:
            raise TopologyError(f"tree nodes must start with the root {self.root!r}, got {nodes[:1]}")
        index, depth, children = {}, {}, {}
        for i, n in enumerate(nodes):
            if n in index:
                raise TopologyError(f"node {n!r} appears twice in the tree's nodes")
            if i and n not in parent:
                raise TopologyError(f"node {n!r} has no parent (only the root {self.root!r} may lack one)")
            if i:
                p = parent[n]
                if p not in index:  # also rejects cycles and forests: parents come first
                    raise TopologyError(f"node {n!r}: its parent {p!r} is not an earlier node (nodes must be "
                                        f"in topological order, root first)")
                depth[n] = depth[p] + 1
                children[p].append(n)
            else:
                depth[n] = 0
            index[n] = i
            children[n] = []
        extra = [n for n in parent if n not in index or n == self.root]
        if extra:
            raise TopologyError(f"parent entries for nodes outside the tree or for the root: {extra}")
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "parent", parent)
        object.__setattr__(self, "children", types.MappingProxyType({n: tuple(c) for n, c in children.items()}))
        object.__setattr__(self, "depth", types.MappingProxyType(depth))
        object.__setattr__(self, "_index", types.MappingProxyType(index))

    @classmethod
    def from_parents(cls, parent: Mapping, root: Hashable | None = None) -> Tree:
        """Tree from a child -> parent map; nodes in depth-first preorder, children in sorted order
        (MuJoCo's own body order). ``root`` defaults to the one parent that is nobody's child."""
        parent = dict(parent)
        if root is None:
            roots = {p for p in parent.values() if p not in parent}
            if len(roots) != 1:
                raise TopologyError(f"a tree needs exactly one root, found {_fmt_set(roots)}")
            root = roots.pop()
        kids: dict = {}
        for c, p in parent.items():
            kids.setdefault(p, []).append(c)
        if root in parent:
            raise TopologyError(f"the root {root!r} cannot have a parent (got {parent[root]!r})")
        order, stack = [], [root]
        while stack:  # every node has one parent, so each reachable node is pushed once
            n = stack.pop()
            order.append(n)
            c = kids.get(n, [])
            try:
                c = sorted(c)
            except TypeError:
                pass
            stack.extend(reversed(c))
        seen = set(order)
        missing = [c for c in parent if c not in seen]
        if missing:
            raise TopologyError(f"nodes {_fmt_set(missing)} are not reachable from the root {root!r} (a cycle or "
                                f"a second tree)")
        return cls(root=root, nodes=tuple(order), parent=parent)

    @classmethod
    def from_edges(cls, edges: Iterable[tuple]) -> Tree:
        """Tree from (parent, child) edges; see ``from_parents``."""
        parent: dict = {}
        for p, c in edges:
            if c in parent and parent[c] != p:
                raise TopologyError(f"node {c!r} has two parents: {parent[c]!r} and {p!r}")
            parent[c] = p
        return cls.from_parents(parent)

    def __eq__(self, other):
        if not isinstance(other, Tree):
            return NotImplemented
        return self.root == other.root and self.nodes == other.nodes and dict(self.parent) == dict(other.parent)

    def __hash__(self):
        return hash((self.root, self.nodes))

    def __contains__(self, node) -> bool:
        return node in self._index

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes)

    @property
    def supernode(self) -> tuple:
        """The nodes without the root, in topological order."""
        return self.nodes[1:]

    @property
    def edges(self) -> tuple:
        """(parent, child) pairs in topological order of the child."""
        return tuple((self.parent[n], n) for n in self.nodes[1:])

    def index(self, node) -> int:
        """Position of ``node`` in the topological order."""
        try:
            return self._index[node]
        except KeyError:
            raise TopologyError(f"node {node!r} is not in the tree") from None

    def order(self, nodes: Iterable) -> tuple:
        """``nodes`` (deduplicated) in this tree's topological order."""
        return tuple(sorted(set(nodes), key=self.index))

    def ancestors(self, node) -> tuple:
        """``node`` and its ancestors up to the root, node first."""
        self.index(node)
        path = [node]
        while path[-1] != self.root:
            path.append(self.parent[path[-1]])
        return tuple(path)

    def lca(self, node_set: Iterable) -> Hashable:
        """Lowest common ancestor of a non-empty node set (a node counts as its own ancestor)."""
        nodes = list(dict.fromkeys(node_set))
        if not nodes:
            raise TopologyError("the LCA of an empty node set is undefined")
        a = nodes[0]
        self.index(a)
        for b in nodes[1:]:
            self.index(b)
            while self.depth[b] > self.depth[a]:
                b = self.parent[b]
            while self.depth[a] > self.depth[b]:
                a = self.parent[a]
            while a != b:
                a, b = self.parent[a], self.parent[b]
        return a

    def spanning_subtree(self, node_set: Iterable) -> Tree:
        """The minimal subtree spanning ``node_set``: rooted at their LCA, every path from a node up to it."""
        nodes = list(dict.fromkeys(node_set))
        a = self.lca(nodes)
        keep = {a}
        for n in nodes:
            while n not in keep:
                keep.add(n)
                n = self.parent[n]
        ordered = self.order(keep)
        return Tree(root=a, nodes=ordered, parent={n: self.parent[n] for n in ordered[1:]})


# ------------------------------------------------------------------------------------------ ASD


def _label(key, nodes) -> str:
    return f"cutjoint {key!r} {_fmt_set(nodes)}"


def _normalise(tree: Tree, key, nodes) -> frozenset:
    """One cutjoint as a set of distinct tree nodes (step 1 of asd.md)."""
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, Iterable):
        raise TopologyError(f"cutjoint {key!r}: expected a collection of node ids, got {nodes!r}")
    s = frozenset(nodes)
    outside = [n for n in s if n not in tree]
    if outside:
        raise TopologyError(f"{_label(key, s)}: node(s) {_fmt_set(outside)} not in the tree")
    if len(s) < 2:
        raise TopologyError(f"{_label(key, s)}: fewer than two distinct nodes (it closes no loop)")
    return s


def _collection(tree: Tree, cutjoints) -> dict:
    """Normalised cutjoints, deduplicated, in a canonical order -> the first key naming each."""
    items = cutjoints.items() if isinstance(cutjoints, Mapping) else enumerate(cutjoints)
    out: dict = {}
    for key, nodes in items:
        out.setdefault(_normalise(tree, key, nodes), key)
    return dict(sorted(out.items(), key=lambda kv: tuple(sorted(map(tree.index, kv[0])))))


def _candidate(tree: Tree, cut: frozenset) -> tuple:
    """(a_i, S_i): LCA of the cutjoint and its spanning subtree without the LCA (step 2)."""
    h = tree.spanning_subtree(cut)
    return h.root, frozenset(h.supernode)


def _closure(target: tuple, candidates: list) -> tuple[set, list]:
    """Absorb candidates on proper partial overlap until a full pass changes nothing (steps 3-4).

    The final region does not depend on the pass order: each absorbed candidate meets the region and is not
    a superset of it, so it lies inside every fixed point containing the target; the root then follows
    from the region (the one parent of its top nodes)."""
    a_t, s_t = target
    region, lcas = set(s_t), [a_t]
    pending = list(candidates)
    changed = True
    while changed:
        changed = False
        for cand in list(pending):
            a_i, s_i = cand
            if region & s_i and not (s_i <= region or region <= s_i):
                region |= s_i
                lcas.append(a_i)
                pending.remove(cand)
                changed = True
    return region, lcas


def region_tree(tree: Tree, region: Iterable, lcas: Iterable, what: str = "merged set") -> Tree:
    """The returned tree of step 5: root = LCA of ``lcas``, vertices root + ``region`` with ``tree``'s edges;
    rejects a region in which some vertex's parent is neither in the region nor the root."""
    region, lcas = set(region), list(lcas)
    a = tree.lca(lcas)
    bad = [v for v in tree.order(region) if v == a or tree.parent.get(v) not in region | {a}]
    if bad:
        v = bad[0]
        why = "is the root itself" if v == a else f"has parent {tree.parent.get(v)!r} outside it"
        raise TopologyError(f"{what} {_fmt_set(region)} is ill-posed: with root {a!r} (LCA of {_fmt_set(lcas)}), "
                            f"node {v!r} {why}")
    vertices = tree.order(region)
    return Tree(root=a, nodes=(a, *vertices), parent={v: tree.parent[v] for v in vertices})


def _asd(tree: Tree, coll: dict, cands: dict, t: frozenset) -> Tree:
    region, lcas = _closure(cands[t], [cands[c] for c in coll if c != t])
    return region_tree(tree, region, lcas, what=f"merged set of {_label(coll[t], t)}")


def aggregation_tree_asd(tree: Tree, target: Iterable, cutjoints) -> Tree:
    """The tree ASD returns for one target cutjoint (``shared/asd.md``).

    ``cutjoints``: the complete collection, an iterable of node sets (errors name them by position) or a
    mapping name -> node set. ``target`` must be set-equal to one of them. The result's ``supernode`` is the
    compound region; its ``root`` (outside the region) is the LCA of every absorbed cutjoint.
    Input order and duplicates change nothing.
    """
    coll = _collection(tree, cutjoints)
    t = _normalise(tree, "target", target)
    if t not in coll:
        raise TopologyError(f"target {_fmt_set(t)} is not a member of the cutjoint collection "
                            f"({len(coll)} distinct cutjoints)")
    return _asd(tree, coll, {c: _candidate(tree, c) for c in coll}, t)


# ---------------------------------------------------------------------------------- supernodes


@dataclass(frozen=True)
class Supernode:
    """One distinct ASD result. ``cutjoints``: positions (or names) of the cutjoints whose ASD returns it;
    ``inside``: index of the smallest supernode strictly containing this one (None at top level);
    ``contains``: indices of the supernodes directly inside this one."""

    tree: Tree
    cutjoints: tuple
    inside: int | None
    contains: tuple

    @property
    def root(self):
        return self.tree.root

    @property
    def nodes(self) -> tuple:
        return self.tree.supernode


def decompose(tree: Tree, cutjoints) -> list[Supernode]:
    """Every cutjoint's ASD tree, deduplicated, ordered canonically, with nesting by strict containment of
    the supernode node sets (they form a laminar family: two supernodes are nested or disjoint)."""
    items = list(cutjoints.items() if isinstance(cutjoints, Mapping) else enumerate(cutjoints))
    coll = _collection(tree, dict(items))
    cands = {c: _candidate(tree, c) for c in coll}
    by_cut = {c: _asd(tree, coll, cands, c) for c in coll}
    found: dict = {}
    for key, nodes in items:
        t = by_cut[frozenset(nodes)]
        found.setdefault(t.nodes, (t, []))[1].append(key)
    trees = sorted(found.values(), key=lambda tk: tuple(map(tree.index, tk[0].nodes)))
    sets = [frozenset(t.supernode) for t, _ in trees]
    inside = []
    for i, s in enumerate(sets):
        outer = [j for j, o in enumerate(sets) if j != i and s < o]
        inside.append(min(outer, key=lambda j: len(sets[j])) if outer else None)
    return [Supernode(tree=t, cutjoints=tuple(keys), inside=inside[i],
                      contains=tuple(j for j, p in enumerate(inside) if p == i))
            for i, (t, keys) in enumerate(trees)]


# --------------------------------------------------------------------------------- MuJoCo models

_EQ_NAMES = {int(v): k[len("mjEQ_"):].lower() for k, v in mujoco.mjtEq.__members__.items()}
_SKIP_REASONS = {
    "joint": "couples two joint coordinates (a coordinate coupling, not a body loop closure)",
    "tendon": "couples tendon lengths, not bodies",
    "flex": "constrains flex edge lengths (deformable), not the body tree",
    "flexvert": "constrains flex vertices (deformable), not the body tree",
    "flexstrain": "constrains flex strain (deformable), not the body tree",
    "distance": "distance equality (removed from MuJoCo), not a connect/weld",
}


def _name(model, obj, i: int, prefix: str) -> str:
    return mujoco.mj_id2name(model, obj, int(i)) or f"{prefix}{int(i)}"


def _require_model(model):
    if not isinstance(model, mujoco.MjModel):
        raise TypeError(f"expected a mujoco.MjModel, got {type(model).__name__} (load it with load_scene first)")


def body_tree(model: mujoco.MjModel) -> Tree:
    """The model's body tree: node = body id, root = world body 0, edges from ``body_parentid``."""
    _require_model(model)
    # MuJoCo numbers bodies in depth-first order, so body ids are already a topological order.
    return Tree(root=0, nodes=tuple(range(model.nbody)),
                parent={i: int(model.body_parentid[i]) for i in range(1, model.nbody)})


def equality_report(model: mujoco.MjModel) -> tuple[list[dict], list[dict]]:
    """``(cuts, skipped)``: one JSON-able record per equality. ``cuts`` are the connect/weld equalities
    tying two distinct bodies (``bodies``: their body ids, a site's body for site-based ones);
    ``skipped`` holds every other equality with the ``reason`` it closes no loop of the body tree."""
    _require_model(model)
    cuts, skipped = [], []
    for e in range(model.neq):
        kind = _EQ_NAMES.get(int(model.eq_type[e]), f"type{int(model.eq_type[e])}")
        rec = {"equality": e, "name": _name(model, mujoco.mjtObj.mjOBJ_EQUALITY, e, "equality"), "type": kind,
               "active": bool(model.eq_active0[e])}
        if kind not in ("connect", "weld"):
            skipped.append({**rec, "reason": _SKIP_REASONS.get(kind, "not a connect/weld equality")})
            continue
        ids = (int(model.eq_obj1id[e]), int(model.eq_obj2id[e]))
        if int(model.eq_objtype[e]) == mujoco.mjtObj.mjOBJ_SITE:
            objtype, objs = "site", [_name(model, mujoco.mjtObj.mjOBJ_SITE, i, "site") for i in ids]
            bodies = [int(model.site_bodyid[i]) for i in ids]
        else:
            objtype, objs = "body", [_name(model, mujoco.mjtObj.mjOBJ_BODY, i, "body") for i in ids]
            bodies = list(ids)
        rec.update(objtype=objtype, obj1=objs[0], obj2=objs[1], bodies=bodies)
        if bodies[0] == bodies[1]:
            body = _name(model, mujoco.mjtObj.mjOBJ_BODY, bodies[0], "body")
            skipped.append({**rec, "reason": f"both ends on body {body!r}: ties a body to itself, closes no loop"})
        else:
            cuts.append(rec)
    return cuts, skipped


def cutjoints(model: mujoco.MjModel) -> list[frozenset]:
    """Node sets (body ids) of the model's loop-closing equalities, in equality order (see ``equality_report``
    for the names and for the equalities skipped, with reasons)."""
    return [frozenset(c["bodies"]) for c in equality_report(model)[0]]


def supernodes(model: mujoco.MjModel) -> list[Supernode]:
    """Every cutjoint's ASD tree on the model's body tree, deduplicated, with nesting; ``Supernode.cutjoints``
    are positions in ``cutjoints(model)``."""
    return decompose(body_tree(model), cutjoints(model))


def topology_report(model: mujoco.MjModel) -> dict:
    """Body tree, cutjoints, skipped equalities and supernodes of ``model``, with names, as JSON-able data."""
    tree = body_tree(model)
    bname = [_name(model, mujoco.mjtObj.mjOBJ_BODY, i, "body") for i in range(model.nbody)]
    cuts, skipped = equality_report(model)
    sn = decompose(tree, [c["bodies"] for c in cuts])
    return {
        "bodies": [{"id": n, "name": bname[n], "parent": tree.parent.get(n), "depth": tree.depth[n],
                    "children": list(tree.children[n])} for n in tree.nodes],
        "cutjoints": [{"index": k, **c, "body_names": [bname[b] for b in c["bodies"]]} for k, c in enumerate(cuts)],
        "skipped": skipped,
        "supernodes": [{"index": i, "root": s.root, "root_name": bname[s.root], "nodes": list(s.nodes),
                        "node_names": [bname[n] for n in s.nodes], "cutjoints": list(s.cutjoints),
                        "inside": s.inside, "contains": list(s.contains)} for i, s in enumerate(sn)],
        "loop_closures": bool(cuts),
    }


def format_topology(report: dict) -> str:
    """Human-readable text of a ``topology_report``."""
    lines = [f"body tree ({len(report['bodies'])} bodies):"]
    lines += [f"  {'  ' * b['depth']}{b['id']} {b['name']}" for b in report["bodies"]]
    cuts, sn = report["cutjoints"], report["supernodes"]
    if not cuts:
        lines.append("no loop closures (no connect/weld equality between two bodies)")
    else:
        lines.append(f"cutjoints ({len(cuts)}):")
        for c in cuts:
            ends = f"{c['objtype']} {c['obj1']} <-> {c['objtype']} {c['obj2']}"
            state = "" if c["active"] else ", inactive at start"
            lines.append(f"  {c['index']}  {c['type']} {c['name']!r}: {ends} -> bodies {{{', '.join(c['body_names'])}}}"
                         f"{state}")
    if report["skipped"]:
        lines.append(f"skipped equalities ({len(report['skipped'])}):")
        lines += [f"  {s['type']} {s['name']!r}: {s['reason']}" for s in report["skipped"]]
    if sn:
        lines.append(f"supernodes ({len(sn)}; nested ones indented under the one containing them):")

        def show(i: int, level: int):
            s = sn[i]
            cj = ", ".join(str(k) for k in s["cutjoints"])
            lines.append(f"  {'  ' * level}{i}  root {s['root_name']}: {{{', '.join(s['node_names'])}}}"
                         f"  (cutjoint{'s' if len(s['cutjoints']) > 1 else ''} {cj})")
            for j in s["contains"]:
                show(j, level + 1)

        for i, s in enumerate(sn):
            if s["inside"] is None:
                show(i, 0)
    return "\n".join(lines)
