"""PyTorch interop hazards (WL401, WL402, WL403): each rule's program and its near-miss twin, linted and run.

A Warp kernel wrapped in a `torch.autograd.Function` is trained through torch: `train.main(values)`
returns torch's gradient of the loss, which `measure_programs.py` compares with central
differences. The hazard program must be flagged and measured wrong; its twin, which differs only by
the fix the message gives, must be clean and measured right. The programs are shaped unlike the
rules' examples (a helper that wraps, several inputs and outputs, `*grad_outputs`, a loss made of
two calls).

Torch is the `torch` extra. Outside CI a machine without it skips the measurements; in CI
(`CI` set) they never skip: a missing torch fails them.
"""

from __future__ import annotations

import os

import pytest
from programs import expected, findings, measure, report, write_program

if not os.environ.get("CI"):
    pytest.importorskip("torch")

# WL401: forward wraps its inputs through a helper that keeps the tensor itself; backward
# returns both inputs' gradients. Loss: a spring energy of positions with a learned stiffness.
SPRING_OPS = """
import torch
import warp as wp


@wp.kernel
def spring_energy(x: wp.array(dtype=wp.float64), k: wp.array(dtype=wp.float64), e: wp.array(dtype=wp.float64)):
    i = wp.tid()
    d = x[i] - wp.float64(0.5)
    e[i] = k[i] * d * d


def to_warp(tensor):
    return wp.from_torch({wrap}, requires_grad=True)


class SpringEnergy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, positions, stiffness):
        x = to_warp(positions){marker}
        k = to_warp(stiffness){marker}
        e = wp.zeros(x.shape[0], dtype=wp.float64, requires_grad=True)
        tape = wp.Tape()
        with tape:
            wp.launch(spring_energy, x.shape[0], inputs=[x, k], outputs=[e], device="cpu")
        ctx.arrays = (x, k, e)
        ctx.tape = tape
        return wp.to_torch(e, requires_grad=False)

    @staticmethod
    def backward(ctx, grad_energy):
        x, k, e = ctx.arrays
        ctx.tape.backward(grads={{e: wp.from_torch(grad_energy.contiguous())}})
        grad_x = wp.to_torch(ctx.tape.gradients[x]).clone()
        grad_k = wp.to_torch(ctx.tape.gradients[k]).clone()
        return grad_x, grad_k
"""

SPRING_TRAIN = """
import torch

from ops import SpringEnergy


def main(values):
    positions = torch.tensor(values[:2], dtype=torch.float64, requires_grad=True)
    stiffness = torch.tensor(values[2:], dtype=torch.float64, requires_grad=True)
    energy = SpringEnergy.apply(positions, stiffness)
    loss = (energy * torch.tensor([1.0, 3.0], dtype=torch.float64)).sum()
    loss.backward()
    return loss.item(), torch.cat([positions.grad, stiffness.grad]).numpy()
"""

# WL402: backward seeds each of two outputs with the incoming gradient's own memory. Loss: two
# bodies' terms added, so torch hands one gradient tensor to both calls' backward.
BODY_OPS = """
import torch
import warp as wp


@wp.kernel
def body_terms(q: wp.array(dtype=wp.float64), kinetic: wp.array(dtype=wp.float64),
               potential: wp.array(dtype=wp.float64)):
    i = wp.tid()
    kinetic[i] = wp.float64(0.5) * q[i] * q[i]
    potential[i] = wp.float64(2.0) * q[i]


class BodyTerms(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q):
        ctx.q = wp.from_torch(q.detach(), requires_grad=True)
        ctx.kinetic = wp.zeros(q.shape[0], dtype=wp.float64)
        ctx.potential = wp.zeros(q.shape[0], dtype=wp.float64)
        ctx.tape = wp.Tape()
        with ctx.tape:
            wp.launch(body_terms, q.shape[0], inputs=[ctx.q], outputs=[ctx.kinetic, ctx.potential], device="cpu")
        return wp.to_torch(ctx.kinetic, requires_grad=False), wp.to_torch(ctx.potential, requires_grad=False)

    @staticmethod
    def backward(ctx, *grad_outputs):
        ctx.kinetic.grad = wp.from_torch({seed}){marker}
        ctx.potential.grad = wp.from_torch(grad_outputs[1].contiguous().clone())
        ctx.tape.backward()
        return wp.to_torch(ctx.q.grad).clone()
"""

