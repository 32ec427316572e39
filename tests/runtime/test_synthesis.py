"""Synthesized arguments respect what the kernel does with them (real Warp arrays, every device)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import warp as wp
from runtime_helpers import FIXTURES
from warp_devices import DEVICES

from warp_lint.runtime.synthesis import (
    Fill,
    KernelFacts,
    fills_for,
    kernel_facts,
    make_arguments,
    plan_launch,
    struct_with_fields,
)

SOURCE = textwrap.dedent('''
    def k(tri: wp.array2d(dtype=int), gather: wp.array(dtype=int), offsets: wp.array(dtype=int),
          counts: wp.array(dtype=int), parent: wp.array(dtype=int), x: wp.array(dtype=float),
          rot: wp.array(dtype=wp.quat), pose: wp.array(dtype=wp.transform), stride: int, out: wp.array(dtype=float)):
        i = wp.tid()
        a = x[tri[i, 0]] + x[tri[i, 1]] + x[tri[i, 2]]
        b = x[gather[i]]
        for j in range(offsets[i], offsets[i + 1]):
            b += x[j]
        c = i // counts[i] + i % stride
        p = parent[i]
        while p >= 0:
            p = parent[p]
        out[i] = a + b + float(c)
''')


@pytest.fixture(scope="module")
def plan(warp_in_process):
    wp = warp_in_process
    types = {"tri": wp.array2d(dtype=int), "gather": wp.array(dtype=int), "offsets": wp.array(dtype=int),
             "counts": wp.array(dtype=int), "parent": wp.array(dtype=int), "x": wp.array(dtype=float),
             "rot": wp.array(dtype=wp.quat), "pose": wp.array(dtype=wp.transform), "stride": int,
             "out": wp.array(dtype=float)}
    return plan_launch(list(types.items()), kernel_facts(SOURCE))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(5))
def test_integers_and_rotations_fit_the_kernel(plan, device, seed):
    args = dict(zip([a.name for a in plan.arguments],
                    make_arguments(plan, Fill("wide"), np.random.default_rng(seed), device)))
    tri = args["tri"].numpy()
    assert all(len(set(row)) == len(row) for row in tri) and tri.max() < 16  # no degenerate triangle
    gather = args["gather"].numpy()
    assert len(set(gather[:4])) == 4  # the threads of one launch never share an index
    offsets = args["offsets"].numpy()
    assert offsets[0] == 0 and np.all(np.diff(offsets) >= 0)  # CSR offsets
    assert np.all(args["counts"].numpy() > 0) and args["stride"] != 0  # divisors
    parent = args["parent"].numpy()
    assert all(p == -1 or p < k for k, p in enumerate(parent))  # every chain ends
    assert np.allclose(np.linalg.norm(args["rot"].numpy(), axis=-1), 1.0, atol=1e-5)
    assert np.allclose(np.linalg.norm(args["pose"].numpy()[:, 3:7], axis=-1), 1.0, atol=1e-5)
    assert args["x"].device == args["tri"].device


def test_a_kernel_without_tid_runs_one_thread(warp_in_process):
    wp = warp_in_process
    facts = kernel_facts("def k(x: wp.array(dtype=float), out: wp.array(dtype=float)):\n    out[0] = x[0]\n")
    plan = plan_launch([("x", wp.array(dtype=float)), ("out", wp.array(dtype=float))], facts)
    assert plan.dim == (1,)
    assert "one thread: the kernel never calls wp.tid()" in plan.describe_domain()


@pytest.mark.parametrize("device", DEVICES)
def test_integer_vectors_are_indices_too(warp_in_process, device):
    wp = warp_in_process
    source = ("def k(pairs: wp.array(dtype=wp.vec2i), x: wp.array(dtype=float), out: wp.array(dtype=float)):\n"
              "    i = wp.tid()\n    p = pairs[i]\n    out[i] = x[p[0]] * x[p[1]]\n")
    plan = plan_launch([("pairs", wp.array(dtype=wp.vec2i)), ("x", wp.array(dtype=float)),
                        ("out", wp.array(dtype=float))], kernel_facts(source))
    pairs, _, _ = make_arguments(plan, Fill("default"), np.random.default_rng(0), device)
    values = pairs.numpy()
    assert pairs.dtype == wp.vec2i and values.shape == (16, 2)
    assert values.min() >= 0 and values.max() < 16


BRANCHES = textwrap.dedent('''
    def k(kind: wp.array(dtype=int), total: wp.array(dtype=int), flag: int, parent: wp.array(dtype=int),
          first: wp.array(dtype=int), last: wp.array(dtype=int), offsets: wp.array(dtype=int),
          x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        t = kind[i]
        if t == Kind.FREE or t == wp.static(LIMIT - 1):
            out[i] = x[i]
        if total[i] <= int(LIMIT):
            out[i] = 2.0 * x[i]
        if not flag:
            out[i] = 3.0 * x[i]
        p = parent[first[i]]
        if p >= 0:
            out[i] += x[p]
        for j in range(first[i], last[i]):
            out[i] += x[j]
        for j in range(offsets[i], offsets[i + 1]):
            out[i] += x[j]
        local = 3
        if t == local:
            out[i] = 0.0
''')


class Kind:
    FREE = 6


def test_branch_constants_resolve_in_the_kernels_namespace():
    facts = kernel_facts(BRANCHES, {"Kind": Kind, "LIMIT": 10})
    assert facts.branch_values["kind"] == {5, 6, 7, 8, 9, 10}  # Kind.FREE and wp.static(LIMIT - 1), +-1
    assert facts.branch_values["total"] == {9, 10, 11}
    assert facts.branch_values["flag"] == {0, 1}
    # `t == local` compares with a local, not a constant; `p >= 0` marks the chain array, not the index.
    assert facts.sentinels == {"parent"}
    assert ("first", "last") in facts.range_pairs and "offsets" in facts.monotone


def test_without_a_namespace_only_literals_count():
    assert "kind" not in kernel_facts(BRANCHES).branch_values


# newton's closest_triangle: indices pick the corners of a triangle (the area then divides), and a
# bitmask built from them is compared with zero.
CORNERS = textwrap.dedent('''
    @wp.func
    def closest_triangle(v: Mat83f, i0: int, i1: int, i2: int, steps: int, x: float):
        a = v[2 * i0 + 1]
        b = v[2 * i1 + 1]
        c = v[2 * i2 + 1]
        t = wp.length_sq(wp.cross(a - b, a - c))
        it = 1.0 / t
        mask = wp.uint32(1) << wp.uint32(i0)
        if mask != wp.uint32(0):
            return it
        return x / float(steps)
''')


def test_indices_that_pick_a_divisor_are_not_divisors_and_bitmasks_compare_no_values():
    facts = kernel_facts(CORNERS)
    assert facts.divisors == {"v", "steps"}  # i0 picks a row of v; its value divides nothing
    assert not {"i0", "i1", "i2"} & set(facts.branch_values)  # `1 << i0 != 0` says nothing of i0


@pytest.mark.parametrize("seed", range(3))
def test_targeted_draws_take_the_branch_values_and_ranges_end_after_they_start(warp_in_process, seed):
    ints = wp.array(dtype=int)
    params = [("kind", ints), ("total", ints), ("flag", int), ("parent", ints), ("first", ints), ("last", ints),
              ("offsets", ints), ("x", wp.array(dtype=float)), ("out", wp.array(dtype=float))]
    plan = plan_launch(params, kernel_facts(BRANCHES, {"Kind": Kind, "LIMIT": 10}))
    rng = np.random.default_rng(seed)
    plain = dict(zip([a.name for a in plan.arguments], make_arguments(plan, Fill("default"), rng, "cpu")))
    assert plain["kind"].numpy().max() < 4 and plain["flag"] == 4  # plain draws stay small
    hit = False
    for _ in range(8):
        args = dict(zip([a.name for a in plan.arguments],
                        make_arguments(plan, Fill("default"), rng, "cpu", targeted=True)))
        kinds = args["kind"].numpy()
        hit = hit or bool(np.isin(kinds, [5, 6, 7, 8, 9, 10]).any())
        assert np.all(args["last"].numpy() >= args["first"].numpy())
        assert np.all(np.diff(args["offsets"].numpy()) >= 0)
    assert hit
    notes = plan.describe_domain()
    assert "last: distinct indices, at least first (ranges end after they start), below 16" in notes


def test_struct_arguments_are_planned_field_by_field(warp_in_process):
    @wp.struct
    class Body:
        q: wp.array(dtype=wp.vec3)
        mass: float
        kind: int

    source = "def k(b: Body, out: wp.array(dtype=float)):\n    i = wp.tid()\n    if b.kind == 2:\n        out[i] = b.q[i].x\n"
    plan = plan_launch([("b", Body), ("out", wp.array(dtype=float))], kernel_facts(source))
    assert plan.float_arrays == ["b.q", "out"]
    body = next(a for a in plan.arguments if a.name == "b")
    assert [f.name for f in body.fields] == ["b.q", "b.mass", "b.kind"]
    assert body.fields[2].choices == (1, 2, 3)
    value, _ = make_arguments(plan, Fill("default"), np.random.default_rng(0), "cpu", targeted=True)
    assert value.q.shape == (16,) and isinstance(value.mass, float)


def test_a_struct_is_told_by_its_fields_only_when_one_layout_fits(warp_in_process):
    @wp.struct
    class Small:
        x: wp.array(dtype=float)
        n: int

    @wp.struct
    class Large:
        x: wp.array(dtype=float)
        n: int
        extra: float

    @wp.struct
    class Other:
        x: wp.array(dtype=wp.vec3)
        n: int

    assert struct_with_fields({"x", "n"}, [Large, Small]) is Small  # the smallest fitting one
    assert struct_with_fields({"extra"}, [Large, Small]) is Large
    assert struct_with_fields({"x", "n"}, [Small, Other]) is None  # two layouts: cannot tell
    assert struct_with_fields({"missing"}, [Small]) is None


# newton's one-sided Jacobi SVD: a generic parameter passed to wp.transpose is a matrix, 4x4 so
# that loops over its rows can run to the count integers are drawn as (LAUNCH_EXTENT).
SVD = textwrap.dedent('''
    @wp.func
    def one_sided_svd(A: Any, n_columns: int, tol: Any):
        at = wp.transpose(A)
        row0 = type(A[0])()
        for i in range(n_columns):
            row0[i] = wp.length(at[i])
        return row0
''')


def test_a_generic_parameter_given_to_transpose_is_a_matrix(warp_in_process):
    from typing import Any

    from warp_lint.runtime.synthesis import LAUNCH_EXTENT, concrete_types
    wp = warp_in_process
    chosen = concrete_types([("A", Any), ("n_columns", int), ("tol", Any)], kernel_facts(SVD), wp.float32,
                            function=True)
    assert chosen == {"A": wp.mat44, "tol": wp.float32}
    assert wp.mat44._shape_[0] == LAUNCH_EXTENT


def test_a_generic_parameter_takes_the_struct_a_helper_five_calls_down_declares(warp_in_process):
    """newton's MPR passes its data provider through generic helpers to the one that declares its
    struct, five calls down; nearer helpers are asked first, each once."""
    import importlib.util
    import inspect
    from typing import Any

    from warp_lint.runtime.synthesis import concrete_types
    spec = importlib.util.spec_from_file_location("deep_generics", FIXTURES / "deep_generics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    facts = kernel_facts(textwrap.dedent(inspect.getsource(module.solve.func)), vars(module))
    chosen = concrete_types([("provider", Any)], facts, warp_in_process.float32, namespace=vars(module),
                            function=True)
    assert chosen == {"provider": module.Provider}


# newton's forward kinematics writes a body only where its flags share a bit with the filter the
# caller passes: drawn at the launch extent (4), the filter shared no bit with flags below it.
FLAGGED_BODIES = textwrap.dedent('''
    def fk(body_flags: wp.array(dtype=int), body_flag_filter: int, body_q: wp.array(dtype=float)):
        i = wp.tid()
        if (body_flags[i] & body_flag_filter) != 0:
            body_q[i] = body_q[i] * body_q[i]
''')


def test_bit_sets_compared_through_a_mask_are_drawn_among_low_bits():
    from warp_lint.runtime.synthesis import BIT_CHOICES
    facts = kernel_facts(FLAGGED_BODIES)
    assert facts.branch_values["body_flags"] >= set(BIT_CHOICES)
    assert facts.branch_values["body_flag_filter"] >= set(BIT_CHOICES)


def test_a_tiny_literal_gets_a_fill_at_its_own_scale_beside_the_usual_one():
    # `wp.abs(n[2]) <= 1e-4`: values 1e-4 +/- [0.05, 1] never pass it.
    facts = KernelFacts(literals=[1.0e-4, 0.5])
    fills = fills_for(facts, value_dependent=False)
    assert [f.kind for f in fills].count("close") == 1 and fills[-1] == Fill("close", 1.0e-4)
    values = Fill("close", 1.0e-4).draw(np.random.default_rng(0), (4000,))
    inside = np.abs(values) <= 1.0e-4
    assert 0.3 < inside.mean() < 0.45  # three in four near zero, half of those within the literal
    assert np.abs(values[~inside]).max() > 0.05  # the rest at the usual scale


def test_exact_zeros_are_drawn_after_every_fill_for_a_tolerance_the_kernel_does_not_show():
    # newton's contact conversion takes a branch where a component is below a module constant's
    # fraction of the others: only an exactly zero component does. Not among the fills (what they
    # and the exploration reach stays drawn as before): the search's last resort.
    from warp_lint.runtime.synthesis import ZEROS_LAST
    assert ZEROS_LAST not in fills_for(KernelFacts(literals=[0.5]), value_dependent=False)
    values = ZEROS_LAST.draw(np.random.default_rng(0), (6000,))
    assert 0.3 < (values == 0.0).mean() < 0.37
    assert values.min() < -2.5 and values.max() > 2.5
