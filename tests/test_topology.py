"""Body tree, cutjoints and the aggregation subtree decomposition (shared/asd.md), on worked examples,
random trees (hypothesis, against brute-force references written here), the bundled linkage scene and the
public MJCFs with equalities that ship inside the mujoco wheel. No JAX."""

from __future__ import annotations

import json
import pathlib

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjharness.scenes import (
    TopologyError,
    Tree,
    aggregation_tree_asd,
    body_tree,
    cutjoints,
    format_topology,
    scene_path,
    supernodes,
    topology_report,
)
from mjharness.scenes.topology import decompose, equality_report, region_tree

EXAMPLE = Tree.from_edges([(0, 3), (3, 5), (3, 7), (3, 11), (7, 10)])  # 3 is a descendant of the root 0


def asd(tree, target, coll):
    out = aggregation_tree_asd(tree, target, coll)
    return out.root, set(out.supernode)


# ------------------------------------------------------------------------------ worked examples


def test_worked_examples():
    assert asd(EXAMPLE, {5, 10, 11}, [{5, 10, 11}]) == (3, {5, 7, 10, 11})  # 7 is a connector
    assert asd(EXAMPLE, {3, 10}, [{3, 10}]) == (3, {7, 10})  # listed LCA 3 excluded
    both = [{3, 10}, {3, 5}]  # share only the LCA -> separate
    assert asd(EXAMPLE, {3, 10}, both) == (3, {7, 10})
    assert asd(EXAMPLE, {3, 5}, both) == (3, {5})
    fork = Tree.from_edges([(9, 10), (10, 12), (10, 14)])  # proper partial overlap at 10
    for target in ({9, 12}, {9, 14}):
        assert asd(fork, target, [{9, 12}, {9, 14}]) == (9, {10, 12, 14})
    chain = Tree.from_edges([(3, 5), (5, 7), (7, 10)])  # nesting: inner inside outer, kept separate
    assert asd(chain, {7, 10}, [{7, 10}, {3, 10}]) == (7, {10})
    assert asd(chain, {3, 10}, [{7, 10}, {3, 10}]) == (3, {5, 7, 10})


def test_worked_example_returned_tree_and_supernodes():
    t = aggregation_tree_asd(EXAMPLE, [11, 10, 5], [[5, 10, 11]])
    assert t.nodes == (3, 5, 7, 10, 11) and t.root == 3 and t.supernode == (5, 7, 10, 11)
    assert dict(t.parent) == {5: 3, 7: 3, 10: 7, 11: 3}  # T's own edges, no cutjoint edge
    chain = Tree.from_edges([(3, 5), (5, 7), (7, 10)])
    sn = decompose(chain, [{7, 10}, {3, 10}, (10, 3, 3)])
    assert [(s.root, s.nodes, s.cutjoints, s.inside, s.contains) for s in sn] == [
        (3, (5, 7, 10), (1, 2), None, (1,)), (7, (10,), (0,), 0, ())]


def test_lca_may_be_the_original_root():
    for coll in ([{5, 10, 11}], [{3, 10}]):
        t = Tree.from_edges([(3, 5), (3, 7), (3, 11), (7, 10)])  # now 3 is the root
        assert aggregation_tree_asd(t, coll[0], coll).root == 3 == t.root
    assert asd(EXAMPLE, {0, 10}, [{0, 10}]) == (0, {3, 7, 10})


# --------------------------------------------------------------------------------------- errors


