"""Whether a kernel that differentiates a `@wp.func` (or a `@wp.func_native`) calls it, and whether
a tape may record a kernel a factory makes.

newton builds its collision and rendering code this way (`solve = create_solve_mpr(...)`, then
`wp.static(solve.portal_core)(...)` in a kernel with `enable_backward=False`). A finding in such a
func is a claim about a gradient; it stands only where a kernel whose backward runs calls the
func, so the project model follows the factory's result to the kernels that call it. Where it
cannot follow the result, the func's context stays unknown and the finding is reported.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from warp_lint import runner
from warp_lint.engine import FileSettings
from warp_lint.project.contexts import CONTEXTS, DEFAULT_REPORTED
from warp_lint.registry import all_rules

FACTORY = """
import warp as wp

def make_scale(factor: float):
    @wp.func
    def scale_in_place(a: wp.array(dtype=float), i: int):
        a[i] = a[i] * factor

    return scale_in_place
"""

# One factory per way of handing the func on: the findings of each sit on a line of its own.
FACTORIES = FACTORY + """

def make_solver():
    @wp.func
    def solve_core(a: wp.array(dtype=float), i: int):
        a[i] = a[i] * 3.0

    @wp.func
    def solve(a: wp.array(dtype=float), i: int) -> float:
        return a[i]

    solve.core = solve_core
    return solve


def make_pair():
    @wp.func
    def first(a: wp.array(dtype=float), i: int):
        a[i] = a[i] * 5.0

    @wp.func
    def second(a: wp.array(dtype=float), i: int):
        a[i] = a[i] + 1.0

    return first, second
"""


def _settings(report_forward_only: bool):
    reported = frozenset(CONTEXTS) if report_forward_only else DEFAULT_REPORTED

    def settings_for(path: Path) -> FileSettings:
        return dataclasses.replace(FileSettings(tuple(all_rules()), ""), report_contexts=reported)
    return settings_for


def _findings(tmp_path: Path, files: dict[str, str], report_forward_only: bool = False):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'sim'\n")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    results, _ = runner.lint_files([tmp_path / "factories.py"], _settings(report_forward_only))
    return [f for f in results[0].findings if f.code.startswith("WL1")]


def _contexts(tmp_path: Path, files: dict[str, str]) -> dict[str, tuple[str, str]]:
    """The scale func's finding, by the func it is in: (context, why)."""
    return {f.data["kernel"]: (f.data["context"], f.data["context_reason"])
            for f in _findings(tmp_path, files, report_forward_only=True)}



def recorded_launch(kernel: str) -> str:
    """Host code that launches ``kernel`` on a tape and runs its backward pass."""
    return f"""
def run(a, loss):
    tape = wp.Tape()
    with tape:
        wp.launch({kernel}, 3, inputs=[a])
    tape.backward(loss)
"""

DISABLED_CALLER = """
import warp as wp
from factories import make_scale

def build():
    scale = make_scale(2.0)

    @wp.kernel(enable_backward=False)
    def scale_all(a: wp.array(dtype=float)):
        scale(a, wp.tid())

    return scale_all
"""

RECORDED_CALLER = """
import warp as wp
from factories import make_scale

scale = make_scale(2.0)

@wp.kernel
def scale_all(a: wp.array(dtype=float)):
    scale(a, wp.tid())

""" + recorded_launch("scale_all")


def test_a_made_func_called_only_by_kernels_without_backward_is_not_reported(tmp_path):
    files = {"factories.py": FACTORY, "sim.py": DISABLED_CALLER}
    assert _findings(tmp_path, files) == []
    state, why = _contexts(tmp_path, files)["scale_in_place"]
    assert state == "forward-only" and "build.<locals>.scale_all" in why


def test_a_made_func_a_recorded_kernel_calls_is_differentiated(tmp_path):
    """The holder is a module global here: the kernel that calls it is recorded on a tape."""
    state, why = _contexts(tmp_path, {"factories.py": FACTORY, "sim.py": RECORDED_CALLER})["scale_in_place"]
    assert state == "differentiated" and "recorded on `tape`" in why


def test_an_attribute_the_factory_sets_and_a_kernel_picks_with_wp_static(tmp_path):
    caller = """
import warp as wp
from factories import make_solver

def build():
    solver = make_solver()

    @wp.kernel(enable_backward=False)
    def solve_all(a: wp.array(dtype=float)):
        wp.static(solver.core)(a, wp.tid())

    return solve_all
"""
    contexts = _contexts(tmp_path, {"factories.py": FACTORIES, "sim.py": caller})
    assert contexts["solve_core"][0] == "forward-only"


