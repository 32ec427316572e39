"""Differentiation contexts decided from the program's entry points: what users and frameworks call.

Each program is linted with the real command line and, where the test claims a gradient, run:
``tests/measured/measure_programs.py`` compares the program's gradient with central differences
of its loss on the CPU, in one child process for the module (the PyTorch programs only where
PyTorch is installed).

- ``torch-tape``: a ``torch.autograd.Function`` whose ``forward`` records a launch on a tape and
  whose ``backward`` runs that tape's backward. The kernel's dynamic loop multiplies a local by
  itself: *differentiated*, its WL104 reported, and the gradient measured wrong.
- ``torch-adjoint``: the same kernel, launched plainly in ``forward`` and with ``adjoint=True`` in
  ``backward``: the hand-run adjoint differentiates it (no tape anywhere).
- ``library``: a package whose public ``inverse_dynamics`` rotates torques in place, launched by
  the package only outside tapes. It is *public*: not reported by default (counted), reported with
  ``--report-contexts public``; a user's program that records ``inverse_dynamics`` on its own tape
  gets a wrong gradient (``library-user``). The same kernel behind a private function is
  *forward-only*.
- ``custom-adjoint-body``: a helper that a ``@wp.func_grad`` body calls runs only in the backward
  pass, which Warp does not differentiate: *forward-only*, and the gradient matches.
- ``config-set``: a function that sets ``wp.config.<option>`` records a hazard: ``wp`` stays Warp
  there (an attribute assignment binds no name), so the kernel is differentiated and reported.
- ``containers``: kernels picked from a module-level dict, from a dict held by an object, from a
  conditional expression, and set on a class by a factory, each under a tape, beside kernels of
  the same modules that are only launched after ``backward()``. A launch that takes its kernel
  from a container runs only what the program puts in it: the others stay forward-only.
- ``refused``: a constructor raises when a feature meets required gradients (`if self.wind and
  requires_grad: raise`): the feature's arm (`if self.wind:`) is not followed under a tape, and
  the program with gradients raises; ``unrefused``, whose guard never raises, is reported and wrong.
- ``never-requires-grad``: a kernel recorded on a tape whose every array is allocated without
  `requires_grad` is forward-only (gradient measured right); ``schedule`` differentiates the same
  kernel's buffers and is reported (measured wrong).
- ``named-module-off``: the same kernel in a named module (`@wp.kernel(module="schedules")`) whose
  options switch backward off (`wp.get_module("schedules").options[...] = False`): no adjoint, the
  gradient is zero (WL205, measured wrong), and its WL104 is forward-only; ``named-module-other``
  switches off another module's: nothing changes (WL104, measured wrong).
"""

from __future__ import annotations

import re

from pathlib import Path

import pytest
from programs import expected, findings, measure, write_program

from warp_lint.cli import main as warp_lint
from warp_lint.config import find_config

SERIES = """
import warp as wp


@wp.kernel
def sine_series(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    s = float(0.0)
    for k in range(i + 2):
        s = s * wp.sin(x[i]) + 1.0  # expect: WL104
    y[i] = s
"""

TORCH_TAPE = """
import torch
import warp as wp

from kernels import sine_series


class SineSeries(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_torch):
        ctx.x = wp.from_torch(x_torch.detach().clone(), requires_grad=True)
        ctx.y = wp.zeros_like(ctx.x, requires_grad=True)
        ctx.tape = wp.Tape()
        with ctx.tape:
            wp.launch(sine_series, ctx.x.shape[0], inputs=[ctx.x], outputs=[ctx.y])
        return wp.to_torch(ctx.y).clone()

    @staticmethod
    def backward(ctx, grad_y):
        ctx.tape.backward(grads={ctx.y: wp.from_torch(grad_y.contiguous())})
        return wp.to_torch(ctx.x.grad).clone()


def main(values):
    x = torch.tensor(values, dtype=torch.float32, requires_grad=True)
    loss = SineSeries.apply(x).sum()
    loss.backward()
    return float(loss), x.grad.numpy().copy()
"""

