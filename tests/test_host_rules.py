"""Host rules (WL2xx tapes, WL3xx Warp API): the host model's facts, near-misses, realistic fixtures.

The rules' own VALID/INVALID examples run in test_rules.py. Here: the facts host.py derives (aliases,
argument forms, kernel resolution), the near-misses the issue names, and the fixtures in
tests/fixtures/host/, where each planted hazard carries `# expect: CODE` on the line it is reported on.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from expect_markers import expected
from warp_lint.registry import all_rules
from warp_lint.testing import lint_code, recordings

FIXTURES = Path(__file__).parent / "fixtures" / "host"
HOST_CODES = [code for code in all_rules() if code.startswith(("WL2", "WL3"))]

KERNELS = """
import warp as wp

@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]
"""


def scopes(code: str):
    return recordings(textwrap.dedent(code))


def codes(code: str, select=None, target: str = "") -> list[str]:
    return [f.code for f in lint_code(textwrap.dedent(code), select=select or HOST_CODES, target=target)]


# -- the host model ---------------------------------------------------------------------------

def test_launch_forms_resolve_the_kernel_and_parameters():
    scope = scopes(KERNELS + """
def run(a, b, n):
    k = square
    args = [a]
    wp.launch(square, n, [a], [b])
    wp.launch(kernel=k, dim=n, inputs=args, outputs=[b])
    wp.launch(dim=n, kernel=square, outputs=[b], inputs=[a])
""")[-1]
    for launch in scope.launches:
        assert launch.kernel is not None and launch.kernel.name == "square"
        assert [(r.code, r.param) for r in launch.reads()] == [("a", "x")]
        assert [(r.code, r.param) for r in launch.writes()] == [("b", "y")]


def test_starred_argument_lists_keep_their_positions():
    """`inputs=[*common, extra]` binds `common`'s elements first; a starred list the recording
    cannot expand leaves the parameters after it unknown instead of shifting them."""
    scope = scopes("""
import warp as wp