# A factory of the caller's own: its kernel, without backward, calls what it is given.
STEP_FACTORY = """

def make_kernel(step):
    @wp.kernel(enable_backward=False)
    def step_all(a: wp.array(dtype=float)):
        step(a, wp.tid())

    return step_all
"""


def test_a_result_unpacked_and_passed_to_another_factory_is_followed(tmp_path):
    """`first, second = make_pair()`, then `second` handed to a factory whose kernel calls it:
    `first` reaches a recorded kernel, `second` only one without backward."""
    caller = """
import warp as wp
from factories import make_pair
""" + STEP_FACTORY + """
first, second = make_pair()
second_kernel = make_kernel(second)

@wp.kernel
def first_all(a: wp.array(dtype=float)):
    first(a, wp.tid())

""" + recorded_launch("first_all")
    contexts = _contexts(tmp_path, {"factories.py": FACTORIES, "sim.py": caller})
    assert contexts["first"][0] == "differentiated"
    assert contexts["second"][0] == "forward-only"


def test_a_factory_call_passed_straight_to_another_factory_or_indexed_is_followed(tmp_path):
    """`make_kernel(step=make_scale(2.0))`: the parameter's users call what the inner factory made;
    `make_pair()[1]` keeps only the second func, so the first one's users are elsewhere."""
    caller = """
import warp as wp
from factories import make_pair, make_scale
""" + STEP_FACTORY + """
scale_kernel = make_kernel(step=make_scale(2.0))
second = make_pair()[1]

@wp.kernel
def second_all(a: wp.array(dtype=float)):
    second(a, wp.tid())

""" + recorded_launch("second_all")
    contexts = _contexts(tmp_path, {"factories.py": FACTORIES, "sim.py": caller})
    assert contexts["scale_in_place"][0] == "forward-only"
    assert contexts["second"][0] == "differentiated"
    assert contexts["first"] == ("unknown", "no kernel of the project calls it")  # `[1]` does not keep it


def test_a_factory_called_inside_a_kernel_body_is_a_call_of_what_it_makes(tmp_path):
    """`wp.static(make_scale(2.0))(...)` runs the factory when Warp builds the kernel."""
    caller = """
import warp as wp
from factories import make_scale

@wp.kernel
def scale_all(a: wp.array(dtype=float)):
    wp.static(make_scale(2.0))(a, wp.tid())

""" + recorded_launch("scale_all")
    state, why = _contexts(tmp_path, {"factories.py": FACTORY, "sim.py": caller})["scale_in_place"]
    assert state == "differentiated" and "`scale_all` calls it" in why


@pytest.mark.parametrize("holder", [
    "    self.scale = make_scale(2.0)",  # stored on an object: any method could hand it on
    "    scale = make_scale(2.0)\n    REGISTRY.append(scale)",  # passed to something not followed
    "    scale = make_scale(2.0)\n    table = {'scale': scale}",  # put in a container
])
def test_a_result_handed_on_where_the_model_does_not_follow_stays_unknown(tmp_path, holder):
    caller = f"""
import warp as wp
from factories import make_scale

REGISTRY = []

def build(self):
{holder}

    @wp.kernel(enable_backward=False)
    def scale_all(a: wp.array(dtype=float)):
        scale(a, wp.tid())

    return scale_all
"""
    files = {"factories.py": FACTORY, "sim.py": caller}
    assert [f.data["context"] for f in _findings(tmp_path, files)] == ["unknown"]


def test_a_made_func_nothing_calls_stays_unknown(tmp_path):
    """A user of the library may call the factory from a kernel of their own."""
    caller = """
from factories import make_scale

scale = make_scale(2.0)
"""
    files = {"factories.py": FACTORY, "sim.py": caller}
    assert [(f.data["context"], f.data["context_reason"]) for f in _findings(tmp_path, files)] == [
        ("unknown", "no kernel of the project calls it")]


def test_a_func_a_nested_host_function_hands_on_stays_unknown(tmp_path):
    factory = """
import warp as wp

def make_scale(factor: float):
    @wp.func
    def scale_in_place(a: wp.array(dtype=float), i: int):
        a[i] = a[i] * factor

    def register(table):
        table.append(scale_in_place)

    return register
"""
    caller = """
from factories import make_scale

register = make_scale(2.0)
"""
    files = {"factories.py": factory, "sim.py": caller}
    assert [(f.data["context"], f.data["context_reason"]) for f in _findings(tmp_path, files)] == [
        ("unknown", "the factory that makes it hands it on where it is not followed (stored on an object, put in"
                    " a container, passed to a call outside the project)")]