def test_cutjoint_errors_name_the_cutjoint():
    with pytest.raises(TopologyError, match=r"cutjoint 1 \{5\}: fewer than two distinct nodes"):
        aggregation_tree_asd(EXAMPLE, {3, 10}, [{3, 10}, [5, 5]])
    with pytest.raises(TopologyError, match=r"cutjoint 'loop' \{5, 99\}: node\(s\) \{99\} not in the tree"):
        aggregation_tree_asd(EXAMPLE, {3, 10}, {"ok": {3, 10}, "loop": (5, 99)})
    with pytest.raises(TopologyError, match=r"target \{5, 11\} is not a member of the cutjoint collection"):
        aggregation_tree_asd(EXAMPLE, {5, 11}, [{5, 10}])
    with pytest.raises(TopologyError, match=r"cutjoint 'target' \{5\}: fewer than two"):
        aggregation_tree_asd(EXAMPLE, [5], [{5, 10}])
    with pytest.raises(TopologyError, match="cutjoint 0: expected a collection of node ids"):
        aggregation_tree_asd(EXAMPLE, {5, 10}, ["ab"])


def test_ill_posed_merged_set_is_rejected():
    # {5, 10} with root 3: 10's parent 7 is neither in the set nor the root
    with pytest.raises(TopologyError, match=r"\{5, 10\} is ill-posed: with root 3 .*node 10 has parent 7"):
        region_tree(EXAMPLE, {5, 10}, [3])
    with pytest.raises(TopologyError, match="node 3 is the root itself"):
        region_tree(EXAMPLE, {3, 5}, [3])
    assert region_tree(EXAMPLE, {5, 7, 10}, [3, 7]).nodes == (3, 5, 7, 10)


def test_tree_construction_errors():
    with pytest.raises(TopologyError, match="exactly one root"):
        Tree.from_edges([(0, 1), (2, 3)])
    with pytest.raises(TopologyError, match="two parents"):
        Tree.from_edges([(0, 1), (2, 1)])
    with pytest.raises(TopologyError, match=r"nodes \{2, 3\} are not reachable from the root 0"):
        Tree.from_parents({1: 0, 2: 3, 3: 2})
    with pytest.raises(TopologyError, match="root 0 cannot have a parent"):
        Tree.from_parents({1: 0, 0: 1}, root=0)
    with pytest.raises(TopologyError, match="parent 2 is not an earlier node"):
        Tree(root=0, nodes=(0, 1, 2), parent={1: 2, 2: 0})
    with pytest.raises(TopologyError, match="must start with the root"):
        Tree(root=0, nodes=(1, 0), parent={1: 0})
    with pytest.raises(TopologyError, match="node 9 is not in the tree"):
        EXAMPLE.lca([3, 9])


# ----------------------------------------------------------------------------- random trees


@st.composite
def trees(draw, min_nodes=1, max_nodes=18):
    n = draw(st.integers(min_nodes, max_nodes))
    labels = draw(st.permutations(range(100, 100 + n)))  # labels unrelated to the order
    parents = {labels[i]: labels[draw(st.integers(0, i - 1))] for i in range(1, n)}
    return Tree.from_parents(parents, root=labels[0])


@st.composite
def tree_and_cutjoints(draw, max_cuts=7):
    tree = draw(trees(min_nodes=2))
    return tree, draw(st.lists(cuts(tree), min_size=1, max_size=max_cuts))


def cuts(tree):
    return st.lists(st.sampled_from(tree.nodes), min_size=2, max_size=4, unique=True)


def ref_ancestors(tree, n):
    out = {n}
    while n != tree.root:
        n = tree.parent[n]
        out.add(n)
    return out


def ref_lca(tree, nodes):
    common = set.intersection(*(ref_ancestors(tree, n) for n in nodes))
    return max(common, key=lambda a: len(ref_ancestors(tree, a)))  # the deepest common ancestor


def ref_candidate(tree, cut):
    """S_i by definition: strict descendants of the LCA whose subtree holds a listed node."""
    a = ref_lca(tree, cut)
    s = {v for v in tree.nodes if v != a and a in ref_ancestors(tree, v)
         and any(v in ref_ancestors(tree, c) for c in cut)}
    return a, s


def partial(r, s):
    return bool(r & s) and not (r <= s or s <= r)


