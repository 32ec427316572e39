"""The kernel side of the catalogue (WL105-WL114): examples, version gating, near misses, where each
finding lands, the runtime data it carries, and the kernel-model facts these rules read."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from warp_lint.dataflow import gradient_free
from warp_lint.finding import Applicability
from warp_lint.kernels import build_kernel_index, mutually_exclusive
from warp_lint.module_options import build_module_options
from warp_lint.names import WarpNames
from warp_lint.registry import all_rules
from warp_lint.rule import REQUIRED_SECTIONS
from warp_lint.testing import check_examples, fix_code, lint_code
from warp_lint.triage import triage

AFFECTED = {
    "WL105": "<1.15",
    "WL106": "<1.13",
    "WL107": "",
    "WL108": ">=1.7,<1.17",
    "WL109": "",
    "WL110": "",
    "WL111": "",
    "WL112": "",
    "WL113": "",
    "WL114": "",
}
NAMES = {
    "WL105": "local-struct-field-write",
    "WL106": "array-double-store",
    "WL107": "dynamic-loop-carried-use",
    "WL108": "ternary-array-select",
    "WL109": "where-unselected-nan",
    "WL110": "sqrt-at-zero",
    "WL111": "atomic-counter-index",
    "WL112": "custom-grad-assign",
    "WL113": "func-native-no-adjoint",
    "WL114": "grad-call-in-kernel",
}


def codes(code: str, source: str, target: str = "") -> list[tuple[str, int]]:
    return [(f.code, f.start.line) for f in lint_code(source, select=[code], target=target)]


@pytest.mark.parametrize("code", sorted(AFFECTED))
def test_rule_is_registered_with_its_versions_and_docs(code):
    rule = all_rules()[code]
    assert rule.name == NAMES[code]
    assert rule.affected_versions == AFFECTED[code]
    assert "gradcheck" in rule.runtime_strategy
    sections = rule.sections()
    assert not [s for s in REQUIRED_SECTIONS if s not in sections]
    assert "easured" in sections["Warp versions"] or "easured" in sections["Why is this bad?"]
    assert check_examples(rule) == []
    assert len(rule.VALID) >= 2 and len(rule.INVALID) >= 2


# -- version gating -------------------------------------------------------------------------------
STRUCT_FIELDS = """
    import warp as wp

    @wp.struct
    class Body:
        pos: wp.vec3
        mass: float

    @wp.kernel
    def energy(x: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        b = Body()
        b.pos = x[i]
        b.mass = m[i]
        out[i] = b.mass * wp.dot(b.pos, b.pos)
    """
DOUBLE_STORE = """
    import warp as wp

    @wp.kernel
    def twice(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        y[i] = x[i] * 2.0
        y[i] = x[i] * x[i]
    """
TERNARY = """
    import warp as wp

    @wp.kernel
    def pick(a: wp.array(dtype=float), t: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] / t[i] if flag else a[i]
    """


@pytest.mark.parametrize("source, code, affected, fixed", [
    (STRUCT_FIELDS, "WL105", ["==1.13.0", "==1.14.0", "<1.15"], ["==1.15.0", "==1.16.0", ">=1.15"]),
    (DOUBLE_STORE, "WL106", ["==1.4.2", "==1.12.1"], ["==1.13.0", "==1.19.0"]),
    (TERNARY, "WL108", ["==1.7.0", "==1.16.0"], ["==1.6.2", "==1.17.0", "==1.19.0"]),
])
def test_target_version_decides(source, code, affected, fixed):
    for target in affected:
        assert codes(code, source, target), target
    for target in fixed:
        assert not codes(code, source, target), target


def test_version_in_message():
    (finding,) = [f for f in lint_code(DOUBLE_STORE, select=["WL106"])]
    assert finding.message.endswith("[Warp <1.13]")
    assert finding.affected_versions == "<1.13"


# -- where each finding lands -----------------------------------------------------------------------
def test_wl105_reports_each_field_assignment():
    assert codes("WL105", STRUCT_FIELDS) == [("WL105", 12), ("WL105", 13)]


def test_wl106_reports_the_second_store():
    assert codes("WL106", DOUBLE_STORE) == [("WL106", 7)]


def test_wl107_reports_the_use_after_the_loop():
    source = """
        import warp as wp

        @wp.func
        def weighted_mean(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int):
            s = float(0.0)
            norm = float(0.0)
            for j in range(n):
                s += x[j] * w[j]
                norm += w[j]
            l = s / norm
            return l
        """
    assert codes("WL107", source) == [("WL107", 10)]


def test_wl111_reports_the_atomic_call():
    source = """
        import warp as wp

        @wp.kernel
        def compact(x: wp.array(dtype=float), counter: wp.array(dtype=int), out: wp.array(dtype=float)):
            i = wp.tid()
            slot = wp.atomic_add(counter, 0, 1)
            out[slot] = x[i]
        """
    (finding,) = lint_code(source, select=["WL111"])
    assert (finding.start.line, finding.start.column) == (6, 12)


def test_wl113_reports_the_decorator_and_wl114_the_call():
    native = all_rules()["WL113"].INVALID[0].code
    (finding,) = lint_code(native, select=["WL113"])
    assert (finding.start.line, finding.start.column) == (3, 1)
    grad = all_rules()["WL114"].INVALID[0].code
    (finding,) = lint_code(grad, select=["WL114"])
    assert (finding.start.line, finding.start.column) == (10, 14)
    assert finding.data["kernel"] == "slope"


# -- runtime data ---------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["WL109", "WL110"])
def test_value_dependent_rules_ask_for_a_nonfinite_check(code):
    for example in all_rules()[code].INVALID:
        for finding in lint_code(example.code, select=[code]):
            assert finding.data["check_nonfinite"] is True
            assert "value-dependent" in finding.message
            assert finding.data["strategy"] == ["gradcheck"]


@pytest.mark.parametrize("code", ["WL105", "WL106", "WL107", "WL108", "WL111", "WL113", "WL114"])
def test_other_rules_carry_kernel_data_without_nonfinite(code):
    rule = all_rules()[code]
    for example in rule.INVALID:
        for finding in lint_code(example.code, select=[code], target=example.target or ""):
            assert "check_nonfinite" not in finding.data
            assert finding.data["kernel"]
            assert finding.data["strategy"] == ["gradcheck"]


def test_wl112_data_names_the_calling_kernel():
    source = """
        import warp as wp

        @wp.func
        def square(x: float):
            return x * x

        @wp.func_grad(square)
        def adj_square(x: float, adj_ret: float):
            wp.adjoint[x] = 2.0 * x * adj_ret

        @wp.kernel
        def run(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            v = x[i]
            out[i] = square(v) + v * v
        """
    (finding,) = lint_code(source, select=["WL112"])
    assert finding.data["kernel"] == "run"
    assert finding.fix.applicability is Applicability.UNSAFE


# -- near misses ----------------------------------------------------------------------------------
NEAR_MISSES = {
    "WL106": [
        # a read between the stores (WL102's business)
        """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), y: wp.array(dtype=float), z: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = x[i]
            z[i] = y[i] * 2.0
            y[i] = x[i] * x[i]
        """,
        # the index changes between the stores
        """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            j = wp.tid() * 2
            y[j] = x[0]
            j = j + 1
            y[j] = x[1]
        """,
        # an early return skips the second store
        """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), flags: wp.array(dtype=int), y: wp.array(dtype=float)):
            i = wp.tid()
            if flags[i] != 0:
                y[i] = x[i]
                return
            y[i] = x[i] * x[i]
        """,
        # different components
        """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec2)):
            i = wp.tid()
            y[i][0] = x[i]
            y[i][1] = x[i] * x[i]
        """,
    ],
    "WL107": [
        # an assertion on a counter after a while loop (`s * float(i)` after it is WL107's: measured
        # AD 0 where finite differences give 4 on Warp 1.19)
        """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            i = int(0)
            s = float(0.0)
            for j in range(n):
                s += x[j]
                i += 1
            wp.expect_eq(i, n)
            out[0] = s
        """,
        # products with a kernel's scalar argument and a module constant: no adjoint reads the stale value
        """
        import warp as wp

        DT = 0.01

        @wp.kernel
        def k(x: wp.array(dtype=float), n: int, scale: float, out: wp.array(dtype=float)):
            s = float(0.0)
            for j in range(n):
                s += x[j]
            out[0] = s * scale * DT / float(n)
        """,
        # the local is reset after the loop
        """
        import warp as wp

        @wp.func
        def k(x: wp.array(dtype=float), n: int):
            s = float(0.0)
            for j in range(n):
                s += x[j]
            s = x[0]
            return wp.sqrt(s)
        """,
    ],
    "WL108": [
        """
        import warp as wp

        @wp.kernel
        def k(a: wp.array(dtype=float), flag: wp.bool, out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = a[i] * 2.0 if flag else -a[i]
        """,
    ],
    "WL109": [
        """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = wp.where(x[i] != 0.0, 1.0 / wp.max(x[i], 1.0e-6), x[i] / 2.0)
        """,
    ],
    "WL110": [
        # an early exit tests the squared norm
        """
        import warp as wp

        @wp.func
        def k(d: wp.vec3):
            d2 = wp.dot(d, d)
            if d2 == 0.0:
                return 0.0
            return wp.sqrt(d2)
        """,
        """
        import warp as wp

        @wp.func
        def k(d: wp.vec3, e: wp.vec3):
            return wp.sqrt(wp.dot(d, e)) + wp.pow(wp.dot(d, d), 2.0) + wp.length(d) + wp.length(wp.normalize(e))
        """,
    ],
    "WL111": [
        # the result is a value, not an index
        """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), counter: wp.array(dtype=int), out: wp.array(dtype=float)):
            i = wp.tid()
            old = wp.atomic_add(counter, 0, 1)
            out[i] = x[i] * float(old)
        """,
    ],
    "WL112": [
        """
        import warp as wp

        @wp.func
        def f(x: float):
            return x * x

        @wp.func_grad(f)
        def adj_f(x: float, adj_ret: float):
            wp.adjoint[x] -= -2.0 * x * adj_ret
        """,
    ],
    "WL113": [
        # adj_snippet given positionally
        """
        import warp as wp

        @wp.func_native("out[tid] = x[tid];", "adj_x[tid] += adj_out[tid];")
        def copy(x: wp.array(dtype=float), out: wp.array(dtype=float), tid: int): ...

        @wp.kernel
        def k(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            copy(x, out, wp.tid())
        """,
        # not called in this file
        """
        import warp as wp

        @wp.func_native("out[tid] = x[tid];")
        def copy(x: wp.array(dtype=float), out: wp.array(dtype=float), tid: int): ...
        """,
    ],
    "WL114": [
        """
        import warp as wp

        wp.set_module_options({"enable_backward": False})

        @wp.func
        def cube(x: float):
            return x * x * x

        @wp.kernel
        def k(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = wp.grad(cube)(x[i])
        """,
    ],
    "WL105": [
        # a struct parameter, not a local instance; and a local from an array element
        """
        import warp as wp

        @wp.struct
        class Body:
            pos: wp.vec3

        @wp.func
        def move(b: Body, x: wp.vec3):
            b.pos = x
            return b
        """,
    ],
}


@pytest.mark.parametrize("code, index", [(c, i) for c, sources in NEAR_MISSES.items() for i in range(len(sources))])
def test_near_misses_are_not_reported(code, index):
    assert codes(code, NEAR_MISSES[code][index], target=">=0") == []


def test_wl106_store_in_loop_with_a_read_in_the_loop_is_not_reported():
    source = """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), y: wp.array(dtype=float), n: int):
            i = wp.tid()
            for j in range(n):
                y[i] = x[j]
                y[i] = y[i] * 0.0 + x[j]
        """
    assert codes("WL106", source, target="<1.13") == []


def test_wl107_product_with_a_gradient_carrying_operand_is_reported():
    # measured: AD gives 0 for c (finite differences 4.55) on 1.19.0
    source = """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), c: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            s = float(0.0)
            for j in range(n):
                s = s + x[j]
            out[0] = s * c[0]
        """
    assert codes("WL107", source) == [("WL107", 8)]


def test_wl107_loop_with_continue_is_only_reported_before_1_17():
    source = """
        import warp as wp

        @wp.func
        def k(x: wp.array(dtype=float)):
            s = float(0.0)
            for j in range(4):
                if x[j] < 0.0:
                    continue
                s += x[j]
            return wp.sqrt(s)
        """
    assert codes("WL107", source, target="<1.17")
    assert not codes("WL107", source, target=">=1.17")


def test_wl110_follows_a_local_and_suggests_length():
    source = """
        import warp as wp

        @wp.func
        def k(a: wp.vec3, b: wp.vec3):
            d = a - b
            q = wp.length_sq(d)
            return wp.sqrt(q)
        """
    (finding,) = lint_code(source, select=["WL110"])
    assert "`wp.length(d)`" in finding.message


def test_wl111_skips_a_func_with_a_replay_but_not_its_kernel_use():
    valid = all_rules()["WL111"].VALID[0].code
    assert codes("WL111", valid) == []


def test_wl112_fix_is_unsafe_and_not_offered_for_repeated_assignment():
    source = """
        import warp as wp

        @wp.func
        def f(x: float):
            return x * x

        @wp.func_grad(f)
        def adj_f(x: float, adj_ret: float):
            wp.adjoint[x] = 2.0 * x * adj_ret
            wp.adjoint[x] = wp.adjoint[x] * 0.5
        """
    findings = lint_code(source, select=["WL112"])
    assert [f.start.line for f in findings] == [9]
    assert findings[0].fix is None
    fixable = all_rules()["WL112"].INVALID[0].code
    assert fix_code(fixable, select=["WL112"]).strip() == textwrap.dedent(fixable).strip()  # unsafe: not by default
    assert "+=" in fix_code(fixable, select=["WL112"], unsafe=True)


# -- the kernel model facts these rules read --------------------------------------------------------
def _index(source: str):
    text = textwrap.dedent(source)
    triaged = triage(text, whole_file=True)
    module = cst.parse_module(text)
    names = WarpNames.from_triage(triaged)
    return build_kernel_index(module, names, build_module_options(module, names)), names


def test_model_records_calls_conditionals_statements_and_branches():
    index, names = _index("""
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), y: wp.array(dtype=float), n: int):
            i = wp.tid()
            if x[i] > 0.0:
                y[i] = wp.sqrt(x[i])
            else:
                y[i] = x[i] if n > 0 else 0.0
            for j in range(n):
                y[i] += wp.exp(x[j])
            return
        """)
    (kernel,) = index.functions
    assert [c.name for c in kernel.calls] == ["warp.tid", "warp.sqrt", "range", "warp.exp"]
    assert len(kernel.conditionals) == 1
    assert [type(s.node).__name__ for s in kernel.statements] == ["Assign", "Assign", "Assign", "AugAssign",
                                                                  "Return"]
    stores = [a for a in kernel.accesses if a.kind == "write"]
    assert len(stores) == 2 and mutually_exclusive(stores[0].branches, stores[1].branches)
    (accumulate,) = [a for a in kernel.accesses if a.kind == "accumulate"]
    assert accumulate.loops == (kernel.loops[0],) and accumulate.branches == ()
    exp = kernel.calls[-1]
    assert exp.loops == (kernel.loops[0],)


def test_model_records_adjoint_writes_and_decorator_args():
    index, names = _index("""
        import warp as wp

        @wp.func
        def f(x: float):
            return x * x

        @wp.func_grad(f)
        def adj_f(x: float, adj_ret: float):
            wp.adjoint[x] = 2.0 * x * adj_ret
            wp.adjoint[x] += 1.0
        """)
    grad = index.by_name("adj_f")[0]
    assert [(w.name, w.operator) for w in grad.adjoint_writes] == [("x", None), ("x", "+=")]
    assert [a.value.value for a in grad.decorator_args] == ["f"]


def test_gradient_free():
    index, names = _index("""
        import warp as wp

        N = 4

        @wp.kernel
        def k(x: wp.array(dtype=float), n: int, s: float):
            i = wp.tid()
            c = float(n) * 2.0 + s
            v = x[i] * c
            return
        """)
    (kernel,) = index.functions
    values = {b.name: b.value for b in kernel.bindings}
    assert gradient_free(kernel, values["c"], names)
    assert not gradient_free(kernel, values["v"], names)
    assert gradient_free(kernel, cst.parse_expression("N * x.shape[0] + i"), names)
