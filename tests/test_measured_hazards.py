"""The kernel rules' claims, measured: each rule's first bad and first good example run through
``wp.Tape`` and central finite differences on the CPU, on the installed Warp.

This is independent of the runtime checker on purpose: it backs the rules' documentation with a
plain measurement (sum of weighted outputs, every input element perturbed).
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

wp = pytest.importorskip("warp")
np = pytest.importorskip("numpy")

from packaging.version import Version  # noqa: E402

from warp_lint.registry import all_rules  # noqa: E402
from warp_lint.testing import lint_code  # noqa: E402

WARP_VERSION = Version(wp.config.version)
SIZE = 4
STEP = 1e-3
# float32 central differences: correct kernels measured <= 4e-5 relative error, wrong ones >= 3e-2.
TOLERANCE = 1e-2


@pytest.fixture(scope="module", autouse=True)
def warp_on_cpu():
    wp.init()


def _load_program(code: str, path):
    """``code`` written to ``path`` and imported: a measured program's module."""
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(f"measured_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_kernel(code: str, path):
    module = _load_program(textwrap.dedent(code), path)
    kernels = [v for v in vars(module).values() if isinstance(v, wp.Kernel)]
    assert len(kernels) == 1, "each measured example holds one kernel"
    return kernels[0]


def _inputs(kernel, rng):
    values = []
    for argument in kernel.adj.args:
        if isinstance(argument.type, wp.array):
            length = wp.types.type_size(argument.type.dtype)
            shape = (SIZE, length) if length > 1 else (SIZE,)
            values.append(rng.uniform(0.5, 1.5, size=shape).astype(np.float32))
        elif argument.type in (int, wp.int32):
            values.append(SIZE)
        else:
            values.append(float(rng.uniform(0.5, 1.5)))
    return values


def _launch(kernel, values, requires_grad=False, tape=None):
    arrays = []
    for argument, value in zip(kernel.adj.args, values):
        if isinstance(argument.type, wp.array):
            arrays.append(wp.array(value.copy(), dtype=argument.type.dtype, device="cpu", requires_grad=requires_grad))
        else:
            arrays.append(value)
    uses_tid = "wp.tid()" in kernel.adj.source or "tid()" in kernel.adj.source
    dim = SIZE if uses_tid else 1
    if tape is None:
        wp.launch(kernel, dim=dim, inputs=arrays, device="cpu")
    else:
        with tape:
            wp.launch(kernel, dim=dim, inputs=arrays, device="cpu")
    return arrays


def measure_relative_error(kernel, seed=0) -> float:
    """max |AD - FD| / max |FD| over every (input element) of the weighted sum of outputs."""
    rng = np.random.default_rng(seed)
    initial = _inputs(kernel, rng)
    after = _launch(kernel, initial)
    array_slots = [i for i, a in enumerate(kernel.adj.args) if isinstance(a.type, wp.array)]
    written = [i for i in array_slots if not np.array_equal(after[i].numpy(), initial[i])]
    weights = {i: rng.uniform(0.5, 1.5, size=initial[i].shape).astype(np.float32) for i in written}

    def loss(values) -> float:
        result = _launch(kernel, values)
        return float(sum(np.sum(weights[i] * result[i].numpy().astype(np.float64)) for i in written))

    tape = wp.Tape()
    arrays = _launch(kernel, initial, requires_grad=True, tape=tape)
    tape.backward(grads={arrays[i]: wp.array(weights[i], dtype=arrays[i].dtype, device="cpu") for i in written})
    autodiff = {i: arrays[i].grad.numpy().copy() for i in array_slots}

    worst_error, largest = 0.0, 0.0
    for slot in array_slots:
        flat = initial[slot].reshape(-1)
        for element in range(flat.size):
            plus = [v.copy() if isinstance(v, np.ndarray) else v for v in initial]
            minus = [v.copy() if isinstance(v, np.ndarray) else v for v in initial]
            plus[slot].reshape(-1)[element] += STEP
            minus[slot].reshape(-1)[element] -= STEP
            finite = (loss(plus) - loss(minus)) / (2 * STEP)
            worst_error = max(worst_error, abs(float(autodiff[slot].reshape(-1)[element]) - finite))
            largest = max(largest, abs(finite))
    assert largest > 0, "the example has no gradient to check"
    return worst_error / largest


MEASURED = ["WL101", "WL102", "WL103", "WL104"]


@pytest.mark.parametrize("code", MEASURED)
def test_good_example_gradient_is_correct(code, tmp_path):
    rule = all_rules()[code]
    kernel = _load_kernel(rule.VALID[0].code, tmp_path / f"{code.lower()}_good.py")
    assert measure_relative_error(kernel) < TOLERANCE


@pytest.mark.parametrize("code", MEASURED)
def test_bad_example_gradient_matches_the_rules_version_claim(code, tmp_path):
    rule = all_rules()[code]
    kernel = _load_kernel(rule.INVALID[0].code, tmp_path / f"{code.lower()}_bad.py")
    error = measure_relative_error(kernel)
    # The finding's own versions: a rule's range can be wider than one finding's (WL101: `=` <1.14, `+=` <1.18).
    if lint_code(rule.INVALID[0].code, select=[code], target=f"=={WARP_VERSION}"):
        assert error > TOLERANCE, f"{code} claims Warp {WARP_VERSION} is affected, but the gradient matched"
    else:
        assert error < TOLERANCE, f"{code} claims Warp {WARP_VERSION} is fixed, but the gradient is off by {error}"


def _propagate_error(kernel, parents, children) -> float:
    """Relative error of the tape against central differences for WL115's example over one joint order."""
    x0 = np.array([1.5, 0.5, 1.2, 0.8], dtype=np.float32)
    s0 = np.array([1.3, 0.7, 1.1], dtype=np.float32)
    weights = np.arange(1, x0.size + 1, dtype=np.float32)

    def run(x, s, tape=None):
        arrays = [wp.array(parents, dtype=int, device="cpu"), wp.array(children, dtype=int, device="cpu"),
                  wp.array(s, dtype=float, requires_grad=True, device="cpu"),
                  wp.array(x, dtype=float, requires_grad=True, device="cpu")]
        with tape if tape is not None else contextlib.nullcontext():
            wp.launch(kernel, dim=1, inputs=arrays, device="cpu")
        return arrays

    tape = wp.Tape()
    arrays = run(x0, s0, tape)
    tape.backward(grads={arrays[3]: wp.array(weights, dtype=float, device="cpu")})
    autodiff = np.concatenate([arrays[3].grad.numpy(), arrays[2].grad.numpy()])
    finite = []
    for k in range(x0.size + s0.size):
        values = []
        for sign in (1, -1):
            x, s = x0.copy(), s0.copy()
            (x if k < x0.size else s)[k % x0.size if k < x0.size else k - x0.size] += sign * STEP
            values.append(float(np.dot(weights, run(x, s)[3].numpy())))
        finite.append((values[0] - values[1]) / (2 * STEP))
    finite = np.array(finite)
    return float(np.abs(autodiff - finite).max() / np.abs(finite).max())


def test_an_index_data_overwrite_is_wrong_only_where_the_data_make_it_so(tmp_path):
    """WL115's claim: the same kernel is right over a tree's topological order and wrong where a
    body is written after a later joint read it; so WL102 (whatever the data) stays silent."""
    rule = all_rules()["WL115"]
    code = rule.INVALID[0].code
    assert [f.code for f in lint_code(code, select=["WL102", "WL115"])] == ["WL115"]
    kernel = _load_kernel(code, tmp_path / "wl115_propagate.py")
    assert _propagate_error(kernel, [0, 1, 1], [1, 2, 3]) < TOLERANCE
    assert _propagate_error(kernel, [1, 0, 1], [2, 1, 3]) > 10 * TOLERANCE


TILE_READERS = """
import warp as wp

T = 4


@wp.kernel
def transpose_into(x: wp.array2d(dtype=float), y: wp.array2d(dtype=float)):
    i, j = wp.tid()
    t = wp.tile_load(x, shape=(T, T), offset=(i * T, j * T))
    wp.tile_store(y, wp.tile_transpose(t), offset=(j * T, i * T))


@wp.kernel
def sine_into(x: wp.array2d(dtype=float), y: wp.array2d(dtype=float)):
    i, j = wp.tid()
    t = wp.tile_load(x, shape=(T, T), offset=(i * T, j * T))
    wp.tile_store(y, wp.tile_map(wp.sin, t), offset=(j * T, i * T))


@wp.kernel
def square_sum(y: wp.array2d(dtype=float), loss: wp.array(dtype=float)):
    i, j = wp.tid()
    wp.atomic_add(loss, 0, y[i, j] * y[i, j])


@wp.kernel
def reset(x: wp.array2d(dtype=float)):
    i, j = wp.tid()
    x[i, j] = 0.25


def train(reader, x0, record=True):
    x = wp.array(x0, dtype=float, requires_grad=True)
    y = wp.zeros_like(x, requires_grad=True)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch_tiled(reader, dim=(1, 1), inputs=[x], outputs=[y], block_dim=16)
        wp.launch(square_sum, dim=x0.shape, inputs=[y], outputs=[loss])
        wp.launch(reset, dim=x0.shape, inputs=[x])
    tape.backward(loss)
    return float(loss.numpy()[0]), x.grad.numpy()


def main(x0):
    return train(transpose_into, x0), train(sine_into, x0)
"""


def test_a_tile_reader_whose_adjoint_needs_no_values_survives_an_overwrite(tmp_path):
    """WL201 names only the reader whose adjoint reads the overwritten values: a tile loaded,
    transposed and stored is linear (its gradient measured right after the overwrite), a tile
    mapped through `wp.sin` is not (measured wrong)."""
    path = tmp_path / "tile_readers.py"
    found = lint_code(TILE_READERS, select=["WL201"], target="==1.19.0", path=str(path))
    assert [(f.code, "`sine_into`" in f.message, "`transpose_into`" in f.message) for f in found] == [
        ("WL201", True, False)]
    module = _load_program(TILE_READERS, path)
    x0 = np.random.default_rng(0).uniform(0.5, 1.5, (4, 4)).astype(np.float32)
    for reader, wrong in ((module.transpose_into, False), (module.sine_into, True)):
        autodiff = module.train(reader, x0)[1]
        finite = np.zeros_like(x0)
        for k in np.ndindex(x0.shape):
            plus, minus = x0.copy(), x0.copy()
            plus[k] += STEP
            minus[k] -= STEP
            finite[k] = (module.train(reader, plus)[0] - module.train(reader, minus)[0]) / (2 * STEP)
        error = float(np.abs(autodiff - finite).max() / np.abs(finite).max())
        assert (error > 10 * TOLERANCE) if wrong else (error < TOLERANCE), (reader.key, error)


CUSTOM_ADJOINT_READER = """
import warp as wp


@wp.func
def soft_norm(n: int, a: wp.array(dtype=float), out: wp.array(dtype=float)):
    for j in range(n):
        out[j] = wp.sqrt(a[j] * a[j] + 1.0)


@wp.func_grad(soft_norm)
def adj_soft_norm(n: int, a: wp.array(dtype=float), out: wp.array(dtype=float)):
    pass  # differentiated elsewhere: the values of `a` are never looked at


@wp.kernel
def normalize(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    soft_norm(a.shape[0], a, out)


@wp.kernel
def reset(a: wp.array(dtype=float)):
    a[wp.tid()] = 0.5


def gradient(values, overwrite):
    a = wp.array(values, dtype=float, requires_grad=True)
    out = wp.zeros_like(a, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(normalize, 1, inputs=[a], outputs=[out])
        if overwrite:
            wp.launch(reset, a.shape[0], inputs=[a])
    tape.backward(grads={out: wp.ones_like(out)})
    return a.grad.numpy()
"""


def test_an_array_only_a_custom_adjoint_ignores_reads_may_be_overwritten(tmp_path):
    """The helper's custom adjoint never looks at `a`: overwriting `a` on the tape changes no
    gradient (measured: the same with and without the overwrite), so WL201 is silent; without the
    custom adjoint the replayed helper reads the overwritten values and WL201 fires."""
    code = "def main(values):\n    return gradient(values, True)\n"
    assert [f.code for f in lint_code(CUSTOM_ADJOINT_READER + code, select=["WL201"])] == []
    plain = CUSTOM_ADJOINT_READER.replace("@wp.func_grad(soft_norm)", "@wp.func")
    assert [f.code for f in lint_code(plain + code, select=["WL201"])] == ["WL201"]
    module = _load_program(CUSTOM_ADJOINT_READER, tmp_path / "custom_adjoint_reader.py")
    values = np.array([0.5, 1.5, -1.0], dtype=np.float32)
    assert np.array_equal(module.gradient(values, True), module.gradient(values, False))


POWER_20 = """
import warp as wp
{options}

@wp.kernel
def power(x: wp.array(dtype=wp.float64), y: wp.array(dtype=wp.float64)):
    i = wp.tid()
    s = wp.float64(1.0)
    for k in range(20):
        s = s * x[i]
    y[i] = s
"""


@pytest.mark.parametrize(("options", "wrong"), [("", True), ('wp.set_module_options({"max_unroll": 32})', False)])
def test_raising_max_unroll_makes_a_constant_loop_static_and_its_gradient_right(options, wrong, tmp_path):
    """WL104's advice for a constant trip count over `max_unroll`: raise it. Measured both ways."""
    code = POWER_20.format(options=options)
    assert bool(lint_code(code, select=["WL104"])) is wrong
    module = _load_program(code, tmp_path / f"power_{'default' if wrong else 'raised'}.py")

    def run(values, tape=None):
        x = wp.array(values, dtype=wp.float64, requires_grad=True, device="cpu")
        y = wp.zeros_like(x, requires_grad=True)
        with tape if tape is not None else contextlib.nullcontext():
            wp.launch(module.power, len(values), inputs=[x], outputs=[y], device="cpu")
        return x, y

    values = np.array([1.05, 0.97])
    tape = wp.Tape()
    x, y = run(values, tape)
    tape.backward(grads={y: wp.ones_like(y)})
    finite = np.array([(run(values + h)[1].numpy().sum() - run(values - h)[1].numpy().sum()) / 2e-6
                       for h in np.eye(2) * 1e-6])
    error = float(np.abs(x.grad.numpy() - finite).max() / np.abs(finite).max())
    assert (error > 10 * TOLERANCE) if wrong else (error < 1e-6), error


NESTED_REPLAY = """
import numpy as np
import warp as wp


@wp.func
def reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
    slot = wp.atomic_add(counter, 0, 1)
    slots[i] = slot
    return slot


@wp.func_replay(reserve)
def replay_reserve(counter: wp.array(dtype=int), slots: wp.array(dtype=int), i: int):
    return slots[i]


@wp.func
def append(counter: wp.array(dtype=int), slots: wp.array(dtype=int), out: wp.array(dtype=float), i: int,
           value: float):
    slot = reserve(counter, slots, i)
    if slot < out.shape[0]:
        out[slot] = value


@wp.kernel
def through_helper(x: wp.array(dtype=float), counter: wp.array(dtype=int), slots: wp.array(dtype=int),
                   out: wp.array(dtype=float)):
    i = wp.tid()
    append(counter, slots, out, i, x[i] * x[i])


@wp.kernel
def from_kernel(x: wp.array(dtype=float), counter: wp.array(dtype=int), slots: wp.array(dtype=int),
                out: wp.array(dtype=float)):
    i = wp.tid()
    slot = reserve(counter, slots, i)
    if slot < out.shape[0]:
        out[slot] = x[i] * x[i]


@wp.kernel
def total(out: wp.array(dtype=float), loss: wp.array(dtype=float)):
    wp.atomic_add(loss, 0, out[wp.tid()])


def gradient(kernel, values):
    x = wp.array(values, dtype=float, requires_grad=True)
    counter = wp.zeros(1, dtype=int)
    slots = wp.zeros(len(values), dtype=int)
    out = wp.zeros(len(values), dtype=float, requires_grad=True)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, len(values), inputs=[x, counter, slots, out])
        wp.launch(total, len(values), inputs=[out, loss])
    tape.backward(loss)
    return x.grad.numpy()


def main():
    return gradient(through_helper, np.arange(1.0, 5.0))
"""


def test_a_replayed_reservation_called_from_a_helper_is_run_again_backward(tmp_path):
    """WL111 flags the call of a replayed function from another @wp.func: the backward pass runs
    the outer helper in full, the reservation counts again and the gradient is lost (measured
    zero); called from the kernel, the replay is used and the gradient is exact."""
    found = lint_code(NESTED_REPLAY, select=["WL111"])
    assert [(f.code, f.start.line) for f in found] == [("WL111", 20)]
    assert "`append` calls it" in found[0].message
    module = _load_program(NESTED_REPLAY, tmp_path / "nested_replay.py")
    values = np.arange(1.0, 5.0, dtype=np.float32)
    assert np.allclose(module.gradient(module.from_kernel, values), 2 * values)
    assert np.allclose(module.gradient(module.through_helper, values), 0.0)


RANKING = """
import numpy as np
import warp as wp


@wp.kernel
def penetration(x: wp.array(dtype=float), depth: wp.array(dtype=float)):
    i = wp.tid()
    depth[i] = x[i] * x[i]


@wp.kernel
def ranking(depth: wp.array(dtype=float), rank: wp.array(dtype=float)):
    i = wp.tid()
    rank[i] = wp.exp(depth[i])


def gradient(values, depth_flag, rank_flag):
    x = wp.array(values, dtype=float, requires_grad=True)
    depth = wp.zeros(len(values), dtype=float, requires_grad=depth_flag)
    rank = wp.zeros(len(values), dtype=float, requires_grad=rank_flag)
    tape = wp.Tape()
    with tape:
        wp.launch(penetration, len(values), inputs=[x], outputs=[depth])
        wp.launch(ranking, len(values), inputs=[depth], outputs=[rank])
    if rank_flag:
        tape.backward(grads={rank: wp.ones_like(rank)})
    else:
        tape.backward(grads={x: wp.ones_like(x)})
    return x.grad.numpy()


def select(x, n):
    depth = wp.zeros(n, dtype=float)
    rank = wp.zeros(n, dtype=float)
    tape = wp.Tape()
    with tape:
        wp.launch(penetration, n, inputs=[x], outputs=[depth])
        wp.launch(ranking, n, inputs=[depth], outputs=[rank])
"""


def test_a_missing_grad_matters_only_where_the_reader_has_a_gradient_to_pass_back(tmp_path):
    """WL206 on `depth` only when `ranking`'s output can hold a gradient: with `rank` allocated
    without `requires_grad`, giving `depth` the flag changes nothing (measured: the same either way); with
    `rank` allocated with it, the missing flag on `depth` loses the whole gradient."""
    assert lint_code(RANKING, select=["WL206"]) == []
    twin = RANKING.replace("    rank = wp.zeros(n, dtype=float)\n",
                           "    rank = wp.zeros(n, dtype=float, requires_grad=True)\n")
    assert [f.message.split("`")[1] for f in lint_code(twin, select=["WL206"])] == ["depth"]
    module = _load_program(RANKING, tmp_path / "ranking.py")
    values = np.array([0.3, 0.6, 0.9], dtype=np.float32)
    right = 2 * values * np.exp(values * values)
    assert np.array_equal(module.gradient(values, False, False), module.gradient(values, True, False))
    assert np.allclose(module.gradient(values, False, True), 0.0)
    assert np.allclose(module.gradient(values, True, True), right, rtol=1e-5)


WEIGHTED = """
import numpy as np
import warp as wp


@wp.kernel
def weigh(x: wp.array(dtype=float), w: wp.array(dtype=float), z: wp.array(dtype=float)):
    i = wp.tid()
    z[i] = x[i] * w[i]


@wp.kernel
def shift(x: wp.array(dtype=float)):
    x[wp.tid()] = 5.0


def gradients(values, weights, weights_need_grad):
    x = wp.array(values, dtype=float, requires_grad=True)
    w = wp.array(weights, dtype=float, requires_grad=weights_need_grad)
    z = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(weigh, len(values), inputs=[x, w], outputs=[z])
        wp.launch(shift, len(values), inputs=[x])
    tape.backward(grads={z: wp.ones_like(z)})
    return x.grad.numpy(), (w.grad.numpy() if weights_need_grad else None)


def constant_weights(n):
    x = wp.ones(n, dtype=float, requires_grad=True)
    w = wp.full(n, 2.0, dtype=float)
    z = wp.zeros(n, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(weigh, n, inputs=[x, w], outputs=[z])
        wp.launch(shift, n, inputs=[x])
    tape.backward(grads={z: wp.ones_like(z)})
"""


def test_a_factor_is_read_backward_only_for_the_other_factors_gradient(tmp_path):
    """`z = x * w` reads `x` again in its adjoint only to give `w` its gradient: overwriting `x`
    on the tape leaves `x`'s gradient right and makes `w`'s wrong (measured). With `w` allocated
    without `requires_grad`, WL201 is silent; with it (or a flag that is not a literal, as in
    `gradients`), WL201 names the overwrite."""
    constant = WEIGHTED.splitlines().index("def constant_weights(n):") + 1

    def reported(code):
        return [f.start.line >= constant for f in lint_code(code, select=["WL201"])]

    assert reported(WEIGHTED) == [False]
    twin = WEIGHTED.replace("    w = wp.full(n, 2.0, dtype=float)\n",
                            "    w = wp.full(n, 2.0, dtype=float, requires_grad=True)\n")
    assert reported(twin) == [False, True]
    module = _load_program(WEIGHTED, tmp_path / "weighted.py")
    values, weights = np.array([0.5, 1.5, -1.0], dtype=np.float32), np.array([2.0, 3.0, 4.0], dtype=np.float32)
    x_grad, w_grad = module.gradients(values, weights, True)
    assert np.allclose(x_grad, weights)  # right
    assert not np.allclose(w_grad, values) and np.allclose(w_grad, 5.0)  # the overwritten values
    assert np.allclose(module.gradients(values, weights, False)[0], weights)


STAGES = """
import numpy as np
import warp as wp


@wp.kernel
def stage(x: wp.array(dtype=float), cache: wp.array(dtype=float), y: wp.array(dtype=float), apply: int):
    i = wp.tid()
    if apply == 0:
        cache[i] = wp.sin(x[i])
    else:
        y[i] = cache[i] * cache[i]


def run_stage(x, cache, y, apply):
    wp.launch(stage, len(x), inputs=[x, cache, y, apply])


def gradient(values, third_apply):
    x = wp.array(values, dtype=float, requires_grad=True)
    other = wp.array(values + 0.5, dtype=float, requires_grad=True)
    cache = wp.zeros(len(values), dtype=float, requires_grad=True)
    y = wp.zeros(len(values), dtype=float, requires_grad=True)
    y2 = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        run_stage(x, cache, y, 0)
        run_stage(x, cache, y, 1)
        run_stage(other, cache, y2, third_apply)
    tape.backward(grads={y: wp.ones_like(y)})
    return x.grad.numpy()
"""
APPLY_TWICE = """

def apply_twice(x, other, cache, y, y2):
    tape = wp.Tape()
    with tape:
        run_stage(x, cache, y, 0)
        run_stage(x, cache, y, 1)
        run_stage(other, cache, y2, 1)
    tape.backward(grads={y: wp.ones_like(y)})
"""


def test_an_access_in_an_arm_a_launch_literal_rules_out_is_not_made(tmp_path):
    """One kernel, two stages chosen by an argument: with `apply` 1 a launch only reads `cache`,
    so a third launch applying again overwrites nothing (measured: the gradient is right), while
    one computing the cache again from another array does (measured wrong). The literal reaches
    the launch through a wrapper's parameter; a non-literal (`third_apply`) may be either."""
    stages = STAGES[:STAGES.index("def gradient")]
    assert lint_code(stages + APPLY_TWICE, select=["WL201"]) == []
    recompute = APPLY_TWICE.replace("run_stage(other, cache, y2, 1)", "run_stage(other, cache, y2, 0)")
    assert [f.message.split("`")[3] for f in lint_code(stages + recompute, select=["WL201"])] == ["cache"]
    assert len(lint_code(STAGES, select=["WL201"])) == 1
    module = _load_program(STAGES, tmp_path / "stages.py")
    values = np.array([0.3, 0.6, 0.9], dtype=np.float32)
    right = 2 * np.sin(values) * np.cos(values)
    assert np.allclose(module.gradient(values, 1), right, rtol=1e-5)
    assert not np.allclose(module.gradient(values, 0), right, rtol=1e-2)


FACTORY_POWERS = """
import numpy as np
import warp as wp


def make_power(n):
    @wp.kernel(module="unique")
    def power(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        t = wp.tid()
        v = float(1.0)
        for i in range(n):
            v *= x[t]
        out[t] = v

    return power


def gradient(n, values):
    kernel = make_power(n)
    x = wp.array(values, dtype=float, requires_grad=True)
    out = wp.zeros(len(values), dtype=float, requires_grad=True)
    with wp.Tape() as tape:
        wp.launch(kernel, len(values), inputs=[x], outputs=[out])
    tape.backward(grads={out: wp.ones_like(out)})
    return x.grad.numpy()


def sweep(values):
    return [gradient(n, values) for n in (6, 16)]
"""


def test_a_range_over_a_value_captured_from_a_factory_is_unrolled_when_small(tmp_path):
    """`range(n)` with `n` a factory's parameter: Warp reads `n` when it builds the kernel, so the
    loop is unrolled for 6 and 16 (the gradient is right) and dynamic past `max_unroll` (17: wrong).
    WL104 follows the values the file passes (through `gradient` to `sweep`'s table)."""
    assert lint_code(FACTORY_POWERS, select=["WL104"]) == []
    found = lint_code(FACTORY_POWERS.replace("(6, 16)", "(6, 17)"), select=["WL104"])
    assert len(found) == 1 and "`n` is captured as 6, 17" in found[0].message
    unknown = FACTORY_POWERS.replace("for n in (6, 16)", "for n in range(6, 17)")
    assert lint_code(unknown, select=["WL104"]) == []  # a captured constant of a value not shown
    module = _load_program(FACTORY_POWERS, tmp_path / "factory_powers.py")
    values = np.array([1.01, 0.99], dtype=np.float32)
    for n, wrong in ((6, False), (16, False), (17, True)):
        right = n * values ** (n - 1)
        assert np.allclose(module.gradient(n, values), right, rtol=1e-4) != wrong


FAST_PATH = """
import numpy as np
import warp as wp


@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


def power4(x, y, scratch, batched):
    fast = batched and not x.requires_grad
    if not fast:
        wp.launch(square, len(x), inputs=[x], outputs=[scratch])
        wp.launch(square, len(x), inputs=[scratch], outputs=[y])
        return
    wp.launch(square, len(x), inputs=[x], outputs=[scratch])
    wp.launch(square, len(x), inputs=[scratch], outputs=[y])
    scratch.zero_()  # the scratch is reused by the next batch


def gradient(values, batched):
    x = wp.array(values, dtype=float, requires_grad=True)
    y = wp.zeros(len(values), dtype=float, requires_grad=True)
    scratch = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        power4(x, y, scratch, batched)
    tape.backward(grads={y: wp.ones_like(y)})
    return x.grad.numpy()
"""


def test_a_path_taken_only_without_gradients_is_not_followed_under_a_tape(tmp_path):
    """`fast` holds only where `x` needs no gradient, and the code after `if not fast: return`
    runs only where it holds: under a tape that path never runs, and its zeroing of the scratch
    (which would break the gradient: measured) is not reported. Without the `requires_grad` test
    the fast path runs under the tape and WL201 names the zeroing."""
    assert lint_code(FAST_PATH, select=["WL201"]) == []
    unguarded = FAST_PATH.replace("fast = batched and not x.requires_grad", "fast = batched")
    assert [f.message.split("`")[1] for f in lint_code(unguarded, select=["WL201"])] == ["scratch.zero_()"]
    module = _load_program(FAST_PATH, tmp_path / "fast_path.py")
    values = np.array([0.5, 1.5, -1.0], dtype=np.float32)
    assert np.allclose(module.gradient(values, True), 4 * values ** 3, rtol=1e-5)
    twin = _load_program(unguarded, tmp_path / "fast_path_unguarded.py")
    assert np.allclose(twin.gradient(values, True), 0.0)


PROPAGATE_THROUGH_HELPER = """
import warp as wp


@wp.func
def squared_at(x: wp.array(dtype=float), k: int):
    return x[k] * x[k]


@wp.kernel
def propagate(parent: wp.array(dtype=int), child: wp.array(dtype=int), scale: wp.array(dtype=float),
              x: wp.array(dtype=float)):
    for j in range(parent.shape[0]):
        p = parent[j]
        c = child[j]
        x[c] = squared_at(x, p) * scale[j]
"""


def test_a_read_through_a_helper_is_at_the_element_its_arguments_name(tmp_path):
    """The parent's value read inside `squared_at(x, p)` is `x[p]` in the kernel's terms: the write
    to `x[c]` meets it only where the joint data make `p` and `c` coincide (WL115, measured right over
    a topological order, wrong otherwise). Read at `c` itself, it is the same element (WL102)."""
    assert [f.code for f in lint_code(PROPAGATE_THROUGH_HELPER, select=["WL102", "WL115"])] == ["WL115"]
    same = PROPAGATE_THROUGH_HELPER.replace("squared_at(x, p)", "squared_at(x, c)")
    assert [f.code for f in lint_code(same, select=["WL102", "WL115"])] == ["WL102"]
    kernel = _load_kernel(PROPAGATE_THROUGH_HELPER, tmp_path / "propagate_through_helper.py")
    assert _propagate_error(kernel, [0, 1, 1], [1, 2, 3]) < TOLERANCE
    assert _propagate_error(kernel, [1, 0, 1], [2, 1, 3]) > 10 * TOLERANCE


SETTLE = """
import numpy as np
import warp as wp


@wp.kernel
def settle(x: wp.array(dtype=float), damping: wp.array(dtype=float), out: wp.array(dtype=float), steps: int):
    i = wp.tid()
    v = x[i]
    d = float(1.0)
    for k in range(steps):
        d = d * (1.0 - damping[0])
        v = v + 0.1 * x[i]
    out[i] = v * d


def gradients(values, damping_value, damping_grad):
    x = wp.array(values, dtype=float, requires_grad=True)
    damping = wp.full(1, damping_value, dtype=float, requires_grad=damping_grad)
    out = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(settle, len(values), inputs=[x, damping], outputs=[out, 20])
    tape.backward(grads={out: wp.ones_like(out)})
    return x.grad.numpy(), (damping.grad.numpy() if damping_grad else None)


def fixed_damping(values):
    x = wp.array(values, dtype=float, requires_grad=True)
    damping = wp.full(1, 0.05, dtype=float)
    out = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(settle, len(values), inputs=[x, damping], outputs=[out, 20])
    tape.backward(grads={out: wp.ones_like(out)})
"""


def test_a_loop_carried_gradient_of_arrays_without_gradients_is_not_reported(tmp_path):
    """WL104 on `d` is about the gradient `d` carries, that of `damping` (measured wrong: -8.49
    against -22.64). Where every recorded launch binds `damping` to an array allocated without
    `requires_grad`, that gradient does not exist: WL104 is not reported. The stale `d` after the
    loop still breaks `x`'s gradient (3.0 against 1.075, either way): WL107 says so."""
    fixed = SETTLE[:SETTLE.index("def gradients")] + SETTLE[SETTLE.index("def fixed_damping"):]
    assert [f.code for f in lint_code(fixed, select=["WL104", "WL107"])] == ["WL107"]
    assert [f.code for f in lint_code(fixed, select=["WL104"])] == []
    learned = fixed.replace("wp.full(1, 0.05, dtype=float)", "wp.full(1, 0.05, dtype=float, requires_grad=True)")
    assert [f.code for f in lint_code(learned, select=["WL104"])] == ["WL104"]
    module = _load_program(SETTLE, tmp_path / "settle.py")
    values = np.array([0.5, 1.5, -1.0], dtype=np.float32)
    x_grad, damping_grad = module.gradients(values, 0.05, True)
    right_damping = float((values * 3.0 * -20 * 0.95 ** 19).sum())
    assert not np.isclose(damping_grad[0], right_damping, rtol=1e-2)
    assert not np.allclose(x_grad, 0.95 ** 20 * 3.0, rtol=1e-2)
    assert np.allclose(module.gradients(values, 0.05, False)[0], x_grad)


WEIGHTED_POWER = """
import numpy as np
import warp as wp


@wp.func
def power(x: float, weights: wp.array(dtype=float), n: int):
    p = float(1.0)
    if weights:
        for k in range(n):
            p = p * x * weights[k]
    return p


@wp.kernel
def apply(x: wp.array(dtype=float), weights: wp.array(dtype=float), out: wp.array(dtype=float), n: int):
    i = wp.tid()
    out[i] = x[i] * power(x[i], weights, n)


def gradient(values, weights):
    x = wp.array(values, dtype=float, requires_grad=True)
    out = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(apply, len(values), inputs=[x, WEIGHTS], outputs=[out, 3])
    tape.backward(grads={out: wp.ones_like(out)})
    return x.grad.numpy()
"""


def test_a_loop_in_an_arm_no_recorded_launch_runs_is_not_reported(tmp_path):
    """`power` carries `p` through a dynamic loop only `if weights:`; the recorded launch passes
    `None` for the kernel's `weights`, which `apply` hands on to `power`: the loop never runs there
    (measured: the gradient is right), and WL104 is not reported. Passing an array runs it
    (measured wrong), and WL104 is reported."""
    unweighted = WEIGHTED_POWER.replace("WEIGHTS", "None")
    assert lint_code(unweighted, select=["WL104"]) == []
    weighted = WEIGHTED_POWER.replace("WEIGHTS", "weights")
    assert [f.code for f in lint_code(weighted, select=["WL104"])] == ["WL104"]
    values = np.array([0.5, 1.5, -1.0], dtype=np.float32)
    module = _load_program(unweighted, tmp_path / "unweighted_power.py")
    assert np.allclose(module.gradient(values, None), 1.0)
    module = _load_program(weighted.replace("def gradient(values, weights):",
                                            "def gradient(values, weights):\n    weights = wp.full(3, 1.0, dtype=float)"),
                           tmp_path / "weighted_power.py")
    assert not np.allclose(module.gradient(values, None), 4 * values ** 3, rtol=1e-2)


CLAMPED_NORMS = """
import warp as wp


@wp.kernel
def clamped(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    w = wp.vec2()
    w[0] = wp.max(a[i], 0.0)
    w[1] = wp.max(b[i], 0.0)
    out[i] = wp.sqrt(w[0] * w[0] + w[1] * w[1])
"""


@pytest.mark.parametrize(("spelling", "nan"), [("wp.max({}, 0.0)", False), ("wp.max(0.0, {})", True)])
def test_a_norm_of_values_clamped_at_zero_is_singular_only_with_the_constant_first(spelling, nan, tmp_path):
    """At `a = b = 0` both `max` tie: Warp's adjoint goes to the second argument. With the constant
    there, the infinite adjoint of the square root never reaches `a` or `b` (gradient 0); with
    the constant first, it does (NaN). WL110 reports the second spelling only."""
    code = CLAMPED_NORMS.replace("wp.max(a[i], 0.0)", spelling.format("a[i]")).replace(
        "wp.max(b[i], 0.0)", spelling.format("b[i]"))
    assert len(lint_code(code, select=["WL110"])) == int(nan)
    kernel = _load_kernel(code, tmp_path / f"clamped_{int(nan)}.py")
    a = wp.array(np.array([0.0, -1.0, 3.0], dtype=np.float32), requires_grad=True, device="cpu")
    b = wp.array(np.array([0.0, -2.0, 4.0], dtype=np.float32), requires_grad=True, device="cpu")
    out = wp.zeros(3, dtype=float, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, 3, inputs=[a, b], outputs=[out], device="cpu")
    tape.backward(grads={out: wp.ones_like(out)})
    assert np.isnan(a.grad.numpy()[0]) == nan
    assert np.allclose(a.grad.numpy()[1:], [0.0, 0.6]) and np.allclose(b.grad.numpy()[1:], [0.0, 0.8])


DIRECTION = """
import warp as wp


@wp.kernel
def direction(a: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    d = a[i]
    n = NORM
    u = d / n
    out[i] = u[0] + 2.0 * u[1]
"""


def test_a_norm_that_always_divides_is_loud_in_the_forward_pass_and_not_reported(tmp_path):
    """`u = d / n` right after `n = wp.sqrt(wp.dot(d, d))`, in the same block: wherever the root is
    zero the forward value is already NaN (measured), so the NaN gradient is no silent failure and
    WL110 does not report it; guarding the zero is the fix, as for any division."""
    code = DIRECTION.replace("NORM", "wp.sqrt(wp.dot(d, d))")
    assert lint_code(code, select=["WL110"]) == []
    kernel = _load_kernel(code, tmp_path / "direction_loud.py")
    a = wp.array(np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], dtype=np.float32), dtype=wp.vec3, device="cpu")
    out = wp.zeros(2, dtype=float, device="cpu")
    wp.launch(kernel, 2, inputs=[a], outputs=[out], device="cpu")
    assert np.isnan(out.numpy()[0]) and np.isfinite(out.numpy()[1])