@wp.kernel
def emit(x: wp.array(dtype=float), w: wp.array(dtype=float), count: wp.array(dtype=int),
         y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * w[i] + float(count[0])

def run(a, b, c, d, n, unknown):
    common = [a, b]
    wp.launch(emit, n, inputs=[*common, c], outputs=[d])
    rest = [c]
    wp.launch(emit, n, inputs=[a, b, *rest], outputs=[d])
    wp.launch(emit, n, inputs=[a, *unknown], outputs=[d])
""")[-1]
    expanded, trailing, opaque = scope.launches
    for launch in (expanded, trailing):
        assert [(r.code, r.param) for r in launch.reads()] == [("a", "x"), ("b", "w"), ("c", "count")]
        assert [(r.code, r.param) for r in launch.writes()] == [("d", "y")]
    assert [(r.code, r.param) for r in opaque.reads()] == [("a", "x")] and opaque.writes() == []


def test_aliases_swaps_and_rebinding_give_keys():
    scope = scopes(KERNELS + """
def run(state, other, n):
    q = state.q
    wp.launch(square, n, inputs=[q], outputs=[other])
    wp.launch(square, n, inputs=[state.q], outputs=[other])
    a, b = q, other
    a, b = b, a
    wp.launch(square, n, inputs=[a], outputs=[b])
    q = wp.zeros(n)
    wp.launch(square, n, inputs=[q], outputs=[other])
""")[-1]
    first, second, swapped, rebound = scope.launches
    assert first.reads()[0].key == second.reads()[0].key == "state.q"
    assert swapped.reads()[0].key == "other" and swapped.writes()[0].key == "state.q"
    assert rebound.reads()[0].key != "state.q"


def test_events_carry_array_effects_host_copies_and_allocations():
    scope = scopes("""
import warp as wp

def run(x, y, n):
    with wp.Tape() as tape:
        wp.copy(dest=y, src=x)
        y.zero_()
        s = float(y.numpy()[0]) * 2.0
        z = wp.zeros_like(x)
        w = wp.zeros(n, dtype=wp.int32)
    tape.backward(grads={y: z})
    return tape.gradients[x], x.grad
""")[-1]
    copy = next(e for e in scope.events if e.name == "warp.copy")
    assert [r.code for r in copy.writes] == ["y"] and [r.code for r in copy.reads] == ["x"]
    assert [r.code for r in next(e for e in scope.events if e.name == "zero_").writes] == ["y"]
    assigned = {e.name: e for e in scope.events if e.kind == "assign"}
    assert assigned["s"].pulls == {"y"}
    assert assigned["z"].allocation.requires_grad is None and assigned["z"].allocation.inherits_from.code == "x"
    assert assigned["w"].allocation.integer
    assert [e.receiver for e in scope.events if e.kind == "grad"] == ["x", "x"]
    (backward,) = scope.backwards()
    assert [s.code for s in backward.arguments] == ["y"]


def test_tape_like_names_open_regions_and_torch_backward_is_not_a_tape():
    scope = scopes("""
import warp as wp

def run(self, loss, example):
    with self.tape:
        pass
    loss.backward()
    example.backward()
""")[-1]
    assert [r.tape for r in scope.regions] == ["self.tape"]
    assert scope.backwards() == []


# -- near-misses the issue names ----------------------------------------------------------------

@pytest.mark.parametrize("allocation", ["wp.zeros_like(x)", "wp.empty_like(x)", "wp.full_like(x, 1.0)",
                                        "wp.clone(x)", "wp.ones_like(x)"])
def test_wl206_inheriting_allocations_are_not_flagged(allocation):
    assert codes(KERNELS + f"""
def run(x, loss, n):
    y = {allocation}
    with wp.Tape() as tape:
        wp.launch(square, n, inputs=[x], outputs=[y])
        wp.launch(square, n, inputs=[y], outputs=[loss])
    tape.backward(loss)
""") == []


@pytest.mark.parametrize("allocation", ["wp.zeros(n, dtype=float)", "wp.empty(n, dtype=float)",
                                        "wp.full(n, 1.0, dtype=float)", "wp.array(data, dtype=float)",
                                        "wp.zeros(n, dtype=float, requires_grad=False)"])
def test_wl206_fresh_allocations_without_the_flag_are(allocation):
    assert codes(KERNELS + f"""
def run(x, loss, n, data):
    y = {allocation}
    with wp.Tape() as tape:
        wp.launch(square, n, inputs=[x], outputs=[y])
        wp.launch(square, n, inputs=[y], outputs=[loss])
    tape.backward(loss)
""") == ["WL206"]


def test_wl201_rebinding_is_a_new_array_and_reads_before_the_write_only():
    assert codes(KERNELS + """
def run(x, y, n):
    with wp.Tape() as tape:
        x.zero_()
        wp.launch(square, n, inputs=[x], outputs=[y])
        x = wp.empty_like(y)
        wp.launch(square, n, inputs=[y], outputs=[x])
""") == []


def test_wl201_writes_after_backward_and_in_other_if_arms_are_fine():
    assert codes(KERNELS + """
def run(x, y, loss, n, flag):
    tape = wp.Tape()
    with tape:
        if flag:
            wp.launch(square, n, inputs=[x], outputs=[y])
        else:
            x.fill_(1.0)
    tape.backward(loss)
    x.zero_()
""") == []


def test_wl201_unknown_kernels_are_not_guessed():
    assert codes("""
import warp as wp
from kernels import advance

def run(x, n):
    with wp.Tape():
        wp.launch(advance, n, inputs=[x], outputs=[x])
""") == []


def test_wl202_sequential_tapes_are_fine_and_nested_with_items_are_not():
    assert codes(KERNELS + """
def run(x, y, z, l1, l2):
    tape1 = wp.Tape()
    with tape1:
        wp.launch(square, 3, inputs=[x], outputs=[y])
    tape1.backward(l1)
    tape2 = wp.Tape()
    with tape2:
        wp.launch(square, 3, inputs=[y], outputs=[z])
    tape2.backward(l2)
""") == []
    assert codes("""
import warp as wp

def run(a, b):
    with wp.Tape() as t1, wp.Tape() as t2:
        pass
""") == ["WL202"]


def test_wl204_branches_reset_and_fresh_tapes():
    assert codes("""
import warp as wp

def run(tape, loss, flag):
    if flag:
        tape.backward(loss)
    else:
        tape.backward(loss)
""") == []
    assert codes("""
import warp as wp

def run(forward, x, loss, steps):
    tape = wp.Tape()
    for _ in range(steps):
        with tape:
            forward()
        tape.backward(loss)
        x.assign(x.numpy() - 0.1 * x.grad.numpy())
        tape.reset()
""") == []


FLAGGED_HELPER = """
import warp as wp


@wp.kernel
def energy(x: wp.array(dtype=float), e: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(e, 0, x[i] * x[i])


tape = wp.Tape()


def evaluate(x, e, with_gradient{default}):
    if with_gradient:
        with tape:
            wp.launch(energy, x.shape[0], inputs=[x], outputs=[e])
        tape.backward(e)
        return x.grad
    wp.launch(energy, x.shape[0], inputs=[x], outputs=[e])
    return e


def probe(x, e):
    evaluate(x, e, with_gradient=True)
    for _ in range(3):
        evaluate(x, e, {flag})
"""


@pytest.mark.parametrize(("flag", "default", "reported"), [
    ("with_gradient=False", "", False),  # the loop never runs the arm with backward()
    ("False", "", False),
    ("with_gradient=True", "", True),  # it does: the gradients pile up across passes
    ("x is None", "", True),  # not a literal: both arms may run
    ("", "=True", True),  # the default decides here
])
def test_wl204_an_arm_a_call_turns_off_with_a_literal_does_not_run(flag, default, reported):
    code = FLAGGED_HELPER.format(flag=flag, default=default).replace("evaluate(x, e, )", "evaluate(x, e)")
    assert ("WL204" in codes(code)) is reported


@pytest.mark.parametrize(("passed", "reported"), [("None", False), ("e", True)])
def test_wl204_an_arm_that_needs_a_value_does_not_run_where_none_is_passed(passed, reported):
    code = FLAGGED_HELPER.format(flag="with_gradient=False", default="").replace(
        "    if with_gradient:", "    if with_gradient and e is not None:").replace(
        "        evaluate(x, e, with_gradient=False)", f"        evaluate(x, {passed}, with_gradient=True)")
    assert ("WL204" in codes(code)) is reported


def test_a_literal_does_not_prune_what_a_call_under_a_tape_reaches():
    """Under a tape, `step(x, None)` still reaches the contact kernel: users of `step` pass
    contacts under their own tapes, so its finding stays reported (differentiated)."""
    code = """
import warp as wp

@wp.kernel
def push(x: wp.array(dtype=wp.vec3), contacts: wp.array(dtype=float)):
    i = wp.tid()
    v = x[i]
    v[0] = v[0] * contacts[i]
    x[i] = v

def step(x, contacts):
    if contacts is not None:
        wp.launch(push, x.shape[0], inputs=[x, contacts])

def test_step(x, loss):
    tape = wp.Tape()
    with tape:
        step(x, None)
    tape.backward(loss)
"""
    found = lint_code(code, select=["WL103"])
    assert [f.data.get("context") for f in found] == ["differentiated"]


TWO_TRIALS = """
import warp as wp


@wp.kernel
def energy(x: wp.array(dtype=float), e: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(e, 0, x[i] * x[i])


def trial(values):
    x = {make_x}
    e = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(energy, len(values), inputs=[x, e])
    tape.backward(e)
    return x.grad.numpy()


def compare(values, kept):
    for scale in (1.0, 2.0):
        first = trial([scale * v for v in values])
        second = trial(values)
"""


@pytest.mark.parametrize(("make_x", "reported"), [
    ("wp.array(values, dtype=float, requires_grad=True)", False),  # each trial's own array
    ("kept", True),  # ... where the same array is used again: its gradient piles up
])
def test_wl204_arrays_made_after_a_backward_in_the_same_pass_are_its_own(make_x, reported):
    """Two trials in one pass: the second trial's fresh array, read after the first trial's
    `backward()`, is made in the pass before its gradient is read."""
    code = TWO_TRIALS.format(make_x=make_x)
    if make_x == "kept":
        code = code.replace("def trial(values):", "def trial(values, kept=None):").replace(
            "trial([scale * v for v in values])", "trial([scale * v for v in values], kept)").replace(
            "trial(values)", "trial(values, kept)")
    assert ("WL204" in codes(code)) is reported


def test_wl204_a_default_does_not_prune_a_function_recorded_on_its_own():
    """`train` is run as its own entry point: its callers may pass `record=True`."""
    assert "WL204" in codes("""
import warp as wp

def train(forward, loss, record=False):
    tape = wp.Tape()
    for _ in range(3):
        if record:
            with tape:
                forward()
            tape.backward(loss)
""")


def test_wl205_unrecorded_launch_off_the_loss_path_is_fine():
    assert codes(KERNELS + """
def run(x, y, debug, loss):
    tape = wp.Tape()
    with tape:
        wp.launch(square, 3, inputs=[x], outputs=[y])
        wp.launch(square, 3, inputs=[x], outputs=[debug], record_tape=False)
        wp.launch(square, 3, inputs=[y], outputs=[loss])
    tape.backward(loss)
""") == []


def test_wl205_config_switch_is_reported_on_its_line():
    code = textwrap.dedent("""\
        import warp as wp

        wp.config.enable_backward = False

        @wp.kernel
        def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = x[i] * x[i]

        def run(x, y, loss):
            tape = wp.Tape()
            with tape:
                wp.launch(square, 3, inputs=[x], outputs=[y])
                wp.launch(square, 3, inputs=[y], outputs=[loss])
            tape.backward(loss)
        """)
    found = lint_code(code, select=["WL205"])
    assert [(f.code, f.start.line) for f in found] == [("WL205", 3)]
    assert "wp.config.enable_backward = False" in code.splitlines()[2]


def test_wl205_names_the_launch_and_the_tape_that_records_it_through_a_helper():
    """The launch is a plain one in a helper; the tape is the caller's: the message names both."""
    code = textwrap.dedent("""\
        import warp as wp


        @wp.kernel(enable_backward=False)
        def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = x[i] * x[i]


        @wp.kernel
        def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
            wp.atomic_add(loss, 0, y[wp.tid()])


        def step(x, y):
            wp.launch(square, 3, inputs=[x], outputs=[y])


        def run(x, y, loss):
            tape = wp.Tape()
            with tape:
                step(x, y)
                wp.launch(total, 3, inputs=[y], outputs=[loss])
            tape.backward(loss)
        """)
    (finding,) = lint_code(code, select=["WL205"])
    assert "its launch at line 16 runs while `tape` records (`with` at line 21)" in finding.message, finding.message
    assert [(r.message, r.start.line) for r in finding.related][:2] == [("launched here", 16),
                                                                        ("`tape` records from here", 21)]


COPY_CHAIN = """
import warp as wp


@wp.kernel(enable_backward=False)
def backup(x: wp.array(dtype=float), scratch: wp.array(dtype=float)):
    i = wp.tid()
    scratch[i] = x[i]


@wp.kernel(enable_backward=False)
def gather(scratch: wp.array(dtype=float), perm: wp.array(dtype=int), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = scratch[perm[i]]


@wp.kernel
def square(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i] * y[i])


def run(x, scratch, perm, y, loss):
    tape = wp.Tape()
    with tape:
        wp.launch(backup, 3, inputs=[x], outputs=[scratch]{keyword})
        wp.launch(gather, 3, inputs=[scratch, perm], outputs=[y]{keyword})
        wp.launch(square, 3, inputs=[y], outputs=[loss])
    tape.backward(loss)
"""


def test_wl205_a_chain_without_backward_is_reported_where_it_starts():
    """`gather` reads only what `backup` (no backward either) wrote on the tape: the chain is cut
    at `backup`, which is reported; `gather` adds nothing to pass back."""
    found = lint_code(COPY_CHAIN.format(keyword=""), select=["WL205"])
    assert [(f.code, "`backup`" in f.message) for f in found] == [("WL205", True)]


def test_wl205_unrecorded_launches_in_a_chain_are_each_reported_downstream():
    """With `record_tape=False` the upstream launch is not followed to the loss (its output
    reaches it only through an unrecorded launch): the downstream one stays reported."""
    code = COPY_CHAIN.format(keyword=", record_tape=False").replace("(enable_backward=False)", "")
    found = lint_code(code, select=["WL205"])
    assert [(f.code, "`gather`" in f.message) for f in found] == [("WL205", True)]


def test_wl301_kept_results_and_wl302_named_masks():
    assert codes("""
import warp as wp

def check(k, x, y):
    ok = wp.autograd.gradcheck(k, dim=3, inputs=[x], outputs=[y], raise_exception=False)
    return ok, wp.autograd.jacobian(k, dim=3, inputs=[x], outputs=[y], input_output_mask=[("x", "y")])
""", select=["WL301", "WL302"], target="<1.3.2") == []


def test_wl302_is_silent_for_newer_targets():
    code = """
import warp as wp

def check(k, x, y):
    return wp.autograd.jacobian_fd(k, dim=3, inputs=[x], outputs=[y], input_output_mask=[(0, 0)])
"""
    assert codes(code, target="==1.3.1") == ["WL302"]
    assert codes(code, target=">=1.4") == []


@pytest.mark.parametrize("code", HOST_CODES)
def test_host_rules_read_the_project_model(code):
    assert all_rules()[code].level == "project", f"{code} reads recordings: it must run at the project level"


# -- realistic fixtures -------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.py")), ids=lambda p: p.stem)
def test_fixture(path):
    text = path.read_text()
    found = sorted((f.start.line, f.code) for f in lint_code(text, path=str(path)))
    assert found == expected(text), "\n".join(f.message for f in lint_code(text, path=str(path)))


def test_fixtures_cover_every_tape_rule():
    planted = {code for path in FIXTURES.glob("*.py") for _, code in expected(path.read_text())}
    assert planted >= {"WL201", "WL202", "WL203", "WL204", "WL205", "WL206"}
    assert expected((FIXTURES / "sim_clean.py").read_text()) == []


HELPER_MADE = """
import warp as wp


@wp.kernel
def double_sum(a: wp.array(dtype=float), loss: wp.array(dtype=float)):
    wp.atomic_add(loss, 0, 2.0 * a[wp.tid()] * a[wp.tid()])


def test_passes(values):
    def make_array(data):
        return wp.array(data, dtype=float, requires_grad=True)

    def chain(data):
        a = make_array(data)
        loss = wp.zeros(1, dtype=float, requires_grad=True)
        with wp.Tape() as tape:
            wp.launch(double_sum, 2, inputs=[a, loss])
        tape.backward(loss=loss)
        return a.grad.numpy()

    for data in values:
        chain(data)
"""


def test_an_array_a_helper_makes_afresh_in_each_pass_starts_with_no_gradient():
    """`a = make_array(...)` as the first statement of a pass is bound in the pass, though no event
    came before it there: nothing accumulates (WL204 silent). The same helper called once before
    the loop gives one array whose gradient every pass adds to."""
    assert codes(HELPER_MADE, select=["WL204"]) == []
    hoisted = HELPER_MADE.replace("    def chain(data):\n        a = make_array(data)\n",
                                  "    a = make_array(values[0])\n\n    def chain(data):\n")
    assert codes(hoisted, select=["WL204"]) == ["WL204"]


def test_not_of_a_partial_gradient_test_leaves_the_arm_followed():
    """`not (batched and x.requires_grad)` holds where `batched` is false, with gradients too: the
    arm is followed under a tape, and its overwrite after a read is reported."""
    code = """
import warp as wp


@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


def run(x, y, scratch, batched):
    tape = wp.Tape()
    with tape:
        wp.launch(square, 3, inputs=[x], outputs=[scratch])
        wp.launch(square, 3, inputs=[scratch], outputs=[y])
        if not (batched and x.requires_grad):
            scratch.zero_()
    tape.backward(grads={y: wp.ones_like(y)})
"""
    assert codes(code, select=["WL201"]) == ["WL201"]
    assert codes(code.replace("not (batched and x.requires_grad)", "not x.requires_grad"), select=["WL201"]) == []


def test_wl205_a_recorded_kernel_without_backward_after_an_unrecorded_launch_is_not_reported_again():
    """`square` (unrecorded) starts the chain and is reported; `gather`, recorded but without
    backward, reads only what `square` wrote: fixing it alone would pass nothing back."""
    code = COPY_CHAIN.format(keyword="").replace(
        "wp.launch(backup, 3, inputs=[x], outputs=[scratch])",
        "wp.launch(square, 3, inputs=[x], outputs=[scratch], record_tape=False)").replace(
        "@wp.kernel(enable_backward=False)\ndef backup", "@wp.kernel\ndef backup")
    found = lint_code(code, select=["WL205"])
    assert [("record_tape=False" in f.message, "`gather`" in f.message) for f in found] == [(True, False)]


CALLERS_LOOP = """
import warp as wp


@wp.kernel
def integrate(x: wp.array(dtype=float), v: wp.array(dtype=float), x_out: wp.array(dtype=float)):
    i = wp.tid()
    x_out[i] = x[i] * v[i]


@wp.kernel
def scratch(x: wp.array(dtype=float), buf: wp.array(dtype=float)):
    i = wp.tid()
    buf[i] = x[i] * x[i]


class Solver:
    def __init__(self, n):
        self.buf = wp.zeros(n, dtype=float, requires_grad=True)

    def step(self, x, v, x_out):
        wp.launch(scratch, len(x), inputs=[x], outputs=[self.buf])
        wp.launch(integrate, len(x), inputs=[self.buf, v], outputs=[x_out])


def run(states, v, loss, steps):
    solver = Solver(len(v))
    tape = wp.Tape()
    with tape:
        for t in range(steps):
            solver.step(states[t], v, states[t + 1])
    tape.backward(loss)
"""


def test_wl201_names_the_callers_loop_when_the_overwrite_is_in_a_method_it_calls():
    """The write and the read are in `Solver.step`, the loop that repeats them is the caller's: the
    message says where that loop is instead of "this loop"."""
    (finding,) = lint_code(CALLERS_LOOP, select=["WL201"])
    assert "read in the previous iteration of the loop at line 29" in finding.message, finding.message
