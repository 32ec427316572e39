"""Measure the kernel hazards behind WL101-WL114: autodiff (wp.Tape) against central finite differences.

Runs with whatever ``warp`` the interpreter imports, on the CPU, so the same script measures every
release (``"$VENV"/bin/python tests/measured/measure_kernel_hazards.py`` in a scratch venv). Each case is written to
its own module file, so a case a release cannot compile fails alone. Prints one JSON object per case:
the Warp version, AD and FD gradients, the largest error, and a verdict:

- ``match``: ``|AD - FD| <= 1e-3 + 1e-2 * |FD|`` everywhere (numpy allclose, as ``warp.autograd``);
- ``wrong``: finite but different; ``nonfinite``: AD has inf/NaN where FD is finite;
- ``error``: the case did not compile or run on this release (the message says why).

Usage: ``python measure_kernel_hazards.py [CASE ...]`` (all cases when none are named).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import textwrap
import traceback

import numpy as np

HEADER = "import warp as wp\n"

# Each case: source (a module defining `kernel`), params in signature order:
#   ("in", values) a differentiable float32 / vec3 input; ("out", shape) an output summed into the loss
#   with fixed weights; ("inout", values) a differentiable input the kernel also writes: perturbed,
#   and its final values summed into the loss; ("const", values) a non-differentiable array
#   re-created for every launch; ("scalar", value) a plain argument. dim: launch dimension.
#   structs: {param position: struct class name} for arrays of a `@wp.struct` of the module (all
#   float32 fields), whose values are given flat, one row of floats per element.
PARTICLE = """
        @wp.struct
        class Particle:
            pos: wp.vec3
            vel: wp.vec3
        """
PARTICLES = [[0.5, 1.0, -0.5, 1.0, 2.0, 0.5], [1.5, -1.0, 0.3, -0.7, 0.2, 1.2]]
CASES: dict[str, dict] = {
    # -- WL101 array-component-write: component and field stores on array elements ------------
    "wl101_component_accumulate": dict(source="""
        @wp.kernel
        def kernel(y: wp.array(dtype=wp.vec3), x: wp.array(dtype=float)):
            i = wp.tid()
            y[i].y += x[i] * x[i]
        """, params=[("inout", [[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]]), ("in", [1.5, 0.7])], dim=2),
    "wl101_component_subtract": dict(source="""
        @wp.kernel
        def kernel(y: wp.array(dtype=wp.vec3), x: wp.array(dtype=float)):
            i = wp.tid()
            y[i][1] -= x[i] * x[i]
        """, params=[("inout", [[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]]), ("in", [1.5, 0.7])], dim=2),
    "wl101_component_scale": dict(source="""
        @wp.kernel
        def kernel(y: wp.array(dtype=wp.vec3)):
            i = wp.tid()
            y[i].y *= 2.0
        """, params=[("inout", [[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]])], dim=2),
    "wl101_struct_field_update": dict(source=PARTICLE + """
        @wp.kernel
        def kernel(particles: wp.array(dtype=Particle), f: wp.array(dtype=wp.vec3), dt: float):
            tid = wp.tid()
            p = particles[tid]
            particles[tid].vel = p.vel + f[tid] * dt
        """, params=[("inout", PARTICLES), ("in", [[1.0, 2.0, 3.0], [0.5, -0.5, 2.0]]), ("scalar", 0.1)],
        structs={0: "Particle"}, dim=2),
    "wl101_struct_field_accumulate": dict(source=PARTICLE + """
        @wp.kernel
        def kernel(particles: wp.array(dtype=Particle), f: wp.array(dtype=wp.vec3), dt: float):
            tid = wp.tid()
            particles[tid].vel += f[tid] * dt
        """, params=[("inout", PARTICLES), ("in", [[1.0, 2.0, 3.0], [0.5, -0.5, 2.0]]), ("scalar", 0.1)],
        structs={0: "Particle"}, dim=2),
    "wl101_struct_fields_stored": dict(source=PARTICLE + """
        @wp.kernel
        def kernel(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), out: wp.array(dtype=Particle)):
            tid = wp.tid()
            out[tid].pos = x[tid]
            out[tid].vel = v[tid] * v[tid][0]
        """, params=[("in", [[1.0, 2.0, 3.0], [0.5, -0.5, 2.0]]), ("in", [[0.3, 1.0, 2.0], [1.5, 0.5, -1.0]]),
                     ("out", (2,))], structs={2: "Particle"}, dim=2),
    "wl101_control_struct_constructed": dict(source=PARTICLE + """
        @wp.kernel
        def kernel(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), out: wp.array(dtype=Particle)):
            tid = wp.tid()
            out[tid] = Particle(x[tid], v[tid] * v[tid][0])
        """, params=[("in", [[1.0, 2.0, 3.0], [0.5, -0.5, 2.0]]), ("in", [[0.3, 1.0, 2.0], [1.5, 0.5, -1.0]]),
                     ("out", (2,))], structs={2: "Particle"}, dim=2),
    "wl101_control_struct_rebuilt": dict(source=PARTICLE + """
        @wp.kernel
        def kernel(particles: wp.array(dtype=Particle), f: wp.array(dtype=wp.vec3), dt: float):
            tid = wp.tid()
            p = particles[tid]
            particles[tid] = Particle(p.pos, p.vel + f[tid] * dt)
        """, params=[("inout", PARTICLES), ("in", [[1.0, 2.0, 3.0], [0.5, -0.5, 2.0]]), ("scalar", 0.1)],
        structs={0: "Particle"}, dim=2),
    # -- WL102 array-read-then-write: index comparison, updates through a local copy ------------
    "wl102_control_prefix_product": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), n: int, prods: wp.array(dtype=float)):
            prods[0] = 1.0
            for i in range(n):
                prods[i + 1] = x[i] * prods[i]
        """, params=[("in", [0.5, 1.5, -2.0, 1.2]), ("scalar", 4), ("out", (5,))], dim=1),
    "wl102_read_ahead_product": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), n: int):
            for i in range(n):
                a[i] = a[i + 1] * a[i + 1]
        """, params=[("inout", [0.5, 1.5, -2.0, 1.2, 0.7]), ("scalar", 4)], dim=1),
    "wl102_control_read_ahead_descending": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), n: int):
            for i in range(n - 1, -1, -1):
                a[i] = a[i + 1] * a[i + 1]
        """, params=[("inout", [0.5, 1.5, -2.0, 1.2, 0.7]), ("scalar", 4)], dim=1),
    "wl102_struct_field_product": dict(source=PARTICLE + """
        @wp.kernel
        def kernel(particles: wp.array(dtype=Particle), f: wp.array(dtype=wp.vec3)):
            tid = wp.tid()
            p = particles[tid]
            particles[tid].vel = wp.cw_mul(p.vel, f[tid])
        """, params=[("inout", PARTICLES), ("in", [[1.0, 2.0, 3.0], [0.5, -0.5, 2.0]])],
        structs={0: "Particle"}, dim=2),
    "wl102_copy_additive": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), x: wp.array(dtype=float)):
            i = wp.tid()
            v = a[i]
            a[i] = v + x[i] * x[i]
        """, params=[("inout", [0.5, 1.5, -2.0]), ("in", [1.0, 2.0, 0.5])], dim=3),
    "wl102_copy_scaled": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), damping: float):
            i = wp.tid()
            v = a[i]
            a[i] = v * damping
        """, params=[("inout", [0.5, 1.5, -2.0]), ("scalar", 0.9)], dim=3),
    "wl102_scaled_in_place": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), damping: float):
            i = wp.tid()
            a[i] = a[i] * damping
        """, params=[("inout", [0.5, 1.5, -2.0]), ("scalar", 0.9)], dim=3),
    # -- WL103 vector-component-overwrite: a local matrix's diagonal written in two loops ---------
    "wl103_control_diagonal_first_write": dict(source="""
        @wp.kernel
        def kernel(d: wp.array(dtype=float), r: wp.array(dtype=float), k: float, out: wp.array(dtype=float)):
            tid = wp.tid()
            m = wp.mat33(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            for i in range(3):
                m[i, i] = d[i] * k
            v = m * wp.vec3(r[0], r[1], r[2])
            out[tid] = wp.dot(v, v)
        """, params=[("in", [0.5, 1.5, -2.0]), ("in", [1.0, 2.0, 0.5]), ("scalar", 1.5), ("out", (1,))], dim=1),
    "wl103_diagonal_first_write_dynamic": dict(source="""
        @wp.kernel
        def kernel(d: wp.array(dtype=float), r: wp.array(dtype=float), k: float, n: int,
                   out: wp.array(dtype=float)):
            tid = wp.tid()
            m = wp.mat33(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            for i in range(n):
                m[i, i] = d[i] * k
            v = m * wp.vec3(r[0], r[1], r[2])
            out[tid] = wp.dot(v, v)
        """, params=[("in", [0.5, 1.5, -2.0]), ("in", [1.0, 2.0, 0.5]), ("scalar", 1.5), ("scalar", 3),
                     ("out", (1,))], dim=1),
    "wl103_diagonal_second_write": dict(source="""
        @wp.kernel
        def kernel(d: wp.array(dtype=float), r: wp.array(dtype=float), k: float, out: wp.array(dtype=float)):
            tid = wp.tid()
            m = wp.mat33(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            for i in range(3):
                m[i, i] = d[i] * k
            for i in range(3):
                m[i, i] = m[i, i] * r[i]
            v = m * wp.vec3(1.0, 2.0, 3.0)
            out[tid] = wp.dot(v, v)
        """, params=[("in", [0.5, 1.5, -2.0]), ("in", [1.0, 2.0, 0.5]), ("scalar", 1.5), ("out", (1,))], dim=1),
    "wl103_diagonal_second_write_additive": dict(source="""
        @wp.kernel
        def kernel(d: wp.array(dtype=float), r: wp.array(dtype=float), k: float, out: wp.array(dtype=float)):
            tid = wp.tid()
            m = wp.mat33(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            for i in range(3):
                m[i, i] = d[i] * k
            for i in range(3):
                m[i, i] = m[i, i] + r[i]
            v = m * wp.vec3(1.0, 2.0, 3.0)
            out[tid] = wp.dot(v, v)
        """, params=[("in", [0.5, 1.5, -2.0]), ("in", [1.0, 2.0, 0.5]), ("scalar", 1.5), ("out", (1,))], dim=1),
    # -- WL105 local-struct-field-write ------------------------------------------------------------
    "wl105_struct_fields": dict(source="""
        @wp.struct
        class Body:
            pos: wp.vec3
            mass: float

        @wp.kernel
        def kernel(x: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            b = Body()
            b.pos = x[i]
            b.mass = m[i]
            out[i] = b.mass * wp.dot(b.pos, b.pos)
        """, params=[("in", [[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]]), ("in", [1.5, 0.7]), ("out", (2,))], dim=2),
    "wl105_struct_fields_in_func": dict(source="""
        @wp.struct
        class Body:
            pos: wp.vec3
            mass: float

        @wp.func
        def energy(p: wp.vec3, m: float):
            b = Body()
            b.pos = p
            b.mass = m
            return b.mass * wp.dot(b.pos, b.pos)

        @wp.kernel
        def kernel(x: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = energy(x[i], m[i])
        """, params=[("in", [[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]]), ("in", [1.5, 0.7]), ("out", (2,))], dim=2),
    "wl105_control_value_constructor": dict(source="""
        @wp.struct
        class Body:
            pos: wp.vec3
            mass: float

        @wp.kernel
        def kernel(x: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            b = Body(x[i], m[i])
            out[i] = b.mass * wp.dot(b.pos, b.pos)
        """, params=[("in", [[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]]), ("in", [1.5, 0.7]), ("out", (2,))], dim=2),
    "wl105_control_no_struct": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            p = x[i]
            out[i] = m[i] * wp.dot(p, p)
        """, params=[("in", [[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]]), ("in", [1.5, 0.7]), ("out", (2,))], dim=2),
    # -- WL106 array-double-store -----------------------------------------------------------------
    "wl106_double_store": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = x[i] * 2.0
            y[i] = x[i] * x[i]
        """, params=[("in", [0.5, 1.5, -2.0]), ("out", (3,))], dim=3),
    "wl106_control_different_index": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[2 * i] = x[i] * 2.0
            y[2 * i + 1] = x[i] * x[i]
        """, params=[("in", [0.5, 1.5, -2.0]), ("out", (6,))], dim=3),
    # -- WL107 dynamic-loop-carried-use -----------------------------------------------------------
    "wl107_func_ratio": dict(source="""
        @wp.func
        def weighted_mean(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int):
            s = float(0.0)
            norm = float(0.0)
            for j in range(n):
                s += x[j] * w[j]
                norm += w[j]
            return s / norm

        @wp.kernel
        def kernel(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            out[0] = weighted_mean(x, w, n)
        """, params=[("in", [0.5, 1.5, -2.0]), ("in", [1.0, 2.0, 3.0]), ("scalar", 3), ("out", (1,))], dim=1),
    "wl107_func_sqrt": dict(source="""
        @wp.func
        def norm(x: wp.array(dtype=float), n: int):
            s = float(0.0)
            for j in range(n):
                s += x[j] * x[j]
            return wp.sqrt(s)

        @wp.kernel
        def kernel(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            out[0] = norm(x, n)
        """, params=[("in", [0.5, 1.5, -2.0]), ("scalar", 3), ("out", (1,))], dim=1),
    "wl107_kernel_ratio": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            s = float(0.0)
            norm = float(0.0)
            for j in range(n):
                s += x[j] * w[j]
                norm += w[j]
            out[0] = s / norm
        """, params=[("in", [0.5, 1.5, -2.0]), ("in", [1.0, 2.0, 3.0]), ("scalar", 3), ("out", (1,))], dim=1),
    "wl107_kernel_product": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), c: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            s = float(0.0)
            for j in range(n):
                s = s + x[j]
            out[0] = s * c[0]
        """, params=[("in", [0.5, 1.5, 2.0]), ("in", [2.0]), ("scalar", 3), ("out", (1,))], dim=1),
    "wl107_kernel_static_loop_after": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            i = wp.tid()
            s = float(1.0)
            for j in range(n):
                s += x[i]
            for j in range(4):
                s = s * x[i]
            out[i] = s
        """, params=[("in", [0.5, 1.5]), ("scalar", 3), ("out", (2,))], dim=2),
    "wl107_control_func_linear": dict(source="""
        @wp.func
        def total(x: wp.array(dtype=float), n: int):
            s = float(0.0)
            for j in range(n):
                s += x[j] * x[j]
            return s * 2.0

        @wp.kernel
        def kernel(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            out[0] = total(x, n)
        """, params=[("in", [0.5, 1.5, -2.0]), ("scalar", 3), ("out", (1,))], dim=1),
    "wl107_control_divide_in_caller": dict(source="""
        @wp.func
        def weighted_sum(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int):
            s = float(0.0)
            for j in range(n):
                s += x[j] * w[j]
            return s

        @wp.func
        def weight_sum(w: wp.array(dtype=float), n: int):
            s = float(0.0)
            for j in range(n):
                s += w[j]
            return s

        @wp.kernel
        def kernel(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            out[0] = weighted_sum(x, w, n) / weight_sum(w, n)
        """, params=[("in", [0.5, 1.5, -2.0]), ("in", [1.0, 2.0, 3.0]), ("scalar", 3), ("out", (1,))], dim=1),
    # -- WL108 ternary-array-select ---------------------------------------------------------------
    "wl108_ternary": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: int, out: wp.array(dtype=float)):
            i = wp.tid()
            v = a[i] / t[i] if flag == 1 else a[i]
            out[i] = v * v
        """, params=[("in", [0.5, 1.5]), ("in", [2.0, 3.0]), ("scalar", 1), ("out", (2,))], dim=2),
    "wl108_ternary_store": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
            i = wp.tid()
            v = a[i] / t[i] if flag else a[i]
            out[i] = v
        """, params=[("in", [0.5, 1.5]), ("in", [2.0, 3.0]), ("scalar", True), ("out", (2,))], dim=2),
    "wl108_ternary_store_not_taken": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
            i = wp.tid()
            v = a[i] / t[i] if flag else a[i]
            out[i] = v
        """, params=[("in", [0.5, 1.5]), ("in", [2.0, 3.0]), ("scalar", False), ("out", (2,))], dim=2),
    "wl108_ternary_two_arrays": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
            i = wp.tid()
            v = a[i] if flag else t[i]
            out[i] = v
        """, params=[("in", [0.5, 1.5]), ("in", [2.0, 3.0]), ("scalar", True), ("out", (2,))], dim=2),
    "wl108_ternary_computed_branches": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
            i = wp.tid()
            v = a[i] / t[i] if flag else a[i] * 2.0
            out[i] = v
        """, params=[("in", [0.5, 1.5]), ("in", [2.0, 3.0]), ("scalar", True), ("out", (2,))], dim=2),
    "wl108_ternary_literal_other": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
            i = wp.tid()
            v = a[i] if flag else 0.0
            out[i] = v * t[i]
        """, params=[("in", [0.5, 1.5]), ("in", [2.0, 3.0]), ("scalar", True), ("out", (2,))], dim=2),
    "wl108_ternary_vec3": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=wp.vec3), t: wp.array(dtype=wp.vec3), flag: wp.bool, out: wp.array(dtype=float)):
            i = wp.tid()
            v = a[i] if flag else t[i]
            out[i] = wp.dot(v, v)
        """, params=[("in", [[0.5, 1.0, 2.0], [1.5, 0.2, 0.1]]), ("in", [[2.0, 3.0, 1.0], [1.0, 1.0, 1.0]]),
                     ("scalar", True), ("out", (2,))], dim=2),
    "wl108_control_local_branch": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
            i = wp.tid()
            x = a[i]
            y = t[i]
            v = x if flag else y
            out[i] = v
        """, params=[("in", [0.5, 1.5]), ("in", [2.0, 3.0]), ("scalar", True), ("out", (2,))], dim=2),
    "wl108_control_if_block": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: int, out: wp.array(dtype=float)):
            i = wp.tid()
            v = a[i]
            if flag == 1:
                v = a[i] / t[i]
            out[i] = v * v
        """, params=[("in", [0.5, 1.5]), ("in", [2.0, 3.0]), ("scalar", 1), ("out", (2,))], dim=2),
    # -- WL109 where-unselected-nan ---------------------------------------------------------------
    "wl109_where_exp": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = wp.where(x[i] < 20.0, wp.exp(x[i]), 0.0)
        """, params=[("in", [1.0, 100.0]), ("out", (2,))], dim=2),
    "wl109_where_division": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = wp.where(x[i] != 0.0, 1.0 / x[i], 0.0)
        """, params=[("in", [2.0, 0.0]), ("out", (2,))], dim=2),
    "wl109_control_safe_operands": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = wp.where(x[i] > 0.0, x[i] * x[i], -x[i])
        """, params=[("in", [1.0, -100.0]), ("out", (2,))], dim=2),
    # -- WL110 sqrt-at-zero -----------------------------------------------------------------------
    "wl110_sqrt_dot": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
            i = wp.tid()
            d = a[i] - b[i]
            out[i] = wp.sqrt(wp.dot(d, d))
        """, params=[("in", [[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]]), ("const", [[0.0, 0.0, 0.0], [0.5, 0.5, 0.5]]),
                     ("out", (2,))], dim=2),
    "wl110_pow_half": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
            i = wp.tid()
            d = a[i] - b[i]
            out[i] = wp.pow(wp.dot(d, d), 0.5)
        """, params=[("in", [[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]]), ("const", [[0.0, 0.0, 0.0], [0.5, 0.5, 0.5]]),
                     ("out", (2,))], dim=2),
    "wl110_control_length": dict(source="""
        @wp.kernel
        def kernel(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = wp.length(a[i] - b[i])
        """, params=[("in", [[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]]), ("const", [[0.0, 0.0, 0.0], [0.5, 0.5, 0.5]]),
                     ("out", (2,))], dim=2),
    # -- WL111 atomic-counter-index ---------------------------------------------------------------
    "wl111_atomic_slot": dict(source="""
        @wp.kernel
        def kernel(x: wp.array(dtype=float), counter: wp.array(dtype=int), out: wp.array(dtype=float)):
            i = wp.tid()
            if x[i] > 0.0:
                slot = wp.atomic_add(counter, 0, 1)
                out[slot] = x[i] * 2.0
        """, params=[("in", [0.5, 1.5, 2.5]), ("const", np.zeros(1, dtype=np.int32)), ("out", (6,))], dim=3),
    "wl111_control_func_replay": dict(source="""
        @wp.func
        def reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
            slot = wp.atomic_add(counter, 0, 1)
            slots[i] = slot
            return slot

        @wp.func_replay(reserve)
        def replay_reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
            return slots[i]

        @wp.kernel
        def kernel(x: wp.array(dtype=float), counter: wp.array(dtype=int), slots: wp.array(dtype=int),
                   out: wp.array(dtype=float)):
            i = wp.tid()
            if x[i] > 0.0:
                slot = reserve(counter, slots, i)
                out[slot] = x[i] * 2.0
        """, params=[("in", [0.5, 1.5, 2.5]), ("const", np.zeros(1, dtype=np.int32)),
                     ("const", np.zeros(3, dtype=np.int32)), ("out", (6,))], dim=3),
    # -- WL112 custom-grad-assign -----------------------------------------------------------------
    "wl112_adjoint_assign": dict(source="""
        @wp.func
        def square(x: float):
            return x * x

        @wp.func_grad(square)
        def adj_square(x: float, adj_ret: float):
            wp.adjoint[x] = 2.0 * x * adj_ret

        @wp.kernel
        def kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            v = x[i]
            out[i] = square(v) + v * v
        """, params=[("in", [0.5, 1.5]), ("out", (2,))], dim=2),
    "wl112_adjoint_assign_reused": dict(source="""
        @wp.func
        def square(x: float):
            return x * x

        @wp.func_grad(square)
        def adj_square(x: float, adj_ret: float):
            wp.adjoint[x] = 2.0 * x * adj_ret

        @wp.kernel
        def kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            v = x[i]
            out[i] = v * v + square(v)
        """, params=[("in", [0.5, 1.5]), ("out", (2,))], dim=2),
    "wl112_control_accumulate": dict(source="""
        @wp.func
        def square(x: float):
            return x * x

        @wp.func_grad(square)
        def adj_square(x: float, adj_ret: float):
            wp.adjoint[x] += 2.0 * x * adj_ret

        @wp.kernel
        def kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            v = x[i]
            out[i] = square(v) + v * v
        """, params=[("in", [0.5, 1.5]), ("out", (2,))], dim=2),
    # -- WL113 func-native-no-adjoint -------------------------------------------------------------
    "wl113_native_no_adj": dict(source="""
        @wp.func_native("out[tid] = x[tid] * x[tid];")
        def square_into(x: wp.array(dtype=float), out: wp.array(dtype=float), tid: int): ...

        @wp.kernel
        def kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            square_into(x, out, i)
        """, params=[("in", [0.5, 1.5]), ("out", (2,))], dim=2),
    "wl113_control_adj_snippet": dict(source="""
        @wp.func_native("out[tid] = x[tid] * x[tid];", adj_snippet="adj_x[tid] += 2.0f * x[tid] * adj_out[tid];")
        def square_into(x: wp.array(dtype=float), out: wp.array(dtype=float), tid: int): ...

        @wp.kernel
        def kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            square_into(x, out, i)
        """, params=[("in", [0.5, 1.5]), ("out", (2,))], dim=2),
    # -- WL114 grad-call-in-kernel ----------------------------------------------------------------
    "wl114_grad_call": dict(source="""
        @wp.func
        def cube(x: float):
            return x * x * x

        @wp.kernel
        def kernel(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = wp.grad(cube)(x[i])
        """, params=[("in", [0.5, 1.5]), ("out", (2,))], dim=2),
}


STEP = 1e-3  # central-difference step: float32 kernels need 1e-3 to 1e-2
ATOL, RTOL = 1e-3, 1e-2  # as warp.autograd: |AD - FD| <= ATOL + RTOL * |FD|


def central_difference(loss, value: np.ndarray, step: float = STEP) -> np.ndarray:
    """d loss / d value by central differences, one element at a time (``value`` keeps its shape)."""
    value = np.asarray(value, dtype=np.float32)
    grad = np.zeros(value.size)
    for j in range(value.size):
        plus, minus = value.copy().reshape(-1), value.copy().reshape(-1)
        plus[j] += step
        minus[j] -= step
        grad[j] = (loss(plus.reshape(value.shape)) - loss(minus.reshape(value.shape))) / (2 * step)
    return grad


def compare(ad: np.ndarray, fd: np.ndarray) -> dict:
    """The verdict on AD against FD (flat arrays): ``match``, ``wrong`` or ``nonfinite``, with both rounded."""
    ad, fd = np.asarray(ad, dtype=np.float64).reshape(-1), np.asarray(fd, dtype=np.float64).reshape(-1)
    result = {"ad": [float(v) for v in ad], "fd": [float(v) for v in np.round(fd, 4)]}
    if not np.all(np.isfinite(ad[np.isfinite(fd)])):
        result["verdict"] = "nonfinite"
        return result
    result["max_abs_error"] = float(np.max(np.abs(ad - fd))) if ad.size else 0.0
    result["verdict"] = "match" if ad.shape == fd.shape and np.allclose(ad, fd, atol=ATOL, rtol=RTOL) else "wrong"
    return result


def _load(name: str, source: str, directory: str):
    path = os.path.join(directory, f"{name}.py")
    with open(path, "w") as handle:
        handle.write(HEADER + textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(f"measured_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _array(wp, values, device, requires_grad=False, dtype=None):
    # Every allocation names the launch device: the default device is cuda:0 on a machine with a
    # GPU, and a cuda array passed to a cpu launch crashes the process.
    if dtype is not None:  # a struct: one row of float32 fields per element
        rows = np.asarray(values, dtype=np.float32)
        return wp.array(np.frombuffer(rows.tobytes(), dtype=dtype.numpy_dtype()), dtype=dtype,
                        requires_grad=requires_grad, device=device)
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return wp.array(values.astype(np.int32), dtype=wp.int32, device=device)
    values = values.astype(np.float32)
    dtype = wp.vec3 if values.ndim == 2 and values.shape[1] == 3 else wp.float32
    return wp.array(values, dtype=dtype, requires_grad=requires_grad, device=device)


def _flat(values: np.ndarray) -> np.ndarray:
    """The float32 values of a plain, vector or struct array, in memory order."""
    return np.frombuffer(np.ascontiguousarray(values).tobytes(), dtype=np.float32)


def _loss_size(kind: str, value, struct) -> int:
    if kind == "out":
        floats = struct.numpy_dtype()["itemsize"] // 4 if struct is not None else 1
        return int(np.prod(value)) * floats
    return np.asarray(value, dtype=np.float32).size


def measure(name: str, case: dict, directory: str, device: str = "cpu") -> dict:
    import warp as wp

    result = {"case": name, "warp": wp.__version__}
    try:
        module = _load(name, case["source"], directory)
        params = case["params"]
        structs = {k: getattr(module, struct) for k, struct in case.get("structs", {}).items()}
        rng = np.random.default_rng(0)
        weights = {k: rng.uniform(0.5, 1.5, size=_loss_size(p[0], p[1], structs.get(k))).astype(np.float32)
                   for k, p in enumerate(params) if p[0] in ("out", "inout")}
        inputs = {k: np.asarray(p[1], dtype=np.float32) for k, p in enumerate(params) if p[0] in ("in", "inout")}

        def launch(values, tape=None):
            args, arrays = [], {}
            for k, (kind, value) in enumerate(params):
                if kind in ("in", "inout"):
                    arrays[k] = _array(wp, values[k], device, tape is not None, structs.get(k))
                elif kind == "out":
                    arrays[k] = wp.zeros(value, dtype=structs.get(k, wp.float32), requires_grad=tape is not None,
                                         device=device)
                elif kind == "const":
                    arrays[k] = _array(wp, value, device)
                if kind == "scalar":
                    args.append(value)
                else:
                    args.append(arrays[k])
            if tape is None:
                wp.launch(module.kernel, dim=case["dim"], inputs=args, device=device)
            else:
                with tape:
                    wp.launch(module.kernel, dim=case["dim"], inputs=args, device=device)
            wp.synchronize_device(device)
            return arrays

        def loss(values) -> float:
            arrays = launch(values)
            return float(sum((weights[k] * _flat(arrays[k].numpy())).sum() for k in weights))

        def seed(k, array):  # the loss weights as the array's own dtype: d loss / d (final values)
            if k in structs:
                return _array(wp, weights[k].reshape(len(array), -1), device, dtype=structs[k])
            return wp.array(weights[k].reshape(array.numpy().shape), dtype=array.dtype, device=device)

        tape = wp.Tape()
        arrays = launch(inputs, tape)
        tape.backward(grads={arrays[k]: seed(k, arrays[k]) for k in weights})
        ad = {k: _flat(arrays[k].grad.numpy()).copy() for k in inputs}
        fd = {k: central_difference(lambda v, k=k: loss({**inputs, k: v}), value) for k, value in inputs.items()}
        result.update(compare(np.concatenate([ad[k] for k in inputs]), np.concatenate([fd[k] for k in inputs])))
    except Exception as error:  # a release that cannot build the case
        result["verdict"] = "error"
        result["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        result["trace"] = traceback.format_exc(limit=2)[-400:]
    return result


def main(argv: list[str]) -> int:
    import warp as wp

    wp.config.quiet = True
    wp.init()
    names = argv or list(CASES)
    with tempfile.TemporaryDirectory() as directory:
        for name in names:
            print(json.dumps(measure(name, CASES[name], directory)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
