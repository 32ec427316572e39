"""A WL102 verdict on real code, decided with the inputs its author means: newton's XPBD
`solve_tendon_stretch` (solvers/xpbd/tendon_kernels.py) reads the accumulated multiplier
`lambda_prev = seg_lambda[seg]` and later stores `seg_lambda[seg] = lambda_new` in the same kernel.
warp-lint confirms the finding (the store redirected to a separate array removes the
disagreement); the independent check of `judge_confirm_realcode.py` judged it wrong, because at its
inputs the error stays inside its 2 % tolerance. Here one stretched tendon between two bodies,
with the tension accumulated over earlier iterations: the backward pass replays the read from the
overwritten multiplier, and the tape's d body_deltas / d body_q is off by more than finite
differences' noise; stored apart, it is not.

    python benchmarks/realcode.py   # sets up the scratch venv once
    ~/.cache/warp-lint-realcode/venv/bin/python benchmarks/verdict_tendon_lambda_in_place.py
"""

import importlib.util
import inspect
import os
import sys
import tempfile
import textwrap

import numpy as np
import warp as wp

wp.config.quiet = True
wp.init()
import newton._src.solvers.xpbd.tendon_kernels as tendon_kernels  # noqa: E402

STORE = "    seg_lambda[seg] = lambda_new\n"
# Warp reads a kernel's source from its file: the variant is written to one here (removed at exit).
VARIANT_FOLDER = tempfile.TemporaryDirectory(prefix="warp-lint-verdict-")


def kernel_storing_apart():
    """The same kernel with the flagged store sent to a separate output array."""
    source = textwrap.dedent(inspect.getsource(tendon_kernels.solve_tendon_stretch.func))
    assert source.count(STORE) == 1, "the flagged store moved: update this script"
    source = (source.replace(STORE, "    seg_lambda_out[seg] = lambda_new\n")
              .replace("    # outputs\n", "    seg_lambda_out: wp.array[float],\n    # outputs\n")
              .replace("def solve_tendon_stretch(", "def solve_tendon_stretch_apart("))
    path = os.path.join(VARIANT_FOLDER.name, "tendon_apart.py")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("from newton._src.solvers.xpbd.tendon_kernels import *\nimport warp as wp\n" + source)
    spec = importlib.util.spec_from_file_location("tendon_apart", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.solve_tendon_stretch_apart


rng = np.random.default_rng(3)
BODY_Q = np.array([[0, 0, 0, 0, 0, 0, 1], [1.5, 0.2, 0.1, 0, 0, 0, 1]], dtype=np.float64)
BODY_Q[:, 3:] += rng.standard_normal((2, 4)) * 0.1
BODY_Q[:, 3:] /= np.linalg.norm(BODY_Q[:, 3:], axis=1, keepdims=True)
BODY_QD = rng.standard_normal((2, 6)) * 0.1


def launch(kernel, body_q: np.ndarray, apart: bool) -> dict:
    def array(values, dtype, grad=False):
        return wp.array(np.asarray(values), dtype=dtype, requires_grad=grad, device="cpu")

    args = dict(
        body_q=array(body_q, wp.transform, True), body_qd=array(BODY_QD, wp.spatial_vector, True),
        body_com=array(np.zeros((2, 3)), wp.vec3), body_inv_mass=array([1.0, 0.5], float),
        body_inv_inertia=array(np.stack([np.eye(3), 2 * np.eye(3)]), wp.mat33),
        tendon_guide_body=array([0, 1], int), tendon_guide_type=array([0, 0], int),
        tendon_guide_offset=array(np.zeros((2, 3)), wp.vec3), tendon_guide_axis=array([[0, 0, 1]] * 2, wp.vec3),
        seg_rest_length=array([1.0], float),  # the attachments are about 1.3 apart: stretched
        seg_attachment_l=array(np.zeros((1, 3)), wp.vec3, True), seg_attachment_r=array(np.zeros((1, 3)), wp.vec3, True),
        seg_attachment_l_local=array([[0.1, 0, 0]], wp.vec3), seg_attachment_r_local=array([[-0.1, 0, 0]], wp.vec3),
        seg_compliance=array([1e-3], float), seg_damping=array([0.0], float),
        seg_lambda=array([-0.3], float, True),  # tension accumulated over earlier iterations
        seg_delta_lambda=array([0.0], float, True), seg_active=array([1], int),
        seg_active_guide_l=array([0], int), seg_active_guide_r=array([1], int),
        compliance_lambda_scale=1.0, relaxation=1.0, dt=1.0 / 60.0)
    if apart:
        args["seg_lambda_out"] = array([0.0], float, True)
    args.update(seg_material_tension=array([0.0], float, True),
                body_deltas=array(np.zeros((2, 6)), wp.spatial_vector, True))
    wp.launch(kernel, dim=1, inputs=list(args.values()), device="cpu")
    return args


def worst_error(kernel, apart: bool, h: float = 1e-3) -> tuple[float, float]:
    """max |tape - central differences| of d body_deltas / d body_q, and the largest |FD| entry."""
    worst, scale = 0.0, 0.0
    for out in range(12):
        tape = wp.Tape()
        with tape:
            args = launch(kernel, BODY_Q, apart)
        seed = np.zeros(12, dtype=np.float32)
        seed[out] = 1.0
        tape.backward(grads={args["body_deltas"]: wp.array(seed.reshape(2, 6), dtype=wp.spatial_vector, device="cpu")})
        tape_row = args["body_q"].grad.numpy().ravel()
        for j in range(BODY_Q.size):
            step = np.zeros(BODY_Q.size)
            step[j] = h
            up = launch(kernel, BODY_Q + step.reshape(BODY_Q.shape), apart)["body_deltas"].numpy().ravel()[out]
            down = launch(kernel, BODY_Q - step.reshape(BODY_Q.shape), apart)["body_deltas"].numpy().ravel()[out]
            fd = (up - down) / (2 * h)
            worst, scale = max(worst, abs(tape_row[j] - fd)), max(scale, abs(fd))
    return worst, scale


as_written, scale = worst_error(tendon_kernels.solve_tendon_stretch, apart=False)
stored_apart, _ = worst_error(kernel_storing_apart(), apart=True)
print(f"max |tape - FD| of d body_deltas / d body_q (largest |FD| entry {scale:.3g}):")
print(f"  as written (seg_lambda read, then overwritten): {as_written:.3g}")
print(f"  the multiplier stored to a separate array:      {stored_apart:.3g}")
wrong = as_written > 10 * stored_apart
print("the tape's gradient is", "WRONG: the backward pass replays the overwritten multiplier" if wrong else "right")