TORCH_ADJOINT = """
import torch
import warp as wp

from kernels import sine_series


class SineSeries(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_torch):
        x = wp.from_torch(x_torch.detach().contiguous())
        y = wp.zeros_like(x)
        wp.launch(sine_series, x.shape[0], inputs=[x], outputs=[y])
        ctx.save_for_backward(x_torch)
        return wp.to_torch(y).clone()

    @staticmethod
    def backward(ctx, grad_y):
        (x_torch,) = ctx.saved_tensors
        x = wp.from_torch(x_torch.detach().contiguous())
        y = wp.zeros_like(x)
        adj_x = wp.zeros_like(x)
        wp.launch(sine_series, x.shape[0], inputs=[x], outputs=[y],
                  adj_inputs=[adj_x], adj_outputs=[wp.from_torch(grad_y.contiguous())], adjoint=True)
        return wp.to_torch(adj_x).clone()


def main(values):
    x = torch.tensor(values, dtype=torch.float32, requires_grad=True)
    loss = SineSeries.apply(x).sum()
    loss.backward()
    return float(loss), x.grad.numpy().copy()
"""

DYNAMICS = """
import warp as wp


@wp.kernel
def rotate_torques(q: wp.array(dtype=float), tau: wp.array(dtype=float)):
    i = wp.tid()
    tau[i] = tau[i] * wp.cos(q[i])  # expect: WL102


def inverse_dynamics(q, tau):
    \"\"\"Joint torques for the configuration q, rotated in place into the joint frames.\"\"\"
    wp.launch(rotate_torques, q.shape[0], inputs=[q, tau])
    return tau
"""

LIBRARY = {
    "mylib/__init__.py": "from .dynamics import inverse_dynamics\n\n__all__ = [\"inverse_dynamics\"]\n",
    "mylib/dynamics.py": DYNAMICS,
    "mylib/report.py": """
        import warp as wp

        from .dynamics import inverse_dynamics


        def print_torques(q):
            tau = wp.ones(q.shape[0], dtype=float)
            inverse_dynamics(q, tau)
            print(tau.numpy())
        """,
}

LIBRARY_USER = """
import sys
from pathlib import Path

import numpy as np
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "library"))

from mylib import inverse_dynamics  # noqa: E402


@wp.kernel
def square(x: wp.array(dtype=float), tau: wp.array(dtype=float)):
    i = wp.tid()
    tau[i] = x[i] * x[i]


def main(values):
    q = wp.array(values, dtype=float, requires_grad=True)
    tau = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(square, len(values), inputs=[q, tau])
        inverse_dynamics(q, tau)
    tape.backward(grads={tau: wp.ones(len(values), dtype=float)})
    return float(np.sum(tau.numpy())), q.grad.numpy().copy()
"""

# A function that sets `wp.config.<option> = ...` binds no local `wp`: its launches are Warp's.
CONFIG_SET = """
import numpy as np
import warp as wp


@wp.kernel
def square(x: wp.array(dtype=float), tau: wp.array(dtype=float)):
    i = wp.tid()
    tau[i] = x[i] * x[i]


@wp.kernel
def rotate_torques(q: wp.array(dtype=float), tau: wp.array(dtype=float)):
    i = wp.tid()
    tau[i] = tau[i] * wp.cos(q[i])  # expect: WL102


def main(values):
    wp.config.verify_autograd_array_access = False
    q = wp.array(values, dtype=float, requires_grad=True)
    tau = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(square, len(values), inputs=[q, tau])
        wp.launch(rotate_torques, len(values), inputs=[q, tau])
    tape.backward(grads={tau: wp.ones(len(values), dtype=float)})
    return float(np.sum(tau.numpy())), q.grad.numpy().copy()
"""

CUSTOM_ADJOINT_BODY = {
    "kernels.py": """
        import warp as wp


        @wp.func
        def power_series(x: float, n: int):
            s = float(1.0)
            for k in range(n):
                s = s * x  # a WL104 of a helper only the custom adjoint's body runs
            return s


        @wp.func
        def smooth_power(x: float, n: int):
            return wp.pow(x, float(n))


        @wp.func_grad(smooth_power)
        def adj_smooth_power(x: float, n: int, adj_ret: float):
            wp.adjoint[x] += adj_ret * float(n) * power_series(x, n - 1)


        @wp.kernel
        def powers(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = smooth_power(x[i], i + 2)
        """,
    "train.py": """
        import numpy as np
        import warp as wp

        from kernels import powers


        def main(values):
            x = wp.array(values, dtype=float, requires_grad=True)
            y = wp.zeros(len(values), dtype=float, requires_grad=True)
            tape = wp.Tape()
            with tape:
                wp.launch(powers, len(values), inputs=[x], outputs=[y])
            tape.backward(grads={y: wp.ones(len(values), dtype=float)})
            return float(np.sum(y.numpy())), x.grad.numpy().copy()
        """,
}