BODY_TRAIN = """
import torch

from ops import BodyTerms


def main(values):
    a = torch.tensor(values[:2], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(values[2:], dtype=torch.float64, requires_grad=True)
    kinetic_a, potential_a = BodyTerms.apply(a)
    kinetic_b, potential_b = BodyTerms.apply(b)
    weights = torch.tensor([1.0, 2.0], dtype=torch.float64)
    loss = ((kinetic_a + kinetic_b) * weights).sum() + (potential_a + potential_b).sum()
    loss.backward()
    return loss.item(), torch.cat([a.grad, b.grad]).numpy()
"""

# WL403: backward returns views of two Warp gradients, then resets the tape for the next call.
# Loss: a weighted dot product of two learned vectors.
DOT_OPS = """
import torch
import warp as wp


@wp.kernel
def weighted_product(a: wp.array(dtype=wp.float64), b: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = a[i] * b[i] * b[i]


class WeightedProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.a = wp.from_torch(a.detach(), requires_grad=True)
        ctx.b = wp.from_torch(b.detach(), requires_grad=True)
        ctx.out = wp.zeros(a.shape[0], dtype=wp.float64, requires_grad=True)
        ctx.tape = wp.Tape()
        with ctx.tape:
            wp.launch(weighted_product, a.shape[0], inputs=[ctx.a, ctx.b], outputs=[ctx.out], device="cpu")
        return wp.to_torch(ctx.out, requires_grad=False)

    @staticmethod
    def backward(ctx, grad_out):
        ctx.tape.backward(grads={{ctx.out: wp.from_torch(grad_out.contiguous())}})
        grads = (wp.to_torch(ctx.a.grad){copy}, wp.to_torch(ctx.b.grad){copy})
        ctx.tape.reset(){marker}
        return grads
"""

DOT_TRAIN = """
import torch

from ops import WeightedProduct


def main(values):
    a = torch.tensor(values[:2], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(values[2:], dtype=torch.float64, requires_grad=True)
    loss = (WeightedProduct.apply(a, b) * torch.tensor([2.0, 0.5], dtype=torch.float64)).sum()
    loss.backward()
    return loss.item(), torch.cat([a.grad, b.grad]).numpy()
"""

PROGRAMS = {
    "wl214-hazard": {"ops.py": SPRING_OPS.format(wrap="tensor.contiguous()", marker="  # expect: WL401"),
                     "train.py": SPRING_TRAIN},
    "wl214-twin": {"ops.py": SPRING_OPS.format(wrap="tensor.detach().contiguous()", marker=""),
                   "train.py": SPRING_TRAIN},
    "wl215-hazard": {"ops.py": BODY_OPS.format(seed="grad_outputs[0].contiguous()", marker="  # expect: WL402"),
                     "train.py": BODY_TRAIN},
    "wl215-twin": {"ops.py": BODY_OPS.format(seed="grad_outputs[0].contiguous().clone()", marker=""),
                   "train.py": BODY_TRAIN},
    "wl216-hazard": {"ops.py": DOT_OPS.format(copy="", marker="  # expect: WL403"), "train.py": DOT_TRAIN},
    "wl216-twin": {"ops.py": DOT_OPS.format(copy=".clone()", marker=""), "train.py": DOT_TRAIN},
}


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    root = tmp_path_factory.mktemp("torch-programs")
    return {name: write_program(root / name, files) for name, files in PROGRAMS.items()}


@pytest.fixture(scope="module")
def measured(programs, tmp_path_factory):
    return measure(programs, PROGRAMS, tmp_path_factory.mktemp("torch-manifest"))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_hazard_is_flagged_and_its_twin_is_not(programs, name, tmp_path):
    folder = programs[name]
    codes = ("WL401", "WL402", "WL403")
    found = [f for f in findings(folder, tmp_path) if f[2] in codes]
    assert found == [f for f in expected(folder) if f[2] in codes]
    assert bool(found) == name.endswith("hazard")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_torch_measures_the_hazard_wrong_and_its_twin_right(measured, name):
    result = measured[name]
    assert result["verdict"] == ("wrong" if name.endswith("hazard") else "match"), result