NATIVE = """
import warp as wp

@wp.func_native("out[tid] = x[tid] * x[tid];")
def square_into(x: wp.array(dtype=float), out: wp.array(dtype=float), tid: int): ...

@wp.kernel
def squares(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    square_into(x, out, wp.tid())
"""

FORWARD_DRIVER = """
import warp as wp
from factories import squares

def run(x, out):
    wp.launch(squares, 3, inputs=[x, out])
"""


def test_a_native_func_takes_its_callers_context_as_a_func_does(tmp_path):
    """WL113 (a native without an adjoint) matters only where a kernel's backward runs: here the
    one kernel that calls it is launched outside any tape."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'sim'\n")
    (tmp_path / "factories.py").write_text(NATIVE)
    (tmp_path / "sim.py").write_text(FORWARD_DRIVER)
    reported, _ = runner.lint_files([tmp_path / "factories.py"], _settings(False))
    assert [f.code for f in reported[0].findings] == []
    hidden, _ = runner.lint_files([tmp_path / "factories.py"], _settings(True))
    assert [(f.code, f.data["context"]) for f in hidden[0].findings] == [("WL113", "forward-only")]


# A kernel made per shape, as newton's SVD is: the factory returns an overload of its kernel.
KERNEL_FACTORY = """
import warp as wp
from typing import Any

def make_scale_kernel(length: int):
    @wp.kernel(module="unique")
    def scale_all(a: wp.array(dtype=Any)):
        i = wp.tid()
        a[i] = a[i] * 2.0
{extra}
    return wp.overload(scale_all, [wp.array(dtype=wp.types.vector(length=length, dtype=float))])
"""

# A recorded launch of a kernel the model cannot name: any kernel handed around may be it.
UNRESOLVED_RECORDING = """
import warp as wp

def run_any(kernels, a, loss):
    tape = wp.Tape()
    with tape:
        wp.launch(kernels[0], 3, inputs=[a])
    tape.backward(loss)
"""

HOLDER = """
import warp as wp
from factories import make_scale_kernel

class Scaler:
    def __init__(self):
        self._kernel = make_scale_kernel(3)

    def step(self, a):
        wp.launch(self._kernel, 3, inputs=[a])
"""


def _kernel_contexts(tmp_path: Path, extra: str = "", holder: str = HOLDER, **files: str):
    return _contexts(tmp_path, {"factories.py": KERNEL_FACTORY.format(extra=extra), "sim.py": holder,
                                "driver.py": UNRESOLVED_RECORDING, **files})


def test_a_made_kernel_whose_every_launch_is_outside_tapes_is_forward_only(tmp_path):
    state, why = _kernel_contexts(tmp_path)["scale_all"]
    assert state == "forward-only" and "sim.py:10" in why


def test_a_made_kernel_a_tape_records_through_its_factory_is_differentiated(tmp_path):
    recorded = """
import warp as wp
from factories import make_scale_kernel
""" + recorded_launch("make_scale_kernel(3)")
    assert _kernel_contexts(tmp_path, holder=recorded)["scale_all"][0] == "differentiated"


def test_a_made_kernel_a_tape_records_after_its_factory_ran_is_differentiated(tmp_path):
    """The factory runs before the tape opens, where the recording follows no calls."""
    recorded = """
import warp as wp
from factories import make_scale_kernel

def run(a, loss):
    scale = make_scale_kernel(3)
    tape = wp.Tape()
    with tape:
        wp.launch(scale, 3, inputs=[a])
    tape.backward(loss)
