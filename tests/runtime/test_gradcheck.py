"""The public ``warp_lint.gradcheck`` (torch.autograd.gradcheck's shape) on real CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest
from warp_devices import DEVICES

from warp_lint.runtime import gradcheck

N = 6


def _array(wp, values, device, dtype=None):
    # Allocated on the launch device: the default device is cuda:0 on a machine with a GPU.
    return wp.array(np.asarray(values, dtype=np.float32), dtype=dtype or wp.float32, requires_grad=True, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_correct_kernel_passes_and_prints_the_criterion(warp_in_process, api_kernels, device):
    wp = warp_in_process
    x = _array(wp, np.linspace(0.5, 1.5, N), device)
    y = wp.zeros(N, dtype=float, requires_grad=True, device=device)
    result = gradcheck(api_kernels.smooth, N, [x], [y])
    assert result.passed and bool(result)
    assert [(p.input, p.output, p.status) for p in result.pairs] == [("x", "y", "pass")]
    assert result.pairs[0].jacobian_checked
    table = result.table()
    assert "|AD - FD| <= atol + rtol * |FD|" in table and "atol=0.001" in table and "rtol=0.01" in table


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_kernel_fails_and_raises_with_the_table(warp_in_process, api_kernels, device):
    wp = warp_in_process
    from warp_lint.runtime import GradcheckError

    a = _array(wp, np.linspace(0.5, 1.5, N), device)
    with pytest.raises(GradcheckError) as raised:
        gradcheck(api_kernels.square_in_place, N, [a])
    message = str(raised.value)
    assert "criterion: |AD - FD| <= atol + rtol * |FD|" in message
    assert "a            a            fail" in message
    assert "d a[" in message  # where the worst entry is
    assert raised.value.result.pairs[0].status == "fail"

    result = gradcheck(api_kernels.square_in_place, N, [a], raise_exception=False)
    assert not result.passed
    assert "in place" in " ".join(result.notes)


@pytest.mark.parametrize("device", DEVICES)
def test_callers_arrays_and_grads_are_untouched(warp_in_process, api_kernels, device):
    wp = warp_in_process
    a = _array(wp, np.linspace(0.5, 1.5, N), device)
    a.grad.fill_(7.0)
    before = a.numpy().copy()
    gradcheck(api_kernels.square_in_place, N, [a], raise_exception=False)
    assert np.array_equal(a.numpy(), before)
    assert np.all(a.grad.numpy() == 7.0)


@pytest.mark.parametrize("device", DEVICES)
def test_fast_mode_checks_every_pair_directionally(warp_in_process, api_kernels, device):
    wp = warp_in_process
    rng = np.random.default_rng(1)
    v = wp.array(rng.uniform(0.5, 1.5, (N, 3)).astype(np.float32), dtype=wp.vec3, requires_grad=True, device=device)
    s = _array(wp, rng.uniform(0.5, 1.5, N), device)
    out = wp.zeros(N, dtype=wp.vec3, requires_grad=True, device=device)
    result = gradcheck(api_kernels.scale_vectors, N, [v, s], [out], fast_mode=True)
    assert result.passed
    assert [(p.input, p.output) for p in result.pairs] == [("v", "out"), ("s", "out")]
    assert not any(p.jacobian_checked for p in result.pairs)


@pytest.mark.parametrize("device", DEVICES)
def test_float64_uses_float64_tolerances_and_nondeterminism_is_measured(warp_in_process, api_kernels, device):
    wp = warp_in_process
    x = wp.array(np.linspace(0.5, 1.5, N), dtype=wp.float64, requires_grad=True, device=device)
    y = wp.zeros(N, dtype=wp.float64, requires_grad=True, device=device)
    result = gradcheck(api_kernels.smooth64, N, [x], [y])
    assert result.precision == "float64" and result.tolerances.rtol == 1e-5
    assert result.pairs[0].max_rel_error < 1e-6
    assert result.pairs[0].nondeterminism == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_tolerances_can_be_tightened_until_fd_noise_fails(warp_in_process, api_kernels, device):
    wp = warp_in_process
    x = _array(wp, np.linspace(0.5, 1.5, N), device)
    y = wp.zeros(N, dtype=float, requires_grad=True, device=device)
    result = gradcheck(api_kernels.smooth, N, [x], [y], atol=0.0, rtol=1e-9, raise_exception=False)
    assert not result.passed


@pytest.mark.parametrize("device", DEVICES)
def test_a_kink_where_ad_takes_one_side_is_no_disagreement_and_a_wrong_derivative_next_to_it_is(
        warp_in_process, api_kernels, device):
    wp = warp_in_process
    a = _array(wp, [0.5, 1.0, 2.0], device)
    b = _array(wp, [0.7, 1.0, 1.0], device)  # element 1 sits on the kink a == b
    y = wp.zeros(3, dtype=float, requires_grad=True, device=device)
    result = gradcheck(api_kernels.larger_of, 3, [a, b], [y])
    assert result.passed, result.table()
    assert sum(p.entries_at_kink for p in result.pairs) == 2  # d y[1] / d a[1] and d y[1] / d b[1]
    assert "at a kink" in result.pairs[0].criterion

    directional = gradcheck(api_kernels.larger_of, 3, [a, b], [y], fast_mode=True, raise_exception=False)
    assert {p.status for p in directional.pairs} <= {"pass", "fd-not-converged"}
    assert not any(p.status == "fail" for p in directional.pairs)

    # Off the kink, a hazard still fails: the in-place square has no kink to hide behind.
    square = gradcheck(api_kernels.square_in_place, N, [_array(wp, np.linspace(0.5, 1.5, N), device)],
                       raise_exception=False)
    assert square.pairs[0].status == "fail" and square.pairs[0].entries_at_kink == 0
