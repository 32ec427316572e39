"""A hazard whose wrong gradient nobody uses is not reported: a TD target made before the tape.

A critic's loss kernel rewrites its target array in place (`target[i] = min(target[i], other[i])`,
then `target[i] = r + gamma * target[i]`): the backward pass replays the `min` from overwritten
memory and sends its gradient to the wrong operand (WL102). When the targets are computed before the
tape records (a frozen target network) and nothing reads their `.grad`, that wrong gradient is never
used: the parameters' gradient, through the critic's values, is right. (An array allocated with
`requires_grad=True` written out is a parameter whose gradient was asked for, and keeps the finding;
the frozen network's outputs ask for one only as their input does.) The twin computes the targets
on the tape from the same parameters: then the misrouted gradient reaches the parameters, and the
finding is reported. Both are linted and run on the CPU against central differences of the loss.
"""

from __future__ import annotations

import numpy as np
import pytest
from programs import expected, findings, load_module, write_program

PROGRAM = '''
import warp as wp

f64 = wp.float64


@wp.kernel
def values_of(p: wp.array(dtype=f64), scale: f64, out: wp.array(dtype=f64)):
    i = wp.tid()
    out[i] = scale * p[i] + f64(0.1) * p[i] * p[i]


@wp.kernel
def critic_loss(values: wp.array(dtype=f64), target: wp.array(dtype=f64), other: wp.array(dtype=f64),
                reward: f64, gamma: f64, loss: wp.array(dtype=f64)):
    i = wp.tid()
    target[i] = wp.min(target[i], other[i]){marker}
    target[i] = reward + gamma * target[i]{marker}
    d = values[i] - target[i]
    wp.atomic_add(loss, 0, d * d)


def frozen_network(q, n, scale):
    # a frozen network's forward pass: its output asks for a gradient only if its input does
    out = wp.zeros(n, dtype=f64, requires_grad=q.requires_grad, device="cpu")
    wp.launch(values_of, n, inputs=[q, scale], outputs=[out], device="cpu")
    return out


def train_step(params, frozen):
    p = wp.array(params, dtype=f64, requires_grad=True, device="cpu")
    q = wp.array(frozen, dtype=f64, requires_grad=True, device="cpu")
    n = len(params)
    values = wp.zeros(n, dtype=f64, requires_grad=True, device="cpu")
    loss = wp.zeros(1, dtype=f64, requires_grad=True, device="cpu")
{targets_before}
    tape = wp.Tape()
    with tape:
{targets_on_tape}
        wp.launch(values_of, n, inputs=[p, f64(3.0)], outputs=[values], device="cpu")
        wp.launch(critic_loss, n, inputs=[values, target, other, f64(0.5), f64(0.9)], outputs=[loss], device="cpu")
    tape.backward(loss)
    return float(loss.numpy()[0]), p.grad.numpy().copy()
'''
TARGETS = "target = frozen_network({source}, n, f64(2.0))\n{indent}other = frozen_network({source}, n, f64(-1.0))"
FROZEN = PROGRAM.format(marker="", targets_before="    " + TARGETS.format(source="q", indent="    "),
                        targets_on_tape="")
LIVE = PROGRAM.format(marker="  # expect: WL102", targets_before="",
                      targets_on_tape="        " + TARGETS.format(source="p", indent="        "))
PARAMS = np.array([-0.1, -0.05, 0.4])  # the first two: min picks `target`, its replay `other`


def test_the_frozen_targets_hazard_is_hidden_and_the_live_one_reported(tmp_path):
    frozen = write_program(tmp_path / "frozen", {"train.py": FROZEN})
    live = write_program(tmp_path / "live", {"train.py": LIVE})
    assert findings(frozen, tmp_path, "--select", "WL102") == []
    assert findings(live, tmp_path, "--select", "WL102") == expected(live)
    # The frozen program's finding is there, only out of the default contexts, with the reason.
    hidden = findings(frozen, tmp_path, "--select", "WL102", "--report-contexts", "all")
    assert [code for _, _, code in hidden] == ["WL102", "WL102"]


def _central_difference(module, frozen, step=1e-6):
    gradient = np.zeros_like(PARAMS)
    for k in range(len(PARAMS)):
        shift = np.zeros_like(PARAMS)
        shift[k] = step
        gradient[k] = (module.train_step(PARAMS + shift, frozen)[0]
                       - module.train_step(PARAMS - shift, frozen)[0]) / (2 * step)
    return gradient


def test_the_frozen_targets_leave_the_gradient_right_and_the_live_ones_do_not(tmp_path):
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    frozen_values = np.array([-0.1, -0.12, 0.3])  # the replayed min flips here too, onto q alone
    frozen = load_module(FROZEN, "unused_gradient_frozen", tmp_path)
    assert np.allclose(frozen.train_step(PARAMS, frozen_values)[1], _central_difference(frozen, frozen_values))
    live = load_module(LIVE, "unused_gradient_live", tmp_path)
    assert not np.allclose(live.train_step(PARAMS, frozen_values)[1], _central_difference(live, frozen_values),
                           rtol=1e-4)
