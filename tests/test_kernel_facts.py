"""`KernelFacts.value_reads`: the array parameters whose read values a kernel's adjoint needs again
when `backward()` replays it. Host rules (WL201, WL211) report an overwrite of an array only
where the earlier reader's kernel needs its values (measured: tests/shapes `WL201-reader`)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from warp_lint.kernel_facts import kernel_facts
from warp_lint.kernels import build_kernel_index
from warp_lint.module_options import build_module_options
from warp_lint.names import WarpNames
from warp_lint.triage import triage

HELPERS = '''
@wp.func
def twice(v: float):
    return 2.0 * v
'''


def facts_of(source: str, name: str = "k"):
    """The facts of the kernel ``name`` defined in ``source``."""
    module = cst.parse_module(source)
    names = WarpNames.from_triage(triage(source, whole_file=True))
    index = build_kernel_index(module, names, build_module_options(module, names))
    (kernel,) = [f for f in index.functions if f.name == name]
    return kernel_facts(kernel, index, names)


def kernel_source(body: str, params: str, helpers: str = "") -> str:
    return f"import warp as wp\n{helpers}\n@wp.kernel\ndef k({params}):\n" + textwrap.indent(textwrap.dedent(body), "    ")


def value_reads(body: str, params: str = "y: wp.array(dtype=float), idx: wp.array(dtype=int), "
                                          "s: float, z: wp.array(dtype=float)") -> set[str]:
    return set(facts_of(kernel_source(body, params, HELPERS)).value_reads)


@pytest.mark.parametrize("body, needed", [
    ("i = wp.tid()\nz[i] = 3.0 * y[i]\n", set()),  # scaled by a constant
    ("i = wp.tid()\nz[i] = s * y[i]\n", set()),  # scaled by a scalar argument: no gradient returned
    ("i = wp.tid()\nv = y[i]\nz[i] = v + v\n", set()),  # through a local, linearly
    ("i = wp.tid()\nwp.atomic_add(z, 0, y[i])\n", set()),  # accumulated
    ("i = wp.tid()\nz[i] = y[i] * y[i]\n", {"y"}),
    ("i = wp.tid()\nv = y[i]\nz[i] = wp.sin(v)\n", {"y"}),  # a nonlinear builtin on a local
    ("i = wp.tid()\nif y[i] > 0.0:\n    z[i] = 1.0\n", {"y"}),  # a branch on the value
    ("i = wp.tid()\nz[i] = y[idx[i]]\n", {"idx"}),  # an index: replayed, it picks another element
    ("i = wp.tid()\nj = idx[i]\nz[j] = y[i]\n", {"idx"}),  # an index through a local
    ("i = wp.tid()\nz[i] = twice(y[i])\n", {"y"}),  # a helper call: its adjoint is not looked into
    ("i = wp.tid()\nz[i] = y[i] * z[i]\n", {"y", "z"}),  # a product of two arrays' values
])
def test_value_reads(body, needed):
    assert value_reads(body) == needed


def test_a_kernel_writing_struct_fields_has_outputs():
    source = textwrap.dedent("""
        import warp as wp

        @wp.struct
        class Contacts:
            point: wp.array(dtype=float)

        @wp.kernel
        def gather(data: Contacts, perm: wp.array(dtype=int), src: wp.array(dtype=float)):
            i = wp.tid()
            data.point[i] = src[perm[i]]
        """)
    assert facts_of(source, "gather").value_reads == {"perm"}
    integer_fields = source.replace("point: wp.array(dtype=float)", "point: wp.array(dtype=int)").replace(
        "src: wp.array(dtype=float)", "src: wp.array(dtype=int)")
    assert facts_of(integer_fields, "gather").value_reads == set()  # integer matches only


def test_a_kernel_without_differentiable_outputs_needs_no_values():
    params = "y: wp.array(dtype=float), flags: wp.array(dtype=int)"
    assert value_reads("i = wp.tid()\nif y[i] * y[i] > 1.0:\n    flags[i] = 1\n", params) == set()
    assert value_reads("i = wp.tid()\nif y[i] * y[i] > 1.0:\n    y[i] = 1.0\n", params) == {"y"}


def gradient_reads(body: str, params: str) -> set[str]:
    return set(facts_of(kernel_source(body, params)).gradient_reads)


@pytest.mark.parametrize("body, passes", [
    ("i = wp.tid()\nz[i] = 3.0 * y[i]\n", {"y"}),
    ("i = wp.tid()\nif y[i] < 1.0:\n    z[i] = 1.0\n", set()),  # compared only: no gradient back
    ("i = wp.tid()\nz[i] = lower[idx[i]]\n", {"lower"}),  # the index array passes none
    ("i = wp.tid()\nif lower[i] < y[i]:\n    z[i] = y[i] * y[i]\n", {"y"}),
])
def test_gradient_reads(body, passes):
    params = "y: wp.array(dtype=float), lower: wp.array(dtype=float), idx: wp.array(dtype=int), z: wp.array(dtype=float)"
    assert gradient_reads(body, params) == passes


def test_a_kernel_without_backward_needs_nothing():
    source = textwrap.dedent("""
        import warp as wp

        @wp.kernel(enable_backward=False)
        def gather(perm: wp.array(dtype=int), src: wp.array(dtype=float), dst: wp.array(dtype=float)):
            i = wp.tid()
            dst[i] = src[perm[i]] * src[perm[i]]
        """)
    facts = facts_of(source, "gather")
    assert facts.value_reads == set() and not facts.differentiable
    assert facts.gradient_reads == {"src"}  # its outputs still depend on `src` (WL205 reports the launch)


GUARDED_PARAMS = "x: wp.array(dtype=float), y: wp.array(dtype=float), w: wp.array(dtype=float), mode: int, flag: bool"


@pytest.mark.parametrize(("body", "literals", "effects"), [
    # an `if` on a parameter: the arm a literal rules out makes no access
    ("if flag:\n    y[i] = x[i]\nelse:\n    x[i] = 0.0\n", {"flag": True}, {"x": {"read"}, "y": {"write"}}),
    ("if flag:\n    y[i] = x[i]\nelse:\n    x[i] = 0.0\n", {"flag": False}, {"x": {"write"}, "y": set()}),
    ("if not flag:\n    y[i] = x[i]\n", {"flag": True}, {"x": set(), "y": set()}),
    # comparisons with an integer, `elif` arms, and both operands of a true `and`
    ("if mode == 1:\n    y[i] = x[i]\nelif mode == 2:\n    x[i] = 1.0\n", {"mode": 2}, {"x": {"write"}, "y": set()}),
    ("if mode != 0 and flag:\n    y[i] = x[i]\n", {"mode": 0}, {"x": set(), "y": set()}),
    # an array passed as None is false; an `or` that is true says nothing of either operand
    ("if w:\n    y[i] = w[i]\n", {"w": None}, {"w": set(), "y": set()}),
    ("if mode == 1 or flag:\n    y[i] = x[i]\n", {"mode": 0}, {"x": {"read"}, "y": {"write"}}),
    # a parameter the kernel rebinds is not what the launch passed
    ("mode = mode + 1\nif mode == 1:\n    y[i] = x[i]\n", {"mode": 0}, {"x": {"read"}, "y": {"write"}}),
    # a value not known leaves every access
    ("if flag:\n    y[i] = x[i]\n", {}, {"x": {"read"}, "y": {"write"}}),
])
def test_effects_of_a_launch_binding_literals(body, literals, effects):
    facts = facts_of(kernel_source("i = wp.tid()\n" + body, GUARDED_PARAMS))
    found = facts.effects_with(literals)
    assert {array: set(found.get(array, ())) for array in effects} == effects


STRUCT_KERNEL = '''import warp as wp

@wp.struct
class Data:
    pose: wp.array(dtype=float)
    point: wp.array(dtype=float)
    saved: wp.array(dtype=float)
    ids: wp.array(dtype=int)

@wp.func
def touch(d: Data, i: int):
    d.point[i] = 0.0

@wp.kernel
def k(data: Data):
    i = wp.tid()
    idx = data.ids[i]
    if data.pose[i] * 2.0 > 1.0:
        return
    data.point[i] = data.saved[idx]
'''


def test_struct_fields_are_read_like_array_parameters():
    """A field read only in a comparison passes no gradient back (`pose`: the gap test of a contact
    match); one copied passes one and needs no value (`saved`); handing the struct whole to a
    helper leaves every field needed."""
    facts = facts_of(STRUCT_KERNEL)
    assert facts.field_reads_known
    assert {f for f in facts.gradient_reads if "." in f} == {"data.saved"}
    assert {f for f in facts.value_reads if "." in f} == {"data.pose", "data.ids"}
    whole = facts_of(STRUCT_KERNEL.replace("    data.point[i] = data.saved[idx]\n",
                                           "    data.point[i] = data.saved[idx]\n    touch(data, i)\n"))
    assert {"data.pose", "data.saved"} <= set(whole.gradient_reads)