@pytest.mark.parametrize(("norm", "finite"), [("wp.sqrt(wp.dot(d, d))", False), ("wp.length(d)", True)])
def test_a_norm_that_sometimes_divides_gets_the_direction_as_its_fix(norm, finite, tmp_path):
    """The division runs only for some elements (`if w[i] > 0.0:`): an element at zero that does not
    divide has a finite forward value and a NaN gradient (silent), and one that does divide is NaN
    in the forward pass, where `wp.length` would not help (`d / wp.length(d)`); so the message
    gives `wp.normalize(d)` for the direction and `wp.length(d)` for the norm, measured finite."""
    code = DIRECTION.replace("NORM", norm).replace(
        "a: wp.array(dtype=wp.vec3),", "a: wp.array(dtype=wp.vec3), w: wp.array(dtype=float),").replace(
        "    u = d / n\n", "    u = wp.vec3(0.0)\n    if w[i] > 0.0:\n        u = d / n\n")
    if norm.startswith("wp.sqrt"):
        (finding,) = lint_code(code, select=["WL110"])
        assert "`d / n` (line 11) then divides by the same zero" in finding.message
        assert "use `wp.normalize(d)` for the direction and `wp.length(d)` for the norm" in finding.message
    # The fix as the message gives it. The square root must go too: unused, its adjoint still
    # multiplies a zero by its infinite derivative (NaN, measured).
    fixed = code.replace("u = d / n", "u = wp.normalize(d)").replace(f"n = {norm}", "n = wp.length(d)")
    for source, expected_finite in ((code, finite), (fixed, True)):
        kernel = _load_kernel(source, tmp_path / f"direction_{len(source)}.py")
        a = wp.array(np.zeros((2, 3), dtype=np.float32), dtype=wp.vec3, requires_grad=True, device="cpu")
        a.assign(np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], dtype=np.float32))
        w = wp.array(np.array([0.0, 1.0], dtype=np.float32), device="cpu")
        out = wp.zeros(2, dtype=float, requires_grad=True, device="cpu")
        tape = wp.Tape()
        with tape:
            wp.launch(kernel, 2, inputs=[a, w], outputs=[out], device="cpu")
        assert np.isfinite(out.numpy()).all()  # the element at zero does not divide: its value is 0
        tape.backward(grads={out: wp.ones_like(out)})
        assert bool(np.isfinite(a.grad.numpy()[0]).all()) == expected_finite
        assert np.allclose(a.grad.numpy()[1], [-0.064, 0.048, 0.0], atol=1e-5)  # d/da of (a0 + 2 a1) / |a|, at (3, 4, 0)