CONTAINERS = {
    "kernels.py": """
        import warp as wp


        @wp.kernel
        def square_into(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = x[i] * x[i]


        @wp.kernel
        def cube_into(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = x[i] * x[i] * x[i]


        def make_scale(factor: float):
            @wp.kernel
            def scale(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i] * factor

            return scale


        @wp.kernel
        def damp(x: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = x[i] - 0.1 * x[i] * x[i]  # in place: only after backward()


        @wp.kernel
        def clamp(x: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = wp.min(x[i], x[i] * x[i])  # in place: only after backward()


        FORWARD = {"square": square_into, "cube": cube_into}
        STEPS = [damp]
        """,
    "solver.py": """
        import warp as wp

        from kernels import FORWARD, STEPS, clamp, cube_into, make_scale, square_into


        class Solver:
            def __init__(self, cubic):
                self.stages = {n: make_scale(float(n)) for n in (1, 2)}
                self.first = cube_into if cubic else square_into

            def run(self, x, y):
                wp.launch(self.first, x.shape[0], inputs=[x], outputs=[y])
                for factor, kernel in self.stages.items():
                    wp.launch(kernel, x.shape[0], inputs=[x], outputs=[y])
                wp.launch(FORWARD["square"], x.shape[0], inputs=[x], outputs=[y])

            def polish(self, x, y):
                wp.launch(self.extra, x.shape[0], inputs=[x], outputs=[y])


        def make_solver():
            class Tuned(Solver):
                pass

            Tuned.extra = staticmethod(square_into)
            return Tuned


        def fit(x, y, loss):
            tape = wp.Tape()
            with tape:
                solver = Solver(cubic=True)
                solver.run(x, y)
                tuned = make_solver()(cubic=False)
                tuned.polish(x, y)
            tape.backward(loss)
            for step in STEPS:
                wp.launch(step, x.shape[0], inputs=[x])
            wp.launch(clamp, x.shape[0], inputs=[x])
        """,
}

REFUSED = {
    "cloth.py": """
        import warp as wp


        @wp.kernel
        def integrate(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = x[i] + 0.1 * x[i] * x[i]


        @wp.kernel
        def gust(y: wp.array(dtype=float), strength: float):
            i = wp.tid()
            y[i] = y[i] * y[i] * strength  # expect: WL102


        class Cloth:
            def __init__(self, wind, requires_grad):
                self.wind = wind
                self.strength = 0.5
                if self.wind and requires_grad:
                    raise NotImplementedError("gusts are not differentiable: build the cloth without requires_grad")

            def step(self, x, y):
                wp.launch(integrate, x.shape[0], inputs=[x], outputs=[y])
                if self.wind:
                    wp.launch(gust, y.shape[0], inputs=[y, self.strength])
        """,
    "train.py": """
        import numpy as np
        import warp as wp

        from cloth import Cloth


        @wp.kernel
        def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
            wp.atomic_add(loss, 0, y[wp.tid()])


        def main(values):
            x = wp.array(values, dtype=float, requires_grad=True)
            y = wp.zeros_like(x, requires_grad=True)
            loss = wp.zeros(1, dtype=float, requires_grad=True)
            cloth = Cloth(wind=True, requires_grad=True)
            tape = wp.Tape()
            with tape:
                cloth.step(x, y)
                wp.launch(total, y.shape[0], inputs=[y], outputs=[loss])
            tape.backward(loss)
            return float(loss.numpy()[0]), x.grad.numpy().copy()
        """,
}

# A schedule computed on the tape from buffers made without requires_grad, then used as a constant
# by a differentiable kernel: the schedule's dynamic loop (WL104) cannot change a gradient. The
# twin differentiates the schedule itself (its buffers require gradients): the same loop is wrong.
SCHEDULE = """
import numpy as np
import warp as wp


@wp.kernel
def schedule(delay: wp.array(dtype=float), steps: int, scale: wp.array(dtype=float)):
    i = wp.tid()
    s = float(1.0)
    for _ in range(steps):
        s = s * (1.0 + delay[0])  # expect: WL104
    scale[i] = s


@wp.kernel
def apply(x: wp.array(dtype=float), scale: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, x[i] * x[i] * scale[i])


def main(values):
    n = len(values)
    x = wp.array(np.ones(n, dtype=np.float32), dtype=float, requires_grad=True)
    delay = wp.array(values[:1], dtype=float, requires_grad=True)
    scale = wp.zeros(n, dtype=float, requires_grad=True)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(schedule, n, inputs=[delay, 3], outputs=[scale])
        wp.launch(apply, n, inputs=[x, scale], outputs=[loss])
    tape.backward(loss)
    gradient = np.zeros(n, dtype=np.float32)
    gradient[0] = delay.grad.numpy()[0]
    return float(loss.numpy()[0]), gradient
"""

