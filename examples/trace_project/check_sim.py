"""The example project's own tests (collected by this folder's pytest.ini: `check_*.py`)."""

import numpy as np
import warp as wp

import sim

wp.init()


def test_drag_rollout_runs():
    x, v = sim.make_state()
    loss, grad_v = sim.drag_rollout(x, v)
    assert loss > 0.0
    assert np.all(np.isfinite(grad_v))


def test_two_stage_loss_runs():
    x, v = sim.make_state()
    loss, _ = sim.two_stage_loss(x, v)
    assert loss > 0.0


def test_one_tape_gradient_points_to_target():
    x, v = sim.make_state()
    _, grad_x = sim.one_tape_loss(x, v)
    assert np.all(grad_x < 0.0)  # every particle is below the target: moving up lowers the loss


def test_grounded_gradient_is_finite():
    x, v = sim.make_state()
    grad_x = sim.grounded_loss(x, v)
    assert np.all(np.isfinite(grad_x))