def ref_asd(tree, target, coll):
    """Parallel (Jacobi) closure: absorb every partially overlapping candidate of a pass at once."""
    cands = {frozenset(c): ref_candidate(tree, set(c)) for c in coll}
    a, region = cands[frozenset(target)]
    lcas, left = [a], dict(cands)
    while grab := [k for k, (_, s) in left.items() if partial(region, s)]:
        for k in grab:
            region = region | left[k][1]
            lcas.append(left.pop(k)[0])
    return ref_lca(tree, lcas), region


@settings(max_examples=100, deadline=None)
@given(trees(), st.data())
def test_tree_structure_lca_and_spanning_subtree(tree, data):
    assert tree.nodes[0] == tree.root and tree.supernode == tree.nodes[1:]
    for n in tree.nodes[1:]:
        assert tree.index(tree.parent[n]) < tree.index(n) and n in tree.children[tree.parent[n]]
        assert tree.depth[n] == len(ref_ancestors(tree, n)) - 1 == len(tree.ancestors(n)) - 1
    assert sum(len(c) for c in tree.children.values()) == len(tree) - 1
    nodes = data.draw(st.lists(st.sampled_from(tree.nodes), min_size=1, max_size=5))
    a = tree.lca(nodes)
    assert a == ref_lca(tree, nodes)
    h = tree.spanning_subtree(nodes)
    assert h.root == a and set(h.supernode) == ref_candidate(tree, nodes)[1]
    assert h.nodes == tree.order(h.nodes) and all(h.parent[v] == tree.parent[v] for v in h.supernode)


@settings(max_examples=150, deadline=None)
@given(tree_and_cutjoints())
def test_lca_exclusion_and_spanning_coverage(tc):
    tree, coll = tc
    for c in coll:
        a, s = ref_candidate(tree, set(c))
        alone = aggregation_tree_asd(tree, c, [c])  # the candidate itself
        assert alone.root == a and a not in alone.supernode  # excluded even when listed or T's root
        assert set(alone.supernode) == s == set(tree.spanning_subtree(c).nodes) - {a}
        assert set(c) - {a} <= set(alone.supernode)


@settings(max_examples=150, deadline=None)
@given(tree_and_cutjoints())
def test_matches_reference_and_is_a_closed_region(tc):
    tree, coll = tc
    cands = [ref_candidate(tree, set(c))[1] for c in coll]
    for c in coll:
        out = aggregation_tree_asd(tree, c, coll)
        assert (out.root, set(out.supernode)) == ref_asd(tree, c, coll)
        region = set(out.supernode)
        assert out.root not in region and ref_candidate(tree, set(c))[1] <= region
        assert not any(partial(region, s) for s in cands)  # closed under proper partial overlap
        assert region == set().union(*(s for s in cands if s <= region))  # made of whole candidates
        # an ordinary tree in T's topological order with T's own edges
        assert out.nodes == (out.root, *tree.order(region))
        assert all(out.parent[v] == tree.parent[v] and out.parent[v] in out.nodes for v in region)