# The schedule kernel in a named module whose options switch its backward off: the gradient of
# `delay` through it is zero (WL205 at the setting), and its WL104 is forward-only. The same setting
# made for another module changes nothing (WL104 reported, the gradient wrong).
NAMED_MODULE = SCHEDULE.replace("  # expect: WL104", "").replace(
    "import warp as wp\n",
    "import warp as wp\n\nwp.get_module(\"NAME\").options[\"enable_backward\"] = False  # expect: WL205\n").replace(
    "@wp.kernel\ndef schedule", "@wp.kernel(module=\"schedules\")\ndef schedule")

NEVER_REQUIRES_GRAD = SCHEDULE.replace("  # expect: WL104", "").replace(
    "x = wp.array(np.ones(n, dtype=np.float32), dtype=float, requires_grad=True)",
    "x = wp.array(values, dtype=float, requires_grad=True)").replace(
    "delay = wp.array(values[:1], dtype=float, requires_grad=True)", "delay = wp.array([0.1], dtype=float)").replace(
    "scale = wp.zeros(n, dtype=float, requires_grad=True)", "scale = wp.zeros(n, dtype=float)").replace(
    """    gradient = np.zeros(n, dtype=np.float32)
    gradient[0] = delay.grad.numpy()[0]
    return float(loss.numpy()[0]), gradient""", "    return float(loss.numpy()[0]), x.grad.numpy().copy()")


