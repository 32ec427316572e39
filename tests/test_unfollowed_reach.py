"""What a call or launch the recordings cannot follow may reach (``warp_lint.project.reach``), and
a file linted alone answering as its whole project does.

Each program is linted with the real command line and, where the test claims a gradient, run:
``tests/measured/measure_programs.py`` compares the tape's gradient with central differences of the
program's loss on the CPU, in one child process for the whole module.

- ``callable-model``: a model run as ``layer(x, y)`` (``__call__``) on a value the recording cannot
  type launches a kernel whose dynamic loop multiplies a local by itself. The launch may run under
  the tape, so the kernel is *unknown*, never forward-only: its WL104 is reported, and the gradient
  is measured wrong. Its twin accumulates with ``+=``: no finding, and the gradient matches.
- ``scripts``: a folder of scripts that import nothing of each other. One records a launch of a
  kernel it picks from its own registry (the model cannot name it); another launches an optimizer
  step, picked from a list, after ``backward()``. The step is forward-only (its in-place update is
  not reported) and the tape's gradient is right. When the second script imports the first, the
  step stays forward-only: the registry's recorded launch runs only what is put in the registry.
  When the second script puts the step in the registry, that launch may run it: reported again.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from programs import expected, findings, measure, report, write_program

from warp_lint.cli import main as warp_lint

LAYER = """
import warp as wp