def test_the_doubled_gradient_is_twice_the_true_one(measured):
    """WL401's claim, in numbers: torch's gradient is exactly twice central differences."""
    import numpy as np

    result = measured["wl214-hazard"]
    assert np.allclose(result["ad"], 2 * np.asarray(result["fd"]), rtol=1e-3)


def test_the_zeroed_seed_gives_one_call_no_kinetic_gradient(measured):
    """WL402's claim, in numbers: the call whose backward runs second reads a zeroed seed, so its
    input gets only the potential term's gradient (2 per element), not the kinetic one."""
    import numpy as np

    result = measured["wl215-hazard"]
    ad, fd = np.asarray(result["ad"]), np.asarray(result["fd"])
    wrong = ~np.isclose(ad, fd, rtol=1e-3, atol=1e-6)
    assert wrong.sum() == 2 and np.allclose(ad[wrong], 2.0)


def test_the_zeroed_view_gives_no_gradient_at_all(measured):
    """WL403's claim, in numbers: torch receives views of gradients the reset zeroed."""
    import numpy as np

    result = measured["wl216-hazard"]
    assert np.allclose(result["ad"], 0.0) and not np.allclose(result["fd"], 0.0)


SEEDING_HELPER = """
import torch
import warp as wp


def seed_outputs(state, names, grads):
    for name, grad in zip(names, grads):
        array = getattr(state, name)
        array.grad = wp.from_torch(grad, dtype=array.dtype)


class Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx, sim, *tensors):
        ctx.sim = sim
        return tensors

    @staticmethod
    def backward(ctx, *grads):
        grads = [g.contiguous() for g in grads]
        if ctx.sim.graph is not None:
            seed_outputs(ctx.sim.state, ctx.sim.names, grads)
            wp.capture_launch(ctx.sim.backward_graph)
        else:
            seed_outputs(ctx.sim.state, ctx.sim.names, grads)
            ctx.sim.tape.backward()
        return (None, *[None for _ in grads])
"""


def test_a_seed_made_in_a_helper_cites_each_call_and_says_where_a_graph_replays_it(tmp_path):
    """WL402 follows incoming gradients through a comprehension, a loop over `zip` and a helper, and
    tells the arm that replays a captured graph (which never reads the new array) from the arm that
    runs the tape (whose backward zeroes torch's tensor)."""
    folder = write_program(tmp_path / "seeding-helper", {"step.py": SEEDING_HELPER})
    found = [f for f in report(folder, tmp_path) if f["code"] == "WL402"]
    assert [f["location"]["row"] for f in found] == [8]
    notes = {r["location"]["row"]: r["message"] for r in found[0]["related"]}
    assert sorted(notes) == [21, 24]
    assert "replays a captured graph (line 22)" in notes[21] and "captured" not in notes[24]
    assert "array.grad.assign(wp.from_torch(grad, dtype=array.dtype))" in found[0]["message"]


def test_a_seed_zeroed_by_tape_zero_is_reported_for_every_version(tmp_path):
    """Before 1.13 `backward()` leaves the seed alone, but a `tape.zero()` after seeding zeroes
    torch's tensor on every version (measured on 1.12.1 and 1.19.0): such a finding carries no
    version range, and an old target still gets it."""
    zeroing = BODY_OPS.format(seed="grad_outputs[0].contiguous()", marker="").replace(
        "        return wp.to_torch(ctx.q.grad).clone()",
        "        grad_q = wp.to_torch(ctx.q.grad).clone()\n        ctx.tape.zero()\n        return grad_q")
    folder = write_program(tmp_path / "seed-then-zero", {"ops.py": zeroing})
    for target in ("1.12.1", "1.19.0"):
        found = [f for f in report(folder, tmp_path, "--target-warp-version", target) if f["code"] == "WL402"]
        assert len(found) == 1 and found[0]["affected_warp_versions"] is None, (target, found)
    plain = write_program(tmp_path / "seed-only", {"ops.py": BODY_OPS.format(seed="grad_outputs[0].contiguous()",
                                                                          marker="")})
    assert [f["code"] for f in report(plain, tmp_path, "--target-warp-version", "1.12.1")
            if f["code"] == "WL402"] == []
