"""Kernels shared by the host-hazard programs of this folder (every one of them is correct)."""

import warp as wp

N = 8


@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


@wp.kernel
def scale(x: wp.array(dtype=float), s: float, y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * s


@wp.kernel
def integrate(x: wp.array(dtype=float), v: wp.array(dtype=float), dt: float, x_out: wp.array(dtype=float)):
    i = wp.tid()
    x_out[i] = x[i] + v[i] * v[i] * dt


@wp.kernel
def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i])


@wp.kernel
def scale_scalar(s: wp.array(dtype=float), loss: wp.array(dtype=float)):
    loss[0] = s[0] * 2.0


def inputs(seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = wp.array(rng.uniform(0.5, 1.5, N), dtype=float, requires_grad=True)
    v = wp.array(rng.uniform(0.5, 1.5, N), dtype=float, requires_grad=True)
    return x, v


def buffer(requires_grad: bool = True):
    return wp.zeros(N, dtype=float, requires_grad=requires_grad)


def scalar():
    return wp.zeros(1, dtype=float, requires_grad=True)