"""
    state, why = _kernel_contexts(tmp_path, holder=recorded)["scale_all"]
    assert state == "differentiated" and "recorded on `tape`" in why


@pytest.mark.parametrize("extra", [
    "    REGISTRY.append(scale_all)",  # the factory hands it on before returning it
    "    table = {'scale': scale_all}",
])
def test_a_made_kernel_its_factory_hands_on_may_be_what_a_tape_records(tmp_path, extra):
    state, why = _kernel_contexts(tmp_path, extra=extra)["scale_all"]
    assert state == "unknown" and "driver.py:7 may run it" in why


@pytest.mark.parametrize("keeper", [
    "KERNELS = [make_scale_kernel(3)]\n",  # a module-level list
    "def kernels():\n    return {'scale': make_scale_kernel(3)}\n",
])
def test_a_made_kernel_kept_where_no_launch_reads_it_may_be_what_a_tape_records(tmp_path, keeper):
    keeper = "import warp as wp\nfrom factories import make_scale_kernel\n\n" + keeper
    state, why = _kernel_contexts(tmp_path, **{"keeper.py": keeper})["scale_all"]
    assert state == "unknown" and "may run it" in why


def test_a_module_kernel_kept_in_a_module_level_list_may_be_what_a_tape_records(tmp_path):
    kernel = """
import warp as wp

@wp.kernel
def scale_all(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = a[i] * 2.0
"""
    launcher = "import warp as wp\nfrom factories import scale_all\n\ndef step(a):\n    wp.launch(scale_all, 3, inputs=[a])\n"
    keeper = "import warp as wp\nfrom factories import scale_all\n\nKERNELS = [scale_all]\n"
    contexts = {"factories.py": kernel, "sim.py": launcher, "driver.py": UNRESOLVED_RECORDING}
    assert _contexts(tmp_path, contexts)["scale_all"][0] == "forward-only"
    assert _contexts(tmp_path, {**contexts, "keeper.py": keeper})["scale_all"][0] == "unknown"


def test_a_kernel_held_on_self_and_launched_on_a_tape_in_a_method_is_not_forward_only(tmp_path):
    """The method is an entry point: no constructor ran before it, so what `self._kernel` holds
    is known only from the class's `__init__`."""
    holder = """
import warp as wp
from factories import make_scale_kernel

class Scaler:
    def __init__(self):
        self._kernel = make_scale_kernel(3)

    def step(self, a, loss):
        tape = wp.Tape()
        with tape:
            wp.launch(self._kernel, 3, inputs=[a])
        tape.backward(loss)
"""
    assert _kernel_contexts(tmp_path, holder=holder)["scale_all"][0] != "forward-only"


HIGHER_ORDER = """
import warp as wp


def make_bound(support):
    @wp.func
    def bound(a: wp.array(dtype=float), i: int):
        support(a, i)
        a[i] = a[i] + 1.0

    @wp.func
    def tight(a: wp.array(dtype=float), i: int):
        bound(a, i)

    bound.tight = tight
    return bound


def make_contact(refiner=None):
    @wp.func
    def probe(a: wp.array(dtype=float), i: int):
        a[i] = a[i] * a[i]

    if refiner is not None:
        bound = refiner(probe)
    result = wp.vec3(0.0)

    @wp.func
    def contact(a: wp.array(dtype=float), i: int):
        wp.static(bound.tight)(a, i)

    contact.bound = bound.tight
    return contact
"""

HIGHER_ORDER_CALLER = """
import warp as wp
from factories import make_bound, make_contact

contact = make_contact(refiner=make_bound)

@wp.kernel{options}
def collide(a: wp.array(dtype=float)):
    contact(a, wp.tid())

""" + recorded_launch("collide")


@pytest.mark.parametrize(("options", "state"), [("(enable_backward=False)", "forward-only"),
                                                ("", "differentiated")])
def test_a_func_handed_to_a_factory_that_arrives_through_a_parameter_is_followed(tmp_path, options, state):
    """`probe` is passed to `refiner`, a parameter the caller gives `make_bound` for; `make_bound`
    makes `tight`, which calls `bound`, which calls `probe` through `support`; `tight` is kept as
    an attribute of the returned `contact` and called from `collide`. The context is the kernel's."""
    files = {"factories.py": HIGHER_ORDER, "sim.py": HIGHER_ORDER_CALLER.format(options=options)}
    assert _contexts(tmp_path, files)["probe"][0] == state


def test_a_factory_passed_where_the_model_does_not_follow_leaves_its_products_unknown(tmp_path):
    """`make_bound` handed to a method: what it makes may be called from anywhere."""
    caller = HIGHER_ORDER_CALLER.format(options="").replace(
        "contact = make_contact(refiner=make_bound)",
        "contact = make_contact()\nregistry = {}\nregistry.setdefault('b', make_bound)\nregistry.get('b').cache(make_bound)")
    assert _contexts(tmp_path, {"factories.py": HIGHER_ORDER, "sim.py": caller})["bound"][0] == "unknown"


SAME_FACTORY = """
import warp as wp


def make_support(inner, centered=False):
    if centered:
        @wp.func
        def support(a: wp.array(dtype=float), i: int):
            v = wp.vec3(a[i])
            v[0] = 0.0
            a[i] = inner(a, i) + v[1]
    else:
        @wp.func
        def support(a: wp.array(dtype=float), i: int):
            a[i] = inner(a, i)

    return support


@wp.func
def base(a: wp.array(dtype=float), i: int) -> float:
    return a[i]


plain = make_support(base)
centered = make_support(plain, centered=True)
"""


@pytest.mark.parametrize(("options", "state"), [("(enable_backward=False)", "forward-only"),
                                                ("", "differentiated")])
def test_products_of_one_factory_calling_each_other_take_the_context_from_outside(tmp_path, options, state):
    """`centered` is made from `plain`, a product of the same factory: the two share a name, and
    the call between them adds nothing to what the kernel outside gives them."""
    caller = f"""
import warp as wp
from factories import centered

@wp.kernel{options}
def collide(a: wp.array(dtype=float)):
    centered(a, wp.tid())

""" + recorded_launch("collide")
    found = _findings(tmp_path, {"factories.py": SAME_FACTORY, "sim.py": caller}, report_forward_only=True)
    assert {f.data["context"] for f in found if f.data.get("kernel") == "support"} == {state}


PATCHING_FACTORY = """
import warp as wp

def register(engine, factor: float):
    @wp.func
    def user_scale(a: wp.array(dtype=float), i: int):
        a[i] = a[i] * factor

    engine.collision.user_scale = user_scale
"""

# The stub the factory's func replaces, and the kernel that calls it: Warp builds the kernel with
# whatever the module holds under that name by then (measured on 1.19: the patched func runs).
ENGINE_COLLISION = """
import warp as wp
{options}

@wp.func
def user_scale(a: wp.array(dtype=float), i: int):
    a[i] = a[i] + 100.0

@wp.kernel
def scale_all(a: wp.array(dtype=float)):
    user_scale(a, wp.tid())
"""


@pytest.mark.parametrize(("options", "launch", "state"), [
    ('wp.set_module_options({"enable_backward": False})', "", "forward-only"),
    ("", recorded_launch("scale_all"), "differentiated"),
])
def test_a_made_func_set_as_a_module_attribute_has_the_callers_of_what_it_replaces(tmp_path, options, launch, state):
    """`engine.collision.user_scale = user_scale`: the made func runs where `collision`'s own
    `user_scale` is called, so its context is that caller's: forward-only in a module without
    backward, differentiated where a tape records the calling kernel."""
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "__init__.py").write_text("")
    files = {"factories.py": PATCHING_FACTORY,
             "engine/collision.py": ENGINE_COLLISION.format(options=options) + launch}
    found, why = _contexts(tmp_path, files)["user_scale"]
    assert found == state and "scale_all" in why