def test_a_guarded_division_by_the_norm_keeps_the_plain_advice(tmp_path):
    """With the division under `if n > 1.0e-8:` only the square root's adjoint is singular: the
    message gives `wp.length(d)`, and that alone makes the gradient finite at zero (measured)."""
    code = DIRECTION.replace("    u = d / n\n", "    u = wp.vec3(0.0)\n    if n > 1.0e-8:\n        u = d / n\n")
    (finding,) = lint_code(code.replace("NORM", "wp.sqrt(wp.dot(d, d))"), select=["WL110"])
    assert finding.message.endswith("use `wp.length(d)`, whose adjoint is guarded"), finding.message
    for norm, finite in (("wp.sqrt(wp.dot(d, d))", False), ("wp.length(d)", True)):
        kernel = _load_kernel(code.replace("NORM", norm), tmp_path / f"guarded_{finite}.py")
        a = wp.array(np.zeros((1, 3), dtype=np.float32), dtype=wp.vec3, requires_grad=True, device="cpu")
        out = wp.zeros(1, dtype=float, requires_grad=True, device="cpu")
        tape = wp.Tape()
        with tape:
            wp.launch(kernel, 1, inputs=[a], outputs=[out], device="cpu")
        tape.backward(grads={out: wp.ones_like(out)})
        assert bool(np.isfinite(a.grad.numpy()).all()) == finite