@settings(max_examples=100, deadline=None)
@given(tree_and_cutjoints(), st.randoms(use_true_random=False))
def test_determinism_under_reordering_and_duplicates(tc, rnd):
    tree, coll = tc
    messy = [list(c) + [c[0]] for c in coll] + [list(c) for c in coll[: len(coll) // 2 + 1]]
    rnd.shuffle(messy)
    for c in messy:
        rnd.shuffle(c)
    for c in coll:
        target = list(reversed(c)) + [c[-1]]
        assert aggregation_tree_asd(tree, target, messy) == aggregation_tree_asd(tree, c, coll)
    first = decompose(tree, coll)
    again = decompose(tree, messy)
    assert [(s.tree, s.inside, s.contains) for s in first] == [(s.tree, s.inside, s.contains) for s in again]


@settings(max_examples=100, deadline=None)
@given(tree_and_cutjoints(), st.data())
def test_nesting_preserved(tc, data):
    """Cutjoints whose candidates are equal to, inside or around the region never enlarge it."""
    tree, coll = tc
    c = data.draw(st.sampled_from(coll))
    out = aggregation_tree_asd(tree, c, coll)
    region = set(out.supernode)
    extra = data.draw(st.lists(cuts(tree), max_size=6))
    nested = [x for x in extra if not partial(region, ref_candidate(tree, set(x))[1])]
    assert aggregation_tree_asd(tree, c, coll + nested) == out


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 12), st.data())
def test_transitive_partial_overlap_chain(k, data):
    """On a chain 0->1->...: cutjoints {a_j, b_j} give candidates (a_j, b_j]; successive ones properly
    overlap, so any of them selects the whole union, rooted at the first a; a nested one stays apart."""
    lo, hi, spans = 0, data.draw(st.integers(2, 4)), []
    for _ in range(k):
        spans.append((lo, hi))
        lo = data.draw(st.integers(lo + 1, hi - 1))
        hi = data.draw(st.integers(hi + 1, hi + 4))
    chain = Tree.from_edges([(i, i + 1) for i in range(spans[-1][1])])
    coll = [set(s) for s in spans]
    inner = {spans[0][1] - 1, spans[0][1]}  # candidate {b_0}: inside span 0
    for s in coll:
        assert asd(chain, s, coll + [inner]) == (spans[0][0], set(range(spans[0][0] + 1, spans[-1][1] + 1)))
    assert asd(chain, inner, coll + [inner]) == (spans[0][1] - 1, {spans[0][1]})


def test_target_membership_enforced():
    coll = [{5, 10}, {3, 11}]
    assert aggregation_tree_asd(EXAMPLE, [10, 5, 10], coll) == aggregation_tree_asd(EXAMPLE, {5, 10}, coll)
    for absent in ({5, 11}, {5, 10, 11}, {3, 10}):
        with pytest.raises(TopologyError, match="not a member"):
            aggregation_tree_asd(EXAMPLE, absent, coll)


@settings(max_examples=100, deadline=None)
@given(tree_and_cutjoints())
def test_supernodes_are_laminar_with_nesting(tc):
    tree, coll = tc
    sn = decompose(tree, coll)
    sets = [set(s.nodes) for s in sn]
    assert len({s.tree.nodes for s in sn}) == len(sn)  # deduplicated
    assert sorted(k for s in sn for k in s.cutjoints) == list(range(len(coll)))
    for i, s in enumerate(sets):
        assert all(not partial(s, o) for o in sets)  # nested or disjoint
        outer = [j for j, o in enumerate(sets) if s < o]
        assert sn[i].inside == (min(outer, key=lambda j: len(sets[j])) if outer else None)
        assert sn[i].contains == tuple(j for j in range(len(sn)) if sn[j].inside == i)


# ---------------------------------------------------------------------------------- MuJoCo models


def _ids(model, *names):
    return frozenset(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, n) for n in names)


def bundled(name):
    """A bundled scene compiled by MuJoCo alone (load_scene would also run the MJX checks, which need JAX)."""
    return mujoco.MjModel.from_xml_path(scene_path(name))


@pytest.fixture(scope="module")
def linkages():
    return bundled("linkages")


def test_linkages_tree_cutjoints_supernodes(linkages):
    m = linkages
    tree = body_tree(m)
    assert tree.root == 0 and tree.nodes == tuple(range(m.nbody))
    assert all(tree.parent[b] == m.body_parentid[b] for b in range(1, m.nbody))
    assert cutjoints(m) == [_ids(m, "coupler", "rocker"), _ids(m, "l_pad", "l_follower"),
                            _ids(m, "r_pad", "r_follower")]
    cuts, skipped = equality_report(m)
    assert [c["name"] for c in cuts] == ["fourbar_loop", "l_finger_loop", "r_finger_loop"]
    assert [(s["name"], s["type"]) for s in skipped] == [("finger_mirror", "joint")] and skipped[0]["reason"]
    sn = supernodes(m)
    name = lambda b: mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b)  # noqa: E731
    assert [(name(s.root), {name(b) for b in s.nodes}, s.inside) for s in sn] == [
        ("fourbar_base", {"crank", "coupler", "rocker"}, None),
        ("palm", {"l_proximal", "l_pad", "l_follower"}, None),
        ("palm", {"r_proximal", "r_pad", "r_follower"}, None)]