# newton's collision funcs travel far before a kernel calls them: the support functions are made as a
# tuple, and each solver factory unpacks it and hands it on, packed again, to the next (six holders
# between the factory and the kernel here, as there).
DEEP_CHAIN = """
import warp as wp
from factories import make_scale

def make_funcs():
    first = make_scale(2.0)
    second = make_scale(3.0)
    return first, second

def create_outer(funcs=None):
    if funcs is not None:
        first, second = funcs
    else:
        first, second = make_funcs()
    return create_middle(funcs=(first, second))

def create_middle(funcs=None):
    first, second = funcs
    return create_inner(funcs=(first, second))

def create_inner(funcs=None):
    first, second = funcs

    @wp.kernel(enable_backward=BACKWARD)
    def scale_all(a: wp.array(dtype=float)):
        first(a, wp.tid())

    return scale_all

funcs = make_funcs()
scale_all = create_outer(funcs=funcs)

""" + recorded_launch("scale_all")


# With backward on, the kernel itself comes back through three factories to the recorded launch,
# which cannot name it: "it is passed around, and the recorded launch may run it" (reported).
@pytest.mark.parametrize(("backward", "state"), [("False", "forward-only"), ("True", "unknown")])
def test_a_func_handed_through_many_factories_is_followed(tmp_path, backward, state):
    files = {"factories.py": FACTORY, "sim.py": DEEP_CHAIN.replace("BACKWARD", backward)}
    assert _contexts(tmp_path, files)["scale_in_place"][0] == state
