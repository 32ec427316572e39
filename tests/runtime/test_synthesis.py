"""Synthesized arguments respect what the kernel does with them (real Warp arrays, every device)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from warp_devices import DEVICES

from warp_lint.runtime.synthesis import Fill, kernel_facts, make_arguments, plan_launch

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