def test_linkages_loops_hold_in_mujoco(linkages):
    """The scene starts on its constraints and they keep the pads parallel (pad hinge = -drive hinge)."""
    m = linkages
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    assert d.ne == 3 * 3 + 1 and np.abs(d.efc_pos[:d.ne]).max() < 1e-12
    d.ctrl[:] = [0.3, 0.02, 0.4]
    for _ in range(500):
        mujoco.mj_step(m, d)
    q = {n: d.qpos[m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n)]]
         for n in ("crank", "l_drive", "l_pad", "r_drive", "r_pad")}
    assert abs(q["crank"]) > 1 and abs(q["l_drive"]) > 0.2  # it moved
    assert abs(q["l_pad"] + q["l_drive"]) < 0.02 and abs(q["r_pad"] + q["r_drive"]) < 0.02
    assert abs(q["r_drive"] + q["l_drive"]) < 0.02  # the mirror coupling


def test_linkages_report_and_text(linkages):
    rep = topology_report(linkages)
    assert json.loads(json.dumps(rep)) == rep
    assert rep["loop_closures"] and len(rep["bodies"]) == linkages.nbody
    assert rep["supernodes"][0]["root_name"] == "fourbar_base"
    assert rep["cutjoints"][1]["body_names"] == ["l_pad", "l_follower"]
    text = format_topology(rep)
    for word in ("fourbar_loop", "l_finger_loop", "finger_mirror", "root palm", "coupler", "supernodes (3"):
        assert word in text, word
    assert "no loop closures" not in text


def test_model_without_equalities():
    m = bundled("double_pendulum")
    assert cutjoints(m) == [] and supernodes(m) == [] and len(body_tree(m)) == m.nbody
    rep = topology_report(m)
    assert not rep["loop_closures"] and rep["skipped"] == []
    assert "no loop closures" in format_topology(rep) and "link2" in format_topology(rep)


SITES = """<mujoco><worldbody>
  <site name="w"/>
  <body name="a"><joint name="ja" type="hinge"/><geom size=".1"/><site name="sa"/><site name="sa2"/>
    <body name="b"><joint type="hinge"/><geom size=".1"/><site name="sb"/></body></body>
  <body name="c"><freejoint/><geom size=".1"/></body>
</worldbody>
<tendon><fixed name="t"><joint joint="ja" coef="1"/></fixed></tendon>
<equality>
  <weld name="to_world" body1="c"/>
  <connect name="sites" site1="sb" site2="w"/>
  <connect name="same_body" site1="sa" site2="sa2"/>
  <tendon name="tendon_eq" tendon1="t"/>
  <weld site1="sa" site2="sb" active="false"/>
</equality></mujoco>"""


def test_sites_world_and_skips():
    m = mujoco.MjModel.from_xml_string(SITES)
    assert cutjoints(m) == [_ids(m, "world", "c"), _ids(m, "world", "b"), _ids(m, "a", "b")]
    cuts, skipped = equality_report(m)
    assert [(c["objtype"], c["obj1"], c["obj2"], c["active"]) for c in cuts] == [
        ("body", "c", "world", True), ("site", "sb", "w", True), ("site", "sa", "sb", False)]
    assert cuts[2]["name"] == "equality4"
    assert [(s["name"], s["type"]) for s in skipped] == [("same_body", "connect"), ("tendon_eq", "tendon")]
    assert "both ends on body 'a'" in skipped[0]["reason"]
    sn = supernodes(m)  # {world, b} -> {a, b}; {world, c} -> {c}; {a, b} -> {b}, nested inside the first
    assert [(s.root, set(s.nodes), s.inside) for s in sn] == [(0, {1, 2}, None), (0, {3}, None), (1, {2}, 0)]
    text = format_topology(topology_report(m))
    assert "inactive at start" in text and "\n    2  root a: {b}  (cutjoint 2)" in text
    with pytest.raises(TypeError, match="expected a mujoco.MjModel"):
        body_tree("linkages")


