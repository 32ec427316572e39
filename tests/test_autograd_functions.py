"""Kernels that a `torch.autograd.Function` records: `Cls.apply(...)` runs `Cls.forward(ctx, ...)`.

Much differentiable Warp code is handed to PyTorch that way: `forward` opens a `wp.Tape`, runs the
kernels (often through a launcher and a kernel passed in as values), and `backward` runs the tape.
The project model follows `apply` into `forward` with the arguments shifted past `ctx`, so such a
kernel is *differentiated*, named with the recording that reaches it; before, it was taken for a
library's public API launched only outside tapes, and its findings were hidden.

The programs are small packages of different shapes. Torch is not needed to lint them; the
gradient claim is measured on the same kernel recorded through a launcher passed as a value, the
part of the program that runs without torch (tape against central differences).
"""

from __future__ import annotations

import pytest
from programs import expected, explain, findings, measure, write_program

KERNEL = """
import warp as wp


@wp.kernel
def square_then_clear(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]
    x[i] = 0.0{marker}


def launch(kernel, x, y):
    wp.launch(kernel, len(x), inputs=[x], outputs=[y])
"""

# The launcher and the kernel are handed to `apply` as values, as wrappers of operator tables do.
THROUGH_APPLY = """
import torch
import warp as wp

from .kernels import launch, square_then_clear


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, launcher, kernel, x, y):
        ctx.tape = wp.Tape()
        with ctx.tape:
            launcher(kernel, x, y)
        ctx.x, ctx.y = x, y
        return wp.to_torch(y)

    @staticmethod
    def backward(ctx, grad):
        ctx.tape.backward(grads={ctx.y: wp.from_torch(grad.contiguous())})
        return None, None, wp.to_torch(ctx.x.grad).clone(), None


def square(x, y):
    return Square.apply(launch, square_then_clear, x, y)
"""

# `from torch.autograd import Function`, a tape kept in a local and `forward` calling a helper of
# its module that launches: another spelling of the same thing.
IMPORTED_BASE = """
from torch.autograd import Function
import warp as wp

from .kernels import square_then_clear


def _run(x, y):
    wp.launch(square_then_clear, len(x), inputs=[x], outputs=[y])


class Square(Function):
    @staticmethod
    def forward(ctx, x, y):
        tape = wp.Tape()
        with tape:
            _run(x, y)
        ctx.tape = tape
        return wp.to_torch(y)

    @staticmethod
    def backward(ctx, grad):
        ctx.tape.backward()
        return None, None


def square(x, y):
    return Square.apply(x, y)
"""

# The near miss: `forward` runs the kernel without a tape (a forward-only operator): nothing the
# project records reaches it, and its finding stays hidden with the public API's.
NO_TAPE = """
import torch

from .kernels import launch, square_then_clear


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, launcher, kernel, x, y):
        launcher(kernel, x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        return None, None, grad, None


def square(x, y):
    return Square.apply(launch, square_then_clear, x, y)
"""

# The measured part: the same kernel, recorded through a launcher passed as a value.
CALLBACK = """
import warp as wp

from kernels import launch, square_then_clear


@wp.kernel
def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i])


def record(launcher, kernel, x, y, loss):
    tape = wp.Tape()
    with tape:
        launcher(kernel, x, y)
        wp.launch(total, len(y), inputs=[y], outputs=[loss])
    return tape


def main(values):
    x = wp.array(values, dtype=float, requires_grad=True)
    y = wp.zeros(len(values), dtype=float, requires_grad=True)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = record(launch, square_then_clear, x, y, loss)
    tape.backward(loss)
    return float(loss.numpy()[0]), x.grad.numpy().copy()
"""

EXPECTED = "  # expect: WL102"


def _package(operator: str, reported: bool) -> dict[str, str]:
    return {"ops/__init__.py": "from .operators import square\n",
            "ops/kernels.py": KERNEL.format(marker=EXPECTED if reported else ""),
            "ops/operators.py": operator}


PROGRAMS = {
    "through-apply": _package(THROUGH_APPLY, True),
    "imported-base": _package(IMPORTED_BASE, True),
    "no-tape": _package(NO_TAPE, False),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("autograd_functions")
    found = {name: write_program(root / name, files) for name, files in PROGRAMS.items()}
    found["callback"] = write_program(root / "callback", {"kernels.py": KERNEL.format(marker=EXPECTED),
                                                          "train.py": CALLBACK})
    return found


@pytest.mark.parametrize("name", [*PROGRAMS, "callback"])
def test_a_kernel_is_reported_where_a_recording_reaches_it(name, folders, tmp_path):
    assert findings(folders[name], tmp_path) == expected(folders[name])


def test_explain_names_the_recording_in_forward(folders, capsys):
    out = explain(folders["through-apply"] / "ops" / "kernels.py", "x[i] = 0.0", capsys)
    assert "differentiated" in out and "recorded on `ctx.tape`" in out and "Square.forward" in out, out


def test_forward_without_a_tape_leaves_the_kernel_public(folders, capsys):
    out = explain(folders["no-tape"] / "ops" / "kernels.py", "x[i] = 0.0", capsys)
    assert ": public" in out, out


def test_the_recorded_kernel_gradient_is_wrong(folders, tmp_path):
    pytest.importorskip("warp")
    measured = measure({"callback": folders["callback"]}, ["callback"], tmp_path)
    assert measured["callback"]["verdict"] == "wrong", measured["callback"]
