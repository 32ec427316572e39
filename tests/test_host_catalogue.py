"""The host catalogue (WL207-WL213, WL303, WL304) and the host-model facts it rests on.

The rules' own VALID/INVALID examples run in test_rules.py. Here: the facts host.py derives for these
rules (struct-field arrays, helper summaries, `wp.utils` effects, `retain_grad`), the near-misses the
issue names, the version specifiers, and the fixtures in tests/fixtures/host_catalogue/, where each
planted hazard carries `# expect: CODE` on the line it is reported on.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from expect_markers import expected
from warp_lint.registry import all_rules
from warp_lint.testing import lint_code, recordings

FIXTURES = Path(__file__).parent / "fixtures" / "host_catalogue"
CATALOGUE = ["WL207", "WL208", "WL209", "WL210", "WL211", "WL212", "WL213", "WL303", "WL304"]

KERNELS = """
import warp as wp

@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]

@wp.kernel
def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i])
"""


def scopes(code: str):
    return recordings(textwrap.dedent(code))


def codes(code: str, select=None, target: str = "") -> list[str]:
    return [f.code for f in lint_code(textwrap.dedent(code), select=select or CATALOGUE, target=target)]


# -- the host model's new facts ------------------------------------------------------------------

def test_struct_field_arrays_are_read_and_written_through_the_struct():
    scope = scopes("""
import warp as wp

@wp.struct
class State:
    q: wp.array(dtype=float)
    n: int