PROGRAMS = {
    "torch-tape": {"kernels.py": SERIES, "train.py": TORCH_TAPE},
    "torch-adjoint": {"kernels.py": SERIES, "train.py": TORCH_ADJOINT},
    "library": LIBRARY,
    "library-user": {"train.py": LIBRARY_USER},
    "private-library": {**LIBRARY, "mylib/dynamics.py": DYNAMICS.replace("def inverse_dynamics", "def _inverse_dynamics")
                        .replace("  # expect: WL102", ""),
                        "mylib/__init__.py": "", "mylib/report.py": LIBRARY["mylib/report.py"].replace(
                            "inverse_dynamics", "_inverse_dynamics").replace("def print_torques", "def _print_torques")},
    "custom-adjoint-body": CUSTOM_ADJOINT_BODY,
    "config-set": {"train.py": CONFIG_SET},
    "containers": CONTAINERS,
    "schedule": {"train.py": SCHEDULE},
    "never-requires-grad": {"train.py": NEVER_REQUIRES_GRAD},
    "named-module-off": {"train.py": NAMED_MODULE.replace("NAME", "schedules")},
    # A forward check under `with wp.Tape():`: the tape is held in no name, nothing differentiates it.
    "unnamed-tape": {"train.py": SCHEDULE.replace("  # expect: WL104", "").replace(
        "    tape = wp.Tape()\n    with tape:\n", "    with wp.Tape():\n").replace(
        "    tape.backward(loss)\n", "").replace("    gradient[0] = delay.grad.numpy()[0]\n", "")},
    "named-module-other": {"train.py": NAMED_MODULE.replace("NAME", "renderers").replace(
        "s = s * (1.0 + delay[0])", "s = s * (1.0 + delay[0])  # expect: WL104").replace("  # expect: WL205", "")},
    "refused": {**REFUSED, "cloth.py": REFUSED["cloth.py"].replace("  # expect: WL102", "")},
    "unrefused": {**REFUSED, "cloth.py": REFUSED["cloth.py"].replace(
        "if self.wind and requires_grad:", "if self.wind and requires_grad and False:")},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("entry")
    return {name: write_program(root / name, files) for name, files in PROGRAMS.items()}


def _explain(target: str, capsys) -> str:
    warp_lint(["explain", "--no-cache", target])
    return capsys.readouterr().out


@pytest.mark.parametrize("name", ["torch-tape", "torch-adjoint"])
def test_a_torch_function_differentiates_its_kernel(name, folders, tmp_path, capsys):
    assert findings(folders[name], tmp_path) == expected(folders[name])
    out = _explain(str(folders[name] / "kernels.py") + ":5", capsys)
    assert "differentiated" in out
    if name == "torch-tape":
        # `SineSeries.apply(x)` in `main` runs `forward`: the recording starts where the program does
        assert "recorded on `ctx.tape`" in out and "entry point `main`" in out and \
            re.search(r"calls `SineSeries.forward` at \S*train.py:25", out), out
    else:
        assert "its adjoint is launched at train.py:22 (`adjoint=True`)" in out


def test_a_public_function_of_a_library_makes_its_kernel_public(folders, tmp_path, capsys):
    library = folders["library"]
    assert findings(library, tmp_path) == []
    warp_lint(["check", "--no-cache", str(library)])
    assert "1 finding in code the project does not differentiate" in capsys.readouterr().out
    assert findings(library, tmp_path, "--report-contexts", "public") == expected(library)
    out = _explain(str(library / "mylib" / "dynamics.py") + ":5", capsys)
    assert "public" in out and "`inverse_dynamics` is public API and launches it" in out
    assert "`--report-contexts public`" in out


def test_the_same_kernel_behind_a_private_function_is_forward_only(folders, tmp_path, capsys):
    library = folders["private-library"]
    assert findings(library, tmp_path, "--report-contexts", "differentiated,public,unknown") == []
    out = _explain(str(library / "mylib" / "dynamics.py") + ":5", capsys)
    assert "forward-only" in out and "outside any tape recording" in out


def test_a_helper_of_a_custom_adjoints_body_is_forward_only(folders, tmp_path, capsys):
    folder = folders["custom-adjoint-body"]
    assert findings(folder, tmp_path) == []
    out = _explain(str(folder / "kernels.py") + ":4", capsys)
    assert "forward-only" in out and "`adj_smooth_power` calls it" in out and "runs in the backward pass" in out


@pytest.mark.parametrize(("kernel", "state"), [
    ("square_into", "differentiated"),  # FORWARD["square"], `self.first`, `Tuned.extra`
    ("cube_into", "differentiated"),  # `self.first = cube_into if cubic else square_into`
    ("scale", "unknown"),  # make_scale's, from a dict comprehension the object holds: may run
    ("damp", "forward-only"),  # only in STEPS, launched after backward()
    ("clamp", "forward-only"),  # launched by name after backward()
])
def test_a_kernel_taken_from_a_container_is_one_the_program_put_there(kernel, state, folders, capsys):
    path = folders["containers"] / "kernels.py"
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if f"def {kernel}(" in text)
    out = _explain(f"{path}:{line}", capsys)
    assert out.splitlines()[0].endswith(f": {state}"), out


def test_a_method_of_an_object_the_recording_cannot_type_proves_nothing_forward_only(folders, tmp_path, capsys):
    folder = folders["containers"].parent / "containers-chained"
    solver = PROGRAMS["containers"]["solver.py"].replace(
        "solver = Solver(cubic=True)", "Solver(cubic=True).run(x, y)").replace("solver.run(x, y)", "pass")
    write_program(folder, {**PROGRAMS["containers"], "solver.py": solver})
    out = _explain(str(folder / "kernels.py") + ":5", capsys)
    assert out.splitlines()[0].endswith(": unknown") and "`Solver(cubic=True).run(...)`" in out, out


def test_a_function_that_sets_a_warp_config_option_still_launches_warp_kernels(folders, tmp_path, capsys):
    folder = folders["config-set"]
    assert findings(folder, tmp_path) == expected(folder)
    assert "differentiated" in _explain(str(folder / "train.py") + ":13", capsys)


def test_the_contexts_option_and_setting_name_known_contexts(folders, tmp_path, capsys):
    assert warp_lint(["check", "--no-cache", "--report-contexts", "public,everything", str(folders["library"])]) == 2
    assert "unknown context 'everything'" in capsys.readouterr().err
    (folders["library"] / "pyproject.toml").write_text(
        "[project]\nname = 'library'\n\n[tool.warp-lint]\nreport-contexts = [\"differentiated\", \"public\"]\n")
    find_config.cache_clear()  # this process read the folder's configuration before
    try:
        assert findings(folders["library"], tmp_path) == expected(folders["library"])
    finally:
        (folders["library"] / "pyproject.toml").write_text("[project]\nname = 'library'\n")
        find_config.cache_clear()