STRUCT_SHIFT = """
import numpy as np
import warp as wp


@wp.struct
class Params:
    shift: wp.array(dtype=float)
    count: int


@wp.kernel
def apply(x: wp.array(dtype=float), p: Params, y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] + p.shift[i]


@wp.kernel
def reset(a: wp.array(dtype=float)):
    a[wp.tid()] = 5.0


def gradient(values):
    x = wp.array(values, dtype=float, requires_grad=True)
    p = Params()
    p.shift = wp.array(values * 2.0, dtype=float, requires_grad=True)
    p.count = len(values)
    y = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(apply, len(values), inputs=[x, p], outputs=[y])
        wp.launch(reset, len(values), inputs=[p.shift])
    tape.backward(grads={y: wp.ones_like(y)})
    return x.grad.numpy()
"""


@pytest.mark.parametrize(("operator", "wrong"), [("+", False), ("*", True)])
def test_a_struct_field_read_linearly_may_be_overwritten(operator, wrong, tmp_path):
    """The arrays in a struct's fields are read like array parameters: `x[i] + p.shift[i]` needs
    no value backward, so overwriting `p.shift` on the tape changes no gradient (measured) and
    WL201 is silent; `x[i] * p.shift[i]` reads it again for `x`'s gradient (measured wrong)."""
    code = STRUCT_SHIFT.replace("x[i] + p.shift[i]", f"x[i] {operator} p.shift[i]")
    assert len(lint_code(code, select=["WL201"])) == int(wrong)
    module = _load_program(code, tmp_path / f"struct_shift_{int(wrong)}.py")
    values = np.array([0.5, 1.5, -1.0], dtype=np.float32)
    right = np.ones(3) if operator == "+" else 2 * values
    assert np.allclose(module.gradient(values), right, rtol=1e-5) != wrong