def _public_mjcfs():
    root = pathlib.Path(mujoco.__file__).parent
    return sorted(p for p in root.rglob("*.xml") if "<equality" in p.read_text(errors="ignore"))


def _check_model(m):
    cuts, skipped = equality_report(m)
    assert len(cuts) + len(skipped) == m.neq
    tree, cj = body_tree(m), cutjoints(m)
    sn = supernodes(m)
    for k, c in enumerate(cj):  # each cutjoint's bodies but its LCA lie in the supernode it selects
        s = next(s for s in sn if k in s.cutjoints)
        assert set(c) - {tree.lca(c)} <= set(s.nodes) and s.root not in s.nodes
    rep = topology_report(m)
    assert json.loads(json.dumps(rep)) == rep
    text = format_topology(rep)
    assert all(c["name"] in text for c in rep["cutjoints"] + rep["skipped"])
    return rep


def test_public_mjcfs_with_equalities():
    files = _public_mjcfs()
    compiled = {}
    for p in files:
        try:
            compiled[p.name] = mujoco.MjModel.from_xml_path(str(p))
        except ValueError:  # test data of another MuJoCo version; see the repaired constraints.xml below
            continue
    if not compiled:
        pytest.skip(f"no public MJCF with <equality> compiles in this mujoco wheel ({len(files)} found)")
    for m in compiled.values():
        _check_model(m)
    if "model.xml" in compiled:  # mujoco/testdata/model.xml: <weld body1="world" body2="cylinder"/>
        m = compiled["model.xml"]
        assert cutjoints(m) == [_ids(m, "world", "cylinder")]


def test_public_mjx_constraints_xml():
    path = pathlib.Path(mujoco.__file__).parent / "mjx" / "test_data" / "constraints.xml"
    if not path.is_file():
        pytest.skip("mujoco/mjx/test_data/constraints.xml not in this wheel")
    spec = mujoco.MjSpec.from_file(str(path))
    # MuJoCo 4 refuses its ball joint 'joint5' inside a fixed tendon; a hinge changes no equality (and the
    # keyframes, sized for the ball, go with it).
    spec.joint("joint5").type = mujoco.mjtJoint.mjJNT_HINGE
    for key in list(spec.keys):
        spec.delete(key)
    m = spec.compile()
    rep = _check_model(m)
    assert [c["name"] for c in rep["cutjoints"]] == ["c_site", "connect", "w_site", "weld"]
    assert [s["name"] for s in rep["skipped"]] == ["joint", "tendon"]
    assert cutjoints(m)[1] == _ids(m, "anchor1", "beam1") and 0 in cutjoints(m)[0]
    assert [s["root"] for s in rep["supernodes"]] == [0, 0, 0, 0]


def test_cli_inspect_prints_topology_and_json(capsys):
    import json

    from mjharness.rollout.cli import main

    assert main(["inspect", "linkages"]) == 0
    text = capsys.readouterr().out
    assert "cutjoints (3)" in text and "root fourbar_base: {crank, coupler, rocker}" in text and "20 states" in text
    assert main(["inspect", "linkages", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    roots = sorted(s["root_name"] for s in data["topology"]["supernodes"])
    assert roots == ["fourbar_base", "palm", "palm"] and len(data["states"]) == 20
    assert main(["inspect", "double_pendulum"]) == 0
    assert "no loop closures" in capsys.readouterr().out