def test_an_arm_the_program_refuses_to_run_with_gradients_is_not_followed_under_a_tape(folders, tmp_path, capsys):
    """`if self.wind and requires_grad: raise` in the constructor: no run gets to `if self.wind:`
    with gradients, so the launch there is not recorded, and the kernel is forward-only; the same
    program whose guard never raises records it, and its gradient is wrong."""
    assert findings(folders["refused"], tmp_path) == []
    out = _explain(str(folders["refused"] / "cloth.py") + ":11", capsys)
    assert out.splitlines()[0].endswith(": forward-only"), out
    assert findings(folders["unrefused"], tmp_path) == expected(folders["unrefused"])


def test_a_kernel_whose_arrays_never_require_gradients_is_forward_only(folders, tmp_path, capsys):
    """Recorded on a tape, but every array bound to it is allocated without requires_grad (and
    never given a gradient): its adjoint changes nothing, so its WL104 is hidden and says why; the
    twin that differentiates the schedule is reported, and measured wrong."""
    assert findings(folders["never-requires-grad"], tmp_path) == []
    out = _explain(str(folders["never-requires-grad"] / "train.py") + ":6", capsys)
    assert out.splitlines()[0].endswith(": forward-only"), out
    assert "binds only arrays allocated without `requires_grad`: `delay`" in out
    assert findings(folders["schedule"], tmp_path) == expected(folders["schedule"])


def test_a_kernel_of_a_named_module_has_that_modules_options(folders, tmp_path, capsys):
    """`wp.get_module("schedules").options["enable_backward"] = False` before `@wp.kernel(module=
    "schedules")`: the kernel has no backward (its recorded launch loses the gradient: WL205 at
    the setting; its WL104 forward-only). The setting made for another module leaves it alone."""
    assert findings(folders["named-module-off"], tmp_path) == expected(folders["named-module-off"])
    out = _explain(str(folders["named-module-off"] / "train.py") + ":10", capsys)
    assert out.splitlines()[0].endswith(": forward-only"), out
    assert "`wp.get_module('schedules').options` on line 4 disables backward" in out
    assert findings(folders["named-module-other"], tmp_path) == expected(folders["named-module-other"])


def test_a_kernel_recorded_only_on_a_tape_held_in_no_name_is_forward_only(folders, tmp_path, capsys):
    """`with wp.Tape():` (Warp's own forward tests write it) records the launch, but nothing can
    reach the tape afterwards to run its `backward()`: the kernel is forward-only, and says why."""
    program = (folders["unnamed-tape"] / "train.py").read_text()
    assert "with wp.Tape():" in program and "backward" not in program
    assert findings(folders["unnamed-tape"], tmp_path) == []
    out = _explain(str(folders["unnamed-tape"] / "train.py") + ":6", capsys)
    assert out.splitlines()[0].endswith(": forward-only"), out
    assert "holds its tape in no name, so no `backward()` can run it" in out
    assert findings(folders["unnamed-tape"], tmp_path, "--report-contexts", "all") == [("train.py", 10, "WL104")]


MEASURED = {"library-user": "wrong", "custom-adjoint-body": "match", "config-set": "wrong", "refused": "raises",
            "unrefused": "wrong", "schedule": "wrong", "never-requires-grad": "match", "named-module-off": "wrong",
            "named-module-other": "wrong"}
MEASURED_WITH_TORCH = {"torch-tape": "wrong", "torch-adjoint": "wrong"}


@pytest.fixture(scope="module")
def measured(folders, tmp_path_factory) -> dict[str, dict]:
    pytest.importorskip("warp")
    return measure(folders, MEASURED, tmp_path_factory.mktemp("manifest"))


@pytest.mark.parametrize(("name", "verdict"), list(MEASURED.items()))
def test_the_gradient_is_as_the_contexts_say(name, verdict, measured):
    assert measured[name]["verdict"] == verdict, measured[name]


@pytest.mark.parametrize(("name", "verdict"), list(MEASURED_WITH_TORCH.items()))
def test_the_torch_programs_gradient_is_as_the_findings_say(name, verdict, folders, tmp_path_factory):
    pytest.importorskip("warp")
    pytest.importorskip("torch")
    assert measure(folders, [name], tmp_path_factory.mktemp("manifest"))[name]["verdict"] == verdict