@wp.kernel
def read_q(s: State, y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = s.q[i] * 2.0

@wp.kernel
def write_q(y: wp.array(dtype=float), s: State):
    i = wp.tid()
    wp.atomic_add(s.q, i, y[i])

def run(state, y, n):
    q = state.q
    wp.launch(read_q, n, inputs=[state], outputs=[y])
    wp.launch(write_q, n, inputs=[y], outputs=[state])
    wp.launch(read_q, n, inputs=[state], outputs=[q])
""")[-1]
    reader, writer, _ = scope.launches
    assert [(r.code, r.key, r.param) for r in reader.reads()] == [("state.q", "state.q", "s.q")]
    assert [(r.code, r.param) for r in writer.writes()] == [("state.q", "s.q")]
    assert writer.stores() == []  # atomic_add accumulates
    assert reader.event.reads[0].key == "state.q"


def test_helper_calls_are_followed_with_the_callers_arrays():
    scope = scopes(KERNELS + """
def reset(a, b):
    a.zero_()
    wp.launch(square, 3, inputs=[b], outputs=[a])

def outer(a, b):
    reset(b, a)

class Sim:
    def loss_of(self):
        wp.launch(total, 3, inputs=[self.y], outputs=[self.loss])

    def run(self, x, y):
        reset(x, y)
        outer(x, y)
        self.loss_of()
""")
    (scope,) = [s for s in scope if s.name == "run"]
    writes = [(e.kind, [r.key for r in e.writes], [c.callee for c in e.chain]) for e in scope.events if e.writes]
    assert writes == [
        ("method", ["x"], ["reset"]), ("launch", ["x"], ["reset"]),  # reset(x, y): a is x, b is y
        ("method", ["y"], ["outer", "reset"]), ("launch", ["y"], ["outer", "reset"]),  # outer swaps them
        ("launch", ["self.loss"], ["Sim.loss_of"]),
    ]
    reads = [[r.key for r in e.reads] for e in scope.events if e.launch is not None]
    assert reads == [["y"], ["x"], ["self.y"]]


def test_utility_ops_read_and_write_their_arrays_and_retain_grad_is_read():
    scope = scopes("""
import warp as wp

def run(y, s, keys, values, n):
    z = wp.zeros(n, dtype=float, requires_grad=True, retain_grad=True)
    wp.utils.array_sum(y, out=s)
    wp.utils.radix_sort_pairs(keys, values, n)
""")[-1]
    total_, sort = [e for e in scope.events if e.kind == "call" and e.name.startswith("warp.utils")]
    assert [r.key for r in total_.reads] == ["y"] and [r.key for r in total_.writes] == ["s"]
    assert {r.key for r in sort.writes} == {"keys", "values"}
    assert next(e for e in scope.events if e.kind == "assign").allocation.retain_grad


def test_parameter_effects_of_a_function():
    (scope,) = [s for s in scopes(KERNELS + """
def forward(x, y, out):
    wp.launch(square, 3, inputs=[x], outputs=[out])
    y.fill_(1.0)
    wp.launch(square, 3, inputs=[y], outputs=[x])
    return out
""") if s.name == "forward"]
    assert scope.parameter_effects() == {"x": {"read", "write"}, "y": {"read", "write"}, "out": {"write"}}


# -- near-misses the issue names ---------------------------------------------------------------

def test_wl207_reset_or_fresh_tape_or_one_episode_are_fine():
    for body in ("tape.reset()", "pass"):
        assert codes(f"""
import warp as wp

def run(forward, loss, steps):
    tape = wp.Tape()
    for _ in range(steps):
        with tape:
            forward()
        tape.backward(loss)
        {body}
""", ["WL207"]) == (["WL207"] if body == "pass" else [])
    assert codes("""
import warp as wp

def run(forward, loss, steps):
    for _ in range(steps):
        with wp.Tape() as tape:
            forward()
        tape.backward(loss)
""", ["WL207"]) == []


def test_wl208_per_step_gradient_used_per_step_is_fine():
    assert codes(KERNELS + """
def run(x, x_next, loss, steps):
    for _ in range(steps):
        tape = wp.Tape()
        with tape:
            wp.launch(square, 3, inputs=[x], outputs=[x_next])
            wp.launch(total, 3, inputs=[x_next], outputs=[loss])
        tape.backward(loss)
        x.assign(x.numpy() - 0.1 * x.grad.numpy())
        tape.zero()
""", ["WL208"]) == []


def test_wl209_outside_the_tape_or_not_feeding_the_loss_is_fine():
    assert codes(KERNELS + """
def run(x, y, s, loss, stats):
    wp.utils.array_sum(y, out=s)
    tape = wp.Tape()
    with tape:
        wp.launch(square, 3, inputs=[x], outputs=[y])
        wp.utils.array_sum(y, out=stats)
        wp.launch(total, 3, inputs=[y], outputs=[loss])
    tape.backward(loss)
""", ["WL209"]) == []
    # the returned host value feeding a recorded launch is flagged
    assert codes("""
import warp as wp

@wp.kernel
def scale(x: wp.array(dtype=float), s: float, loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, x[i] * s)

def run(x, y, loss):
    tape = wp.Tape()
    with tape:
        s = wp.utils.array_inner(y, y)
        wp.launch(scale, 3, inputs=[x, s], outputs=[loss])
    tape.backward(loss)
""", ["WL209"]) == ["WL209"]


def test_wl210_reported_on_the_launch_in_the_helper_with_the_call_related():
    code = KERNELS + """
def compute_loss(y, loss):
    wp.launch(total, 3, inputs=[y], outputs=[loss])

def run(x, y, loss, tape):
    with tape:
        wp.launch(square, 3, inputs=[x], outputs=[y])
    compute_loss(y, loss)
    tape.backward(loss)
"""
    found = lint_code(code, select=["WL210"])
    lines = code.lstrip("\n").splitlines()
    assert [(f.code, lines[f.start.line - 1].strip()) for f in found] == [
        ("WL210", "wp.launch(total, 3, inputs=[y], outputs=[loss])")]
    assert [lines[r.start.line - 1].strip() for r in found[0].related] == [
        "tape.backward(loss)", "compute_loss(y, loss)"]


def test_wl211_owns_writes_after_the_recording_and_ignores_grad_writes():
    code = KERNELS + """
def run(x, y, loss):
    tape = wp.Tape()
    with tape:
        wp.launch(square, 3, inputs=[x], outputs=[y])
        wp.launch(total, 3, inputs=[y], outputs=[loss])
    x.zero_()
    x.grad.zero_()
    tape.backward(loss)
"""
    assert codes(code, ["WL201", "WL211"]) == ["WL211"]


def test_wl212_needs_retain_grad_and_a_second_store():
    base = KERNELS + """
def run(x, a, loss, n):
    y = wp.zeros(n, dtype=float, requires_grad=True{flag})
    tape = wp.Tape()
    with tape:
        wp.launch(square, n, inputs=[x], outputs=[y])
        {second}
        wp.launch(total, n, inputs=[y], outputs=[loss])
    tape.backward(loss)
"""
    second = "wp.launch(square, n, inputs=[a], outputs=[y])"
    assert codes(base.format(flag=", retain_grad=True", second=second), ["WL212"]) == ["WL212"]
    assert codes(base.format(flag="", second=second), ["WL212"]) == []
    assert codes(base.format(flag=", retain_grad=True", second="pass"), ["WL212"]) == []
    assert codes(base.format(flag=", retain_grad=True", second=second), ["WL212"], target="<1.13") == []


def test_version_specifiers():
    assert all_rules()["WL213"].affected_versions == "<1.17"
    assert all_rules()["WL304"].affected_versions == ">=1.6,<1.17"
    assert all_rules()["WL212"].affected_versions == ">=1.13"
    copy = KERNELS + """
def run(x, y, c, loss):
    with wp.Tape() as tape:
        wp.launch(square, 3, inputs=[x], outputs=[y])
        c.assign(y)
        wp.launch(total, 3, inputs=[c], outputs=[loss])
        wp.launch(total, 3, inputs=[y], outputs=[loss])
    tape.backward(loss)
"""
    assert codes(copy, ["WL213"], target="==1.16.0") == ["WL213"]
    assert codes(copy, ["WL213"], target=">=1.17") == []


def test_wl213_assign_from_host_data_is_fine():
    assert codes(KERNELS + """
def run(x, y, loss, data):
    with wp.Tape() as tape:
        y.assign(x.numpy() * 2.0)
        wp.launch(total, 3, inputs=[y], outputs=[loss])
        wp.launch(total, 3, inputs=[x], outputs=[loss])
    tape.backward(loss)
""", ["WL213"]) == []


def test_wl303_explicit_atol_is_fine_and_wl304_restore_inputs_false_is_always_reported():
    assert codes("""
import warp as wp

def check(kernel, x, y):
    return wp.autograd.gradcheck(kernel, dim=3, inputs=[x], outputs=[y], atol=1e-6)
""", ["WL303"]) == []
    code = KERNELS + """
def test(x):
    def forward(x):
        x.fill_(1.0)
        y = wp.zeros_like(x)
        wp.launch(square, 3, inputs=[x], outputs=[y])
        return y
    assert wp.autograd.gradcheck(forward, inputs=[x], atol=1e-5{flag})
"""
    assert codes(code.format(flag=""), ["WL304"], target=">=1.17") == []
    assert codes(code.format(flag=", restore_inputs=False"), ["WL304"], target=">=1.17") == ["WL304"]
    assert codes(code.format(flag=", restore_inputs=True"), ["WL304"], target=">=1.17") == []
    # a kernel is checked in kernel form: no restore question
    assert codes(KERNELS + """
def test(x, y):
    assert wp.autograd.gradcheck(square, dim=3, inputs=[x], outputs=[y], atol=1e-5)
""", ["WL304"]) == []


@pytest.mark.parametrize("code", CATALOGUE)
def test_catalogue_rules_read_the_project_model_and_have_versions_sections(code):
    rule = all_rules()[code]
    assert rule.level == "project"
    assert "Measured" in rule.sections()["Warp versions"]


# -- realistic fixtures -------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.py")), ids=lambda p: p.stem)
def test_fixture(path):
    text = path.read_text()
    found = lint_code(text, path=str(path))
    assert sorted((f.start.line, f.code) for f in found) == expected(text), "\n".join(f.message for f in found)


def test_fixtures_cover_every_catalogue_rule():
    planted = {code for path in FIXTURES.glob("*.py") for _, code in expected(path.read_text())}
    assert planted >= set(CATALOGUE)
    assert expected((FIXTURES / "sim_catalogue_clean.py").read_text()) == []
