"""A WL201 finding on real code, decided by running it: newton's SolverFeatherstone keeps its
scratch buffers (`self.M`, `self.L`, ...) across steps, so two steps on one tape overwrite what the
first step's kernels read. warp-lint reports it (WL201 at solver_featherstone.py, `eval_rigid_mass`
and `eval_dense_cholesky_batched`). This script runs newton's own test setup (tests/featherstone/
test_tile_gemm.py: two steps, loss on the final joint velocities) on the CPU and prints the tape
gradient with the shared solver, the tape gradient with one solver per step (fresh buffers: the
finding's safe form), and central finite differences.

    python benchmarks/realcode.py   # sets up the scratch venv once (see bench_realcode.py)
    VENV=~/.cache/warp-lint-realcode/venv
    $VENV/bin/python benchmarks/verdict_featherstone_buffers.py \
        $VENV/lib/python3.11/site-packages/newton/tests/featherstone
"""
import sys, numpy as np, warp as wp
wp.config.quiet = True
import newton
sys.path.insert(0, sys.argv[1])
from test_tile_gemm import _build_model, _joint_qd_loss

def simulate(model, qd0, fresh, grad):
    states = [model.state() for _ in range(3)]
    states[0].joint_qd.assign(qd0)
    control = model.control()
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    solvers = [newton.solvers.SolverFeatherstone(model) for _ in range(2 if fresh else 1)]
    tape = wp.Tape()
    with tape:
        for i in range(2):
            solvers[i if fresh else 0].step(states[i], states[i + 1], control, None, 1.0e-3)
        wp.launch(_joint_qd_loss, model.joint_dof_count, inputs=[states[-1].joint_qd], outputs=[loss])
    if grad:
        tape.backward(loss)
        return states[0].joint_qd.grad.numpy().astype(np.float64)
    return float(loss.numpy()[0])

wp.init()
with wp.ScopedDevice("cpu"):
    model = _build_model("cpu")
    qd0 = model.joint_qd.numpy().copy()
    shared = simulate(model, qd0, False, True)
    fresh = simulate(model, qd0, True, True)
    h = 1e-2
    fd = np.zeros_like(shared)
    for k in range(len(qd0)):
        e = np.zeros_like(qd0); e[k] = h
        fd[k] = (simulate(model, qd0 + e, False, False) - simulate(model, qd0 - e, False, False)) / (2 * h)
    np.set_printoptions(precision=4, suppress=True, linewidth=200)
    print("shared buffers:", shared)
    print("fresh buffers: ", fresh)
    print("central FD:    ", fd)
    print("max |shared-fd|", np.abs(shared - fd).max(), " max |fresh-fd|", np.abs(fresh - fd).max(), " max |fd|", np.abs(fd).max())