@wp.kernel
def sine_series(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    s = float(0.0)
    for k in range(i + 2):
        {update}
    y[i] = s


class SineSeries:
    def __init__(self, n):
        self.n = n

    def __call__(self, x, y):
        wp.launch(sine_series, self.n, inputs=[x], outputs=[y])
"""

TRAIN_LAYER = """
import numpy as np
import warp as wp
from layer import SineSeries

LAYERS = {"sine": SineSeries}


def loss_and_grad(layer, x, y):
    tape = wp.Tape()
    with tape:
        layer(x, y)
    tape.backward(grads={y: wp.ones(y.shape[0], dtype=float)})
    return x.grad


def main(values):
    layer = LAYERS["sine"](len(values))
    x = wp.array(values, dtype=float, requires_grad=True)
    y = wp.zeros(len(values), dtype=float, requires_grad=True)
    grad = loss_and_grad(layer, x, y)
    return float(np.sum(y.numpy())), grad.numpy().copy()
"""

# The same model built where the tape is: the recording types it and follows its `__call__`.
TRAIN_TYPED = TRAIN_LAYER.replace('layer = LAYERS["sine"](len(values))', "layer = SineSeries(len(values))").replace(
    "    grad = loss_and_grad(layer, x, y)\n", """    tape = wp.Tape()
    with tape:
        layer(x, y)
    tape.backward(grads={y: wp.ones(y.shape[0], dtype=float)})
    grad = x.grad
""")

HAZARD_UPDATE = "s = s * wp.sin(x[i]) + x[i]  # expect: WL104"
TWIN_UPDATE = "s += wp.sin(x[i]) * x[i]"

REGISTRY_SCRIPT = """
import warp as wp

KERNELS = {}


@wp.kernel
def double(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * 2.0


KERNELS["double"] = double


def run(name):
    x = wp.ones(4, dtype=float, requires_grad=True)
    y = wp.zeros(4, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(KERNELS[name], 4, inputs=[x], outputs=[y])
    tape.backward(grads={y: wp.ones(4, dtype=float)})


if __name__ == "__main__":
    run("double")
"""

TRAIN_SCRIPT = """
import numpy as np
import warp as wp
{imports}

@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


@wp.kernel
def descend(x: wp.array(dtype=float), g: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] - 0.01 * g[i] * x[i]{marker}


UPDATES = [descend]
{register}

def main(values):
    x = wp.array(values, dtype=float, requires_grad=True)
    y = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(square, len(values), inputs=[x], outputs=[y])
    tape.backward(grads={{y: wp.ones(len(values), dtype=float)}})
    gradient = x.grad.numpy().copy()
    loss = float(np.sum(y.numpy()))
    for update in UPDATES:
        wp.launch(update, len(values), inputs=[x, x.grad])
    return loss, gradient
"""


OBSERVERS = """
import warp as wp


@wp.kernel
def highlight(c: wp.array(dtype=float)):
    i = wp.tid()
    c[i] = c[i] * c[i]{marker}


class Picker:
    def update(self, c):
        wp.launch(highlight, c.shape[0], inputs=[c])

    def build(self, c):
        self.update(c)


class Observers:
    def __init__(self):
        self.layouts = {{}}
        self.grid = wp.HashGrid(8, 8, 8)
        self.picker = Picker()


def step(observers, c, loss):
    tape = wp.Tape()
    with tape:
        {call}
    tape.backward(loss)


def render(c):
    Picker().update(c)
"""


PROGRAMS = {
    "callable-model-hazard": {"layer.py": LAYER.format(update=HAZARD_UPDATE), "train.py": TRAIN_LAYER},
    "typed-callable-model": {"layer.py": LAYER.format(update=HAZARD_UPDATE), "train.py": TRAIN_TYPED},
    "callable-model-twin": {"layer.py": LAYER.format(update=TWIN_UPDATE), "train.py": TRAIN_LAYER},
    "scripts": {"registry.py": REGISTRY_SCRIPT, "train.py": TRAIN_SCRIPT.format(imports="", marker="", register="")},
    "scripts-importing-only": {"registry.py": REGISTRY_SCRIPT, "train.py": TRAIN_SCRIPT.format(
        imports="import registry\n", marker="", register="")},
    "scripts-importing": {"registry.py": REGISTRY_SCRIPT,
                          "train.py": TRAIN_SCRIPT.format(imports="import registry\n", marker="  # expect: WL102",
                                                          register='registry.KERNELS["descend"] = descend\n')},
}
# A method called under a tape on an object held in an attribute: only the classes that attribute
# holds may run. A dict's `update` and a hash grid's `build` run nothing of the project, so the
# picker's kernel stays forward-only; the picker's own `update` may record it.
PROGRAMS.update({
    "held-dict": {"observers.py": OBSERVERS.format(marker="", call='observers.layouts.update({"c": c})')},
    "held-library-object": {"observers.py": OBSERVERS.format(marker="", call="observers.grid.build(c, 1.0)")},
    "held-project-object": {"observers.py": OBSERVERS.format(marker="  # expect: WL102",
                                                             call="observers.picker.update(c)")},
})
# A kernel registered in a third module's container and launched from it by a module that never
# imports the kernel's: the registry relates them, so the recorded launch may run the kernel (its
# own launch, outside any tape, would make it forward-only otherwise).
PROGRAMS["registry-channel"] = {
    "registry.py": "KERNELS = {}\n",
    "kernels.py": """
        import warp as wp

        import registry


        @wp.kernel
        def square_in_place(x: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = x[i] * x[i]  # expect: WL102


        registry.KERNELS["square"] = square_in_place
        """,
    "warm.py": """
        import warp as wp

        from kernels import square_in_place


        def warm_up(x):
            wp.launch(square_in_place, x.shape[0], inputs=[x])
        """,
    "launcher.py": """
        import warp as wp

        import registry


        def run(name, x, loss):
            tape = wp.Tape()
            with tape:
                wp.launch(registry.KERNELS[name], x.shape[0], inputs=[x])
            tape.backward(loss)
        """,
}
# The func whose dynamic loop multiplies a local by itself (WL104), and a `main` that differentiates
# the kernel `apply` on a tape, then launches `{after}` outside it: shared by the programs below.
POWER_FUNC = """
@wp.func
def power(x: float, n: int):
    y = x
    for k in range(n):
        y = y * x{marker}
    return y
"""
TAPED_MAIN = """
def main(values):
    a = wp.array(values, dtype=float, requires_grad=True)
    b = wp.zeros(len(values), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(apply, len(values), inputs=[a, b, 2])
    tape.backward(grads={{b: wp.ones(len(values), dtype=float)}})
    {after}
    return float(np.sum(b.numpy())), a.grad.numpy().copy()
"""
PREVIEW = "wp.launch(preview, len(values), inputs=[a, wp.zeros(len(values), dtype=float), 2])"

# A func reached only through a func with its own `@wp.func_grad`: its adjoint never runs, so its
# dynamic loop cannot make the gradient wrong. Without the custom adjoint, the same loop does.
POWER = """
import numpy as np
import warp as wp

""" + POWER_FUNC + """

@wp.func
def smooth_power(x: float, n: int):
    return power(x, n)

{custom}

@wp.kernel
def apply(a: wp.array(dtype=float), b: wp.array(dtype=float), n: int):
    i = wp.tid()
    b[i] = smooth_power(a[i], n)

""" + TAPED_MAIN.replace("{after}", "")
CUSTOM_ADJOINT = """
@wp.func_grad(smooth_power)
def adj_smooth_power(x: float, n: int, adj_ret: float):
    wp.adjoint[x] += adj_ret * float(n + 1) * wp.pow(x, float(n))
"""
PROGRAMS.update({
    "custom-adjoint": {"train.py": POWER.format(marker="", custom=CUSTOM_ADJOINT)},
    "no-custom-adjoint": {"train.py": POWER.format(marker="  # expect: WL104", custom="")},
})
# A module that switches its backward off: its kernels get no adjoint, but a func of it is built into
# each calling kernel's module with that module's options, so a differentiated kernel elsewhere
# differentiates it (measured wrong with the func's dynamic loop); called only by the module's own
# kernels, it is forward-only.
HELPERS = """
import warp as wp

wp.set_module_options({{"enable_backward": False}})

""" + POWER_FUNC + """

@wp.kernel
def powers(a: wp.array(dtype=float), b: wp.array(dtype=float), n: int):
    i = wp.tid()
    b[i] = power(a[i], n)
"""
TRAIN_HELPERS = """
import numpy as np
import warp as wp
from helpers import {imported}


@wp.kernel
def apply(a: wp.array(dtype=float), b: wp.array(dtype=float), n: int):
    i = wp.tid()
    b[i] = {call}

""" + TAPED_MAIN.replace("{after}", PREVIEW.replace("preview", "powers"))
PROGRAMS.update({
    "helper-of-disabled-module": {"helpers.py": HELPERS.format(marker="  # expect: WL104"),
                                  "train.py": TRAIN_HELPERS.format(imported="power, powers", call="power(a[i], n)")},
    "helper-only-its-module-calls": {"helpers.py": HELPERS.format(marker=""),
                                     "train.py": TRAIN_HELPERS.format(imported="powers", call="a[i] * a[i] * a[i]")},
})
# A func that a forward-only kernel calls, and another func that nothing runs: the caller that never
# runs differentiates nothing, so the func is forward-only. Once a differentiated kernel calls that
# other func, the func's dynamic loop is differentiated and reported (and measured wrong).
DEAD_CALLER = """
import numpy as np
import warp as wp

""" + POWER_FUNC + """

@wp.func
def doubled_power(x: float, n: int):
    return power(x, n) * 2.0


@wp.kernel
def preview(a: wp.array(dtype=float), b: wp.array(dtype=float), n: int):
    i = wp.tid()
    b[i] = power(a[i], n)


@wp.kernel
def apply(a: wp.array(dtype=float), b: wp.array(dtype=float), n: int):
    i = wp.tid()
    b[i] = {call}

""" + TAPED_MAIN.replace("{after}", PREVIEW)
PROGRAMS.update({
    "caller-never-runs": {"train.py": DEAD_CALLER.format(marker="", call="a[i] * a[i] * a[i] * 2.0")},
    "caller-runs": {"train.py": DEAD_CALLER.format(marker="  # expect: WL104", call="doubled_power(a[i], n)")},
})
# A recorded launch of `self._step`, which the class fills from its module's registry: it may run
# the registry's kernels, not a kernel a test module keeps in a list of its own (that module
# imports the optimizer, but the optimizer never takes a kernel from it).
PROGRAMS["attribute-launch"] = {
    "optimizer.py": """
        import warp as wp


        @wp.kernel
        def scaled_step(x: wp.array(dtype=float), g: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = x[i] - 0.1 * g[i] * x[i]  # expect: WL102


        KERNELS = {"scaled": scaled_step}


        class Optimizer:
            def __init__(self):
                self._step = KERNELS["scaled"]

            def step(self, x, g, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(self._step, x.shape[0], inputs=[x, g])
                tape.backward(loss)
        """,
    "test_optimizer.py": """
        import warp as wp

        from optimizer import Optimizer


        @wp.kernel
        def square_in_place(x: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = x[i] * x[i]


        CHECKS = [square_in_place]


        def test_checks():
            x = wp.ones(4, dtype=float)
            for check in CHECKS:
                wp.launch(check, 4, inputs=[x])
            assert Optimizer() is not None
        """,
}
MEASURED = ("callable-model-hazard", "callable-model-twin", "scripts", "custom-adjoint", "no-custom-adjoint",
            "helper-of-disabled-module", "helper-only-its-module-calls", "caller-never-runs", "caller-runs")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("unfollowed")
    return {name: write_program(root / name, files) for name, files in PROGRAMS.items()}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_findings_are_the_expected_ones(name, folders, tmp_path):
    folder = folders[name]
    assert findings(folder, tmp_path) == expected(folder)


def test_a_kernel_only_a_callable_under_a_tape_launches_is_unknown_and_says_why(folders, capsys):
    warp_lint(["explain", "--no-cache", str(folders["callable-model-hazard"] / "layer.py") + ":5"])
    out = capsys.readouterr().out
    assert "unknown" in out and "`layer(...)` at train.py:11" in out and "could not follow" in out


def test_a_typed_model_called_under_a_tape_is_followed_into_its_call_method(folders, capsys):
    warp_lint(["explain", "--no-cache", str(folders["typed-callable-model"] / "layer.py") + ":5"])
    out = capsys.readouterr().out
    assert "differentiated" in out and "through `SineSeries.__call__`" in out


def test_a_step_picked_from_a_list_after_backward_is_forward_only(folders, capsys):
    warp_lint(["explain", "--no-cache", str(folders["scripts"] / "train.py") + ":12"])
    out = capsys.readouterr().out
    assert "forward-only" in out and "every launch that may run it" in out


@pytest.fixture(scope="module")
def measured(folders, tmp_path_factory) -> dict[str, dict]:
    pytest.importorskip("warp")
    return measure(folders, MEASURED, tmp_path_factory.mktemp("manifest"))


@pytest.mark.parametrize(("name", "verdict"), [("callable-model-hazard", "wrong"), ("callable-model-twin", "match"),
                                               ("scripts", "match"), ("custom-adjoint", "match"),
                                               ("no-custom-adjoint", "wrong"), ("helper-of-disabled-module", "wrong"),
                                               ("helper-only-its-module-calls", "match"),
                                               ("caller-never-runs", "match"), ("caller-runs", "wrong")])
def test_the_gradient_is_as_the_findings_say(name, verdict, measured):
    assert measured[name]["verdict"] == verdict, measured[name]


# -- a file linted alone answers as its project does -------------------------------------------------

# An installed package: no pyproject.toml, setup.py or .git above it; its root is its topmost package.
PACKAGE = {
    "__init__.py": "from .train import fit\n",
    "kernels.py": """
        import warp as wp


        @wp.kernel
        def stretch(x: wp.array(dtype=float), rest: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = x[i] * x[i] - rest[i]


        @wp.kernel
        def shade(depth: wp.array(dtype=float)):
            i = wp.tid()
            depth[i] = depth[i] * depth[i]
        """,
    "train.py": """
        import warp as wp

        from .kernels import stretch


        def fit(x, rest, loss):
            tape = wp.Tape()
            with tape:
                wp.launch(stretch, x.shape[0], inputs=[x, rest])
            tape.backward(loss)
            return x.grad
        """,
    # Funcs nothing in the package calls: users may call the public one from their kernels; the
    # private one no kernel can ever compile.
    "helpers.py": """
        import warp as wp


        @wp.func
        def power(x: float, n: int):
            y = x
            for k in range(n):
                y = y * x
            return y
        """,
    "_internal.py": """
        import warp as wp


        @wp.func
        def power(x: float, n: int):
            y = x
            for k in range(n):
                y = y * x
            return y
        """,
    "render.py": """
        import warp as wp

        from .kernels import shade


        def render(depth):
            wp.launch(shade, depth.shape[0], inputs=[depth])
        """,
}


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("installed") / "softsim"
    folder.mkdir()
    for name, text in PACKAGE.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    return folder


def _by_file(findings: list[dict]) -> dict[str, list[tuple]]:
    found: dict[str, list[tuple]] = {}
    for f in findings:
        context = f.get("differentiation_context") or {}
        found.setdefault(str(Path(f["filename"]).resolve()), []).append(
            (f["location"]["row"], f["code"], f["message"], context.get("state"), context.get("reason")))
    return found


def _assert_alone_as_together(folder: Path, tmp_path: Path, capsys) -> list[dict]:
    together = report(folder, tmp_path)
    by_file = _by_file(together)
    for path in sorted(folder.glob("*.py")):
        alone = _by_file(report(path, tmp_path)).get(str(path.resolve()), [])
        assert alone == by_file.get(str(path.resolve()), []), path.name
    for finding in together:  # explain names the context the project run gave
        context = finding["differentiation_context"]
        warp_lint(["explain", "--no-cache", f"{finding['filename']}:{finding['location']['row']}"])
        assert f"): {context['state']}\n  because {context['reason']}" in capsys.readouterr().out
    return together


def test_a_file_of_an_installed_package_linted_alone_answers_as_the_package(package, tmp_path, capsys):
    together = _assert_alone_as_together(package, tmp_path, capsys)
    # The differentiated kernel is reported from kernels.py alone too. The renderer's kernel and the
    # public helper are public (users may differentiate them: not reported by default); the private
    # helper is unreachable.
    assert sorted((Path(f["filename"]).name, f["location"]["row"], f["code"], f["differentiation_context"]["state"])
                  for f in together) == [("kernels.py", 7, "WL102", "differentiated")]
    warp_lint(["explain", "--no-cache", str(package / "_internal.py") + ":5"])
    out = capsys.readouterr().out
    assert "unreachable\n  because no kernel of the project calls it, and it is not public API" in out
    warp_lint(["explain", "--no-cache", str(package / "helpers.py") + ":5"])
    assert "public\n  because no kernel of the project calls it; it is public API" in capsys.readouterr().out
    shade = next(n for n, text in enumerate((package / "kernels.py").read_text().splitlines(), 1) if "def shade(" in text)
    warp_lint(["explain", "--no-cache", f"{package / 'kernels.py'}:{shade}"])
    assert "`render` is public API and launches it" in capsys.readouterr().out


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_file_of_a_program_linted_alone_answers_as_its_folder(name, folders, tmp_path, capsys):
    _assert_alone_as_together(folders[name], tmp_path, capsys)


def test_a_loose_folder_holds_its_scripts_and_the_packages_below_it(tmp_path):
    """No marker file and no package: the project is what a script there can import."""
    from warp_lint.project.layout import find_root, project_files

    for name in ("train.py", "pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/mod.py", "runs/old/train.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("import warp as wp\n")
    root = find_root(tmp_path / "train.py")
    assert root.path == tmp_path.resolve() and not root.marked
    assert sorted(p.relative_to(tmp_path.resolve()).as_posix() for p in project_files(root)) == [
        "pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/mod.py", "train.py"]


def test_the_summary_counts_the_forward_only_findings_it_leaves_out(folders, tmp_path, capsys):
    folder = folders["scripts"]
    warp_lint(["check", "--no-cache", str(folder)])
    assert capsys.readouterr().out.endswith(
        "All checks passed!\n1 finding in code the project does not differentiate (public API, forward-only,"
        " unreachable) is not shown: `--report-contexts all` shows it, `warp-lint explain PATH:LINE` says why.\n")
    warp_lint(["check", "--no-cache", "--report-forward-only", "--output-format", "concise", str(folder)])
    out = capsys.readouterr().out
    assert "train.py:14:5: WL102" in out and "not shown" not in out
    # A finding its author suppressed is not counted as hidden.
    copy = tmp_path / "scripts"
    copy.mkdir()
    for path in folder.iterdir():
        text = path.read_text()
        (copy / path.name).write_text(text.replace("* x[i]\n", "* x[i]  # noqa: WL102\n") if path.name == "train.py"
                                      else text)
    warp_lint(["check", "--no-cache", str(copy)])
    assert capsys.readouterr().out == "All checks passed!\n"


def test_module_options_set_in_a_main_block_disable_the_modules_kernels(tmp_path, capsys):
    """Warp reads module options when it builds the module, at the first launch: a setting in the
    `__main__` block applies to every kernel of the module run as a script."""
    folder = write_program(tmp_path / "script", {"sim.py": """
        import warp as wp


        @wp.kernel
        def square_in_place(x: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = x[i] * x[i]


        def run(x, loss):
            tape = wp.Tape()
            with tape:
                wp.launch(square_in_place, x.shape[0], inputs=[x])
            tape.backward(loss)


        if __name__ == "__main__":
            wp.set_module_options({"enable_backward": False})
            run(wp.ones(4, dtype=float, requires_grad=True), None)
        """})
    assert findings(folder, tmp_path) == []
    warp_lint(["explain", "--no-cache", str(folder / "sim.py") + ":5"])
    assert "forward-only\n  because backward is disabled: `wp.set_module_options` on line 18" in capsys.readouterr().out


CHECKS = {
    "test_checks.py": """
        import warp as wp


        @wp.kernel
        def power(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            s = float(1.0)
            for k in range(i + 2):
                s = s * x[i]  # expect: WL104
            y[i] = s


        @wp.kernel
        def double(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = 2.0 * x[i]


        def _tape_gradient(kernel, values):
            x = wp.array(values, dtype=float, requires_grad=True)
            y = wp.zeros_like(x)
            tape = wp.Tape()
            with tape:
                wp.launch(kernel, x.shape[0], inputs=[x], outputs=[y])
            tape.backward(grads={y: wp.ones_like(y)})
            return x.grad.numpy()


        def test_gradients():
            cases = (("power", power), ("double", double))
            for i, (name, kernel) in enumerate(cases):
                _tape_gradient(kernel, [1.0, 2.0])
        """,
    "test_hash.py": """
        import warp as wp


        def test_module_hash():
            @wp.kernel
            def square_in_place(a: wp.array(dtype=float)):
                a[0] = a[0] * a[0]

            assert square_in_place.module.hash_module()
        """,
}


def test_a_wrapper_launch_runs_what_its_callers_loop_over_and_nothing_else(tmp_path, capsys):
    """`_tape_gradient(kernel, x)` under `for i, (name, kernel) in enumerate(cases)` with `cases` a
    local tuple: the wrapper's recorded launch runs `power` and `double`, named, so it cannot run a
    kernel another test makes and only reads attributes of (`square_in_place.module`)."""
    folder = write_program(tmp_path / "checks", CHECKS)
    assert findings(folder, tmp_path) == expected(folder)
    warp_lint(["explain", "--no-cache", str(folder / "test_checks.py") + ":9"])
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(": differentiated") and "recorded on `tape`" in out, out
    warp_lint(["explain", "--no-cache", str(folder / "test_hash.py") + ":7"])
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(": unreachable"), out