CARRIED_PRODUCT = """
import warp as wp


@wp.kernel
def product(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    s = float(1.0)
    for i in range(n):
        s = s * x[i]
    out[0] = s
"""


def test_a_dynamic_loop_adjoint_reruns_each_pass_from_the_value_before_the_loop(tmp_path):
    """What WL104's message says of the adjoint: it applies the passes' updates again in reverse
    order, starting from `s`'s value before the loop (1), so the last pass reads 5 (not 2 * 3), the
    middle one 5 * 3, the first 5 * 3 * 2."""
    kernel = _load_kernel(CARRIED_PRODUCT, tmp_path / "carried_product.py")
    x = wp.array(np.array([2.0, 3.0, 5.0], dtype=np.float32), requires_grad=True, device="cpu")
    out = wp.zeros(1, dtype=float, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, 1, inputs=[x, 3], outputs=[out], device="cpu")
    tape.backward(grads={out: wp.ones_like(out)})
    assert np.allclose(x.grad.numpy(), [5.0 * 3.0 * 2.0 * 15.0, 5.0 * 3.0 * 5.0, 5.0])  # right: [15, 10, 6]
    message = lint_code(CARRIED_PRODUCT, select=["WL104"])[0].message
    assert "applies the passes' updates again in reverse order, starting from `s`'s value before the loop" in message


TRAINING = """
import numpy as np
import warp as wp


@wp.kernel
def simulate(p: wp.array(dtype=float), x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = p[i] * p[i]


@wp.kernel
def total(x: wp.array(dtype=float), loss: wp.array(dtype=float)):
    wp.atomic_add(loss, 0, x[wp.tid()])


@wp.kernel
def descend(p: wp.array(dtype=float), grad: wp.array(dtype=float), rate: float):
    i = wp.tid()
    p[i] = p[i] - rate * grad[i]


def train(values, iterations):
    p = wp.array(values, dtype=float, requires_grad=True)
    x = wp.zeros(len(values), dtype=float, requires_grad=True)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    seen = []
    for it in range(iterations):
        tape = wp.Tape()
        with tape:
            wp.launch(simulate, len(values), inputs=[p], outputs=[x])
            wp.launch(total, len(values), inputs=[x], outputs=[loss])
        tape.backward(loss)
        seen.append((p.numpy().copy(), p.grad.numpy().copy()))
        wp.launch(descend, len(values), inputs=[p, p.grad, 0.1])
        tape.zero()
        loss.zero_()
    return seen, p.grad.numpy()
"""


@pytest.mark.parametrize("zeroed", [True, False])
def test_a_training_loop_with_a_tape_per_step_is_no_truncation(zeroed, tmp_path):
    """A per-iteration tape whose parameter the loop updates from its gradient (`descend(p,
    p.grad)`), and whose other arrays are written before they are read in the pass: nothing is
    carried across passes. With `tape.zero()` each pass's gradient is that pass's (2 p, measured);
    without it the gradients add up (WL204, measured: the running sum of 2 p), which is not
    WL208's truncation. WL208 called `p`, then `x`, "state carried to the next pass" here."""
    code = TRAINING if zeroed else TRAINING.replace("        tape.zero()\n", "")
    found = [f.code for f in lint_code(code, select=["WL208", "WL204"])]
    assert found == ([] if zeroed else ["WL204"])
    module = _load_program(code, tmp_path / f"training_{zeroed}.py")
    total = 0.0
    seen, last = module.train(np.array([1.0, 2.0], dtype=np.float32), 3)
    for p, gradient in seen:
        total = 2.0 * p + (0.0 if zeroed else total)
        assert np.allclose(gradient, total)
    assert np.allclose(last, 0.0 if zeroed else total)


INCREMENT = """
import warp as wp

OPTION


@wp.kernel
def grow(x: wp.array(dtype=wp.vec3), y: wp.array(dtype=float)):
    i = wp.tid()
    v = x[i]
    BODY
    y[i] = v[0] + v[1]
"""

INCREMENTS = {
    # body -> (wrong without the option, wrong with it)
    # the whole vector read by a call, then (or while) a component is incremented in place
    "v[0] += wp.length(v)": (True, True),
    "n = wp.length(v)\n    v[0] += 1.0\n    y[i] = n": (True, True),
    # the option makes an attribute's increment a new value, not a subscript's
    "v.x += wp.length(v)": (True, False),
    # a component read into a scalar first is a copy; a new vector is a new value
    "n = v[0] * v[0]\n    v[0] += 1.0\n    y[i] = n": (False, False),
    "v = v + wp.vec3(wp.length(v), 0.0, 0.0)": (False, False),
}


@pytest.mark.parametrize("option", [False, True])
@pytest.mark.parametrize("body", list(INCREMENTS))
def test_an_increment_after_a_whole_vector_read_is_wrong_where_wl116_says(body, option, tmp_path):
    """Measured against central differences: wrong exactly where WL116 reports, with and without
    `enable_vector_component_overwrites`."""
    code = INCREMENT.replace("OPTION", "wp.config.enable_vector_component_overwrites = True" if option else "")
    code = code.replace("BODY", body)
    if "y[i] = n" in body:
        code = code.replace("    y[i] = n\n    y[i] = v[0] + v[1]", "    y[i] = n + v[1]")
    hazard = INCREMENTS[body][option]
    assert len(lint_code(code, select=["WL116"])) == int(hazard)
    try:  # the module sets the option when it is imported; it must still hold when it is built
        kernel = _load_kernel(code, tmp_path / f"increment_{sorted(INCREMENTS).index(body)}_{int(option)}.py")
        assert (measure_relative_error(kernel) > 0.05) == hazard
    finally:
        wp.config.enable_vector_component_overwrites = False


STRUCT_AFTER_CALL = """
import warp as wp


@wp.struct
class Body:
    mass: float
    pos: wp.vec3


@wp.func
def energy(b: Body):
    return b.mass * wp.dot(b.pos, b.pos)


@wp.func
def shifted(b: Body):
    return b.mass + 1.0


@wp.kernel
def step(m: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    b = Body()
    b.mass = m[i]
    b.pos = wp.vec3(m[i], 1.0, 0.0)
    e = READ
    b.mass = 2.0 * m[i]
    y[i] = e + b.mass
"""


@pytest.mark.parametrize(("read", "hazard"), [("energy(b)", True), ("shifted(b)", False), ("b.mass * b.mass", False),
                                              ("wp.length(b.pos)", False)])
def test_a_struct_field_set_after_a_call_took_the_struct_corrupts_that_calls_gradient(read, hazard, tmp_path):
    """`energy(b)` then `b.mass = 2 m`: the helper's adjoint reads the new mass (measured 5.45
    where the derivative is 4.47). A helper linear in the struct, a field read into a scalar and a
    builtin given one field (copies) stay right, and WL116 reports only the first."""
    code = STRUCT_AFTER_CALL.replace("READ", read)
    assert len(lint_code(code, select=["WL116"])) == int(hazard)
    module = _load_program(code, tmp_path / f"struct_after_call_{int(hazard)}_{len(read)}.py")
    assert (measure_relative_error(module.step) > 0.05) == hazard


LINE_SEARCH = """
import warp as wp


@wp.func
def line_search(p: wp.vec3, q: wp.vec3):
    lo = float(0.0)
    hi = float(1.0)
    for k in range(4):  # unrolled: the bisection itself is differentiated right
        mid = 0.5 * (lo + hi)
        if wp.length((1.0 - mid) * p + mid * q) < 1.0:
            lo = mid
        else:
            hi = mid
    u = STEP
    return u, (1.0 - u) * p + u * q


@wp.kernel
def walk(a: wp.array(dtype=wp.vec3), n: int, out: wp.array(dtype=float)):
    i = wp.tid()
    w = float(1.0)
    for k in range(n):
        u, x = line_search(a[i], a[i] * 3.0)
        w = (1.0 - u) * w + u * 10.0 * x[0]
    out[i] = w
"""


@pytest.mark.parametrize(("step", "hazard"), [("0.5 * (lo + hi)", False), ("0.5 * (lo + hi) + 0.3 * wp.length(p)", True)])
def test_a_helpers_return_built_from_constants_carries_no_gradient(step, hazard, tmp_path):
    """A bisection's step `0.5 * (lo + hi)` is built from constants through comparisons: no
    argument's gradient reaches it, so `w = (1 - u) * w + u * 10 x[0]` carries `w` linearly and the
    dynamic loop's adjoint is right (measured). With `0.3 * wp.length(p)` added it carries one, `w` is
    multiplied by an active value, and the gradient is wrong (measured): WL104 reports that one
    only. Before, every element a helper returned carried its arguments' gradients."""
    code = LINE_SEARCH.replace("STEP", step)
    assert [f.code for f in lint_code(code, select=["WL104"])] == (["WL104"] if hazard else [])
    module = _load_program(code, tmp_path / f"line_search_{int(hazard)}.py")
    # float32 differences agree to 1e-4 here; the stale `w` is off by 3-5 % (seeds 0-2)
    assert (measure_relative_error(module.walk) > 0.01) == hazard


NO_ADJOINT_READ = """
import warp as wp


@wp.kernel
def bump(x: wp.array(dtype=float)):
    i = wp.tid()
    v = x[i]
    k = READ
    x[i] = 2.0 * v + k
"""


@pytest.mark.parametrize(("read", "hazard"), [("wp.floor(v * v)", False), ("wp.sin(v * v)", True)])
def test_a_read_used_only_by_a_builtin_without_adjoint_needs_no_value(read, hazard, tmp_path):
    """`x[i]` read, then overwritten in place: the backward pass replays the read from the new
    value, which matters only where an adjoint reads it. `wp.floor` has none (Warp's registry says
    so, in every release of the table): the gradient stays right (2, measured) and WL102 is silent.
    `wp.sin` has one: measured wrong, and reported."""
    code = NO_ADJOINT_READ.replace("READ", read)
    # on 1.19 (before 1.13 any in-place store double counts: WL102's other case)
    assert [f.code for f in lint_code(code, select=["WL102"], target="==1.19.0")] == (["WL102"] if hazard else [])
    kernel = _load_kernel(code, tmp_path / f"no_adjoint_read_{int(hazard)}.py")
    assert (measure_relative_error(kernel) > 0.05) == hazard


MODULE_PER_FACTORY = """
import warp as wp


def make_kernel():
    module = wp.get_module("made_SUFFIX")
    OPTIONS

    @wp.kernel(module=module)
    def bump(x: wp.array(dtype=float)):
        i = wp.tid()
        v = x[i]
        x[i] = wp.sin(v)

    return bump


bump = make_kernel()
"""


@pytest.mark.parametrize(("options", "disabled"), [
    ('module.options.update({"enable_backward": False})', True),
    ('module.options["enable_backward"] = False', True),
    ('module.options.update({"max_unroll": 4})', False)])
def test_a_kernel_of_a_module_held_in_a_name_has_the_options_given_to_it(options, disabled, tmp_path):
    """newton's solvers make a module per factory (`module = wp.get_module(...)`, then
    `module.options.update({"enable_backward": False})`, `@wp.kernel(module=module)`): that kernel
    has no adjoint (measured: the backward pass leaves the seed as it was), so none of its WL1xx
    findings stand; options that leave backward on change nothing."""
    code = MODULE_PER_FACTORY.replace("OPTIONS", options).replace("SUFFIX", str(int(disabled)) + str(len(options)))
    assert [f.code for f in lint_code(code, select=["WL102"], target="==1.19.0")] == ([] if disabled else ["WL102"])
    module = _load_program(code, tmp_path / f"factory_module_{len(options)}.py")
    x = wp.array(np.array([0.5, 1.0], dtype=np.float32), requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(module.bump, 2, inputs=[x], device="cpu")
    tape.backward(grads={x: wp.ones(2, dtype=float, device="cpu")})
    # without an adjoint the seed on the in-place array stays as it was; with one, cos is applied
    assert np.allclose(x.grad.numpy(), 1.0) == disabled


# A helper that only compares the running minimum it is given.
CANDIDATE = """
import warp as wp


@wp.func
def candidate(d: float, best: float):
    if d >= best:
        return float(1.0e10)
    return d
"""

NEAREST_THROUGH_HELPER = CANDIDATE + """

@wp.kernel
def nearest(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    i = wp.tid()
    best = float(1.0e10)
    chosen = float(0.0)
    for j in range(n):
        d = (x[i] - x[j] + 0.1) * (x[i] - x[j] + 0.1)
        c = candidate(d, best)
        if c < best:
            best = c
            chosen = x[j]
    out[i] = chosen * chosen + best
"""

# The fix as the message gives it: the index carried through the loop in a @wp.func that returns
# it, the winner's values computed again from it in the caller.
NEAREST_BY_INDEX = CANDIDATE + """

@wp.func
def nearest_index(x: wp.array(dtype=float), i: int, n: int):
    best = float(1.0e10)
    best_j = int(i)
    for j in range(n):
        d = (x[i] - x[j] + 0.1) * (x[i] - x[j] + 0.1)
        c = candidate(d, best)
        if c < best:
            best = c
            best_j = j
    return best_j


@wp.kernel
def nearest(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    i = wp.tid()
    k = AFTER
    out[i] = x[k] * x[k] + (x[i] - x[k] + 0.1) * (x[i] - x[k] + 0.1)
"""


# The index carried, but used after the loop in the same kernel.
NEAREST_INDEX_AFTER_LOOP = CANDIDATE + """

@wp.kernel
def nearest(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    i = wp.tid()
    best = float(1.0e10)
    k = int(i)
    for j in range(n):
        d = (x[i] - x[j] + 0.1) * (x[i] - x[j] + 0.1)
        c = candidate(d, best)
        if c < best:
            best = c
            k = j
    out[i] = x[k] * x[k] + (x[i] - x[k] + 0.1) * (x[i] - x[k] + 0.1)
"""


@pytest.mark.parametrize("version", ["as written", "index returned", "index after the loop"])
def test_a_running_extreme_compared_inside_a_helper_is_named_as_compared_and_its_fix_holds(version, tmp_path):
    """`candidate(d, best)` only compares `best` (`if d >= best:`): the carried value decides which
    candidate wins, it passes no gradient through the helper. The message says "compared in
    `candidate`" and gives the running extreme's fix; measured wrong as written, and right with
    that fix (the winner's index carried through the loop in a @wp.func that returns it, its values
    computed again in the caller). The index used after the loop in the same function is WL107's:
    the backward pass sees the index from before the loop (measured wrong)."""
    if version == "as written":
        code = NEAREST_THROUGH_HELPER
    elif version == "index returned":
        code = NEAREST_BY_INDEX.replace("AFTER", "nearest_index(x, i, n)")
    else:
        code = NEAREST_INDEX_AFTER_LOOP
    found = {f.code: f for f in lint_code(code, select=["WL104", "WL107"])}
    if version == "as written":
        assert set(found) == {"WL104", "WL107"}, found  # `chosen` is used after the loop as well
        message = found["WL104"].message
        assert "previous pass is compared in `candidate`" in message, message
        assert "comparisons can take other branches" in message
        assert "index (or the arguments) of the running extreme" in message
        assert "do it in a @wp.func that returns them" in message
    elif version == "index returned":
        assert found == {}
    else:
        assert set(found) == {"WL107"}, found
    error = measure_relative_error(_load_kernel(code, tmp_path / f"nearest_{len(code)}.py"))
    assert (error < TOLERANCE) == (version == "index returned"), error


COMPONENTS_IN_A_DYNAMIC_LOOP = """
import warp as wp


@wp.kernel
def weights(x: wp.array(dtype=float), n: int, SCRATCH out: wp.array(dtype=float)):
    lam = wp.vec4()
    LOOP
        lam[k] = wp.min(x[k] * x[k] - 2.0, 0.0)
    s = float(0.0)
    for k in range(n):
        s += READ * x[k]
    out[0] = s
"""


@pytest.mark.parametrize("version", ["dynamic loop", "option on", "unrolled", "array argument"])
def test_components_written_in_a_dynamic_loop_get_a_fix_that_works_there(version, tmp_path):
    """`lam[k] = ...` in every pass of `for k in range(n)`: the backward pass sees `lam` as it was
    before the loop (measured wrong; the overwrite option does not change it on 1.19). The message
    says so and gives the two fixes measured right here: the loop unrolled up to the vector's
    length, or the values stored into an array argument."""
    code = COMPONENTS_IN_A_DYNAMIC_LOOP.replace("SCRATCH ", "lam_out: wp.array(dtype=float), " if version == "array argument" else "")
    if version == "option on":  # the overwrite option mends no dynamic loop: still reported, still wrong
        code = code.replace("import warp as wp\n", "import warp as wp\n\n"
                            "wp.config.enable_vector_component_overwrites = True\n")
    code = code.replace("    LOOP\n", {"dynamic loop": "    for k in range(n):\n", "option on": "    for k in range(n):\n",
                                       "unrolled": "    for k in range(wp.static(4)):\n        if k < n:\n    ",
                                       "array argument": "    for k in range(n):\n"}[version])
    if version == "unrolled":
        code = code.replace("    \n        lam[k]", "        lam[k]").replace(
            "        if k < n:\n            lam[k]", "        if k < n:\n            lam[k]")
    if version == "array argument":
        code = code.replace("lam[k] = wp.min", "lam_out[k] = wp.min").replace("READ", "lam_out[k]")
    code = code.replace("READ", "lam[k]")
    found = lint_code(code, select=["WL103"])
    if version in ("dynamic loop", "option on"):
        (finding,) = found
        assert "is written in each pass of a dynamic loop" in finding.message, finding.message
        assert "`lam` is multiplied by `x[k]` on line" in finding.message and "sees `lam` there as it was before the loop" in finding.message
        assert "range(wp.static(N))" in finding.message and "array argument" in finding.message
        assert "[Warp" not in finding.message  # every version (measured from 1.4.2 on, see the rule)
    else:
        assert found == [], found
    if version == "option on":
        # `wp.config` is the process's: measured in a child process of its own.
        assert _error_in_a_child(code, tmp_path) > TOLERANCE
        return
    error = measure_relative_error(_load_kernel(code, tmp_path / f"components_{len(code)}.py"))
    assert (error < TOLERANCE) == (version != "dynamic loop"), error


def _error_in_a_child(code: str, tmp_path) -> float:
    """``measure_relative_error`` of the kernel in ``code``, run in a child Python (a program that
    sets `wp.config`, which would leak into this process's other kernels)."""
    (tmp_path / "child_kernel.py").write_text(code)
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(tmp_path)!r}]
        import warp as wp
        wp.config.quiet = True
        import test_measured_hazards as measured
        print(measured.measure_relative_error(measured._load_kernel(open({str(tmp_path / "child_kernel.py")!r}).read(),
                                                                     __import__("pathlib").Path({str(tmp_path / "loaded.py")!r}))))
        """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return float(run.stdout.strip().splitlines()[-1])


LOCAL_ARRAY_IN_A_DYNAMIC_LOOP = """
import warp as wp


@wp.kernel
def weights(x: wp.array(dtype=float), n: int, SCRATCH out: wp.array(dtype=float)):
    lam = wp.zeros(shape=4, dtype=float)
    for k in range(n):
        lam[k] = wp.min(x[k] * x[k] - 2.0, 0.0)
    s = float(0.0)
    for k in range(n):
        s += lam[k] * x[k]
    out[0] = s
"""


@pytest.mark.parametrize("scratch", [False, True])
def test_a_kernel_local_array_written_in_a_dynamic_loop_is_stale_after_it(scratch, tmp_path):
    """Elements of a kernel-local array (`wp.zeros(shape=4, dtype=float)`) written in a dynamic
    loop and read after it: the backward pass sees the array as it was before the loop, as for
    any local (measured wrong), so WL107 reports it with the fix that applies to an array, an
    array argument instead (measured right, and not reported)."""
    code = LOCAL_ARRAY_IN_A_DYNAMIC_LOOP.replace("SCRATCH ", "lam_out: wp.array(dtype=float), " if scratch else "")
    if scratch:
        code = code.replace("    lam = wp.zeros(shape=4, dtype=float)\n", "").replace("lam[k]", "lam_out[k]")
    found = lint_code(code, select=["WL103", "WL104", "WL107"])
    if scratch:
        assert found == []
    else:
        (finding,) = found
        assert finding.code == "WL107" and finding.message.startswith("`lam` is updated in a dynamic loop")
        assert "store the values into an array argument instead of a kernel-local array" in finding.message
    error = measure_relative_error(_load_kernel(code, tmp_path / f"local_array_{scratch}.py"))
    assert (error < TOLERANCE) == scratch, error


def test_the_overwrite_option_is_wp_config_s_alone(tmp_path):
    """`wp.set_module_options({"enable_vector_component_overwrites": True})` does nothing on 1.19
    (Warp folds `wp.config`'s value into every module's build options): the overwritten component
    still passes its gradient (measured), so WL103 still reports it. `wp.config.` silences it."""
    code = """
import warp as wp

SETTING


@wp.kernel
def drop_y(x: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    v = x[0]
    v[1] = 0.0
    out[0] = v[0] + v[1] + v[2]
"""
    module_option = code.replace("SETTING", 'wp.set_module_options({"enable_vector_component_overwrites": True})')
    assert [f.code for f in lint_code(module_option, select=["WL103"])] == ["WL103"]
    assert lint_code(code.replace("SETTING", "wp.config.enable_vector_component_overwrites = True"),
                     select=["WL103"]) == []
    kernel = _load_kernel(module_option, tmp_path / "module_option.py")
    x = wp.array([wp.vec3(1.0, 2.0, 3.0)], dtype=wp.vec3, requires_grad=True, device="cpu")
    out = wp.zeros(1, dtype=float, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, 1, inputs=[x], outputs=[out], device="cpu")
    tape.backward(grads={out: wp.ones_like(out)})
    assert np.allclose(x.grad.numpy(), [[1.0, 1.0, 1.0]])  # right: [1, 0, 1]
