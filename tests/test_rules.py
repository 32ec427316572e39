"""Every rule's examples are its tests; its docs have the fixed sections; the catalogue packages."""

from __future__ import annotations

import re

from pathlib import Path

import pytest

from warp_lint.config import tomllib
from warp_lint.registry import all_rules, select_rules
from warp_lint.rule import REQUIRED_SECTIONS
from warp_lint.testing import check_examples, example_cases, fix_code, lint_code, snippet

ROOT = Path(__file__).resolve().parents[1]
RULES = list(all_rules().values())


@pytest.mark.parametrize("case", example_cases(), ids=lambda case: case.id)
def test_example(case):
    example = (case.rule.VALID if case.kind == "VALID" else case.rule.INVALID)[case.index]
    found = [f for f in lint_code(example.code, select=[case.rule.code], target=example.target or "")]
    if case.kind == "VALID":
        assert found == [], [f.message for f in found]
        return
    assert found, f"{case.id} reported nothing"
    assert {f.code for f in found} == {case.rule.code}
    if example.fixed is not None:
        fixed = fix_code(example.code, select=[case.rule.code], target=example.target or "", unsafe=True)
        assert fixed == snippet(example.fixed)
        assert not [f for f in lint_code(fixed, select=[case.rule.code], target=example.target or "") if f.fix]


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_rule_shape(rule):
    assert re.fullmatch(r"WL[1-4]\d\d", rule.code), "code policy: WL1xx kernel, WL2xx host, WL3xx API, WL4xx torch"
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    assert rule.INVALID and rule.VALID, "every rule has good and bad examples"
    missing = [s for s in REQUIRED_SECTIONS if s not in rule.sections()]
    assert not missing, f"{rule.code} docs lack sections {missing}"
    docs = rule.docs()
    assert "## Example" in docs and "## Use instead" in docs
    assert check_examples(rule) == []


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_rule_without_fixed_example_never_fixes(rule):
    if rule.fixable():
        return
    for example in rule.INVALID:
        for finding in lint_code(example.code, select=[rule.code], target=example.target or ""):
            assert finding.fix is None, f"{rule.code} claims no fix but emitted one"


def test_rules_folder_is_flat_and_every_module_is_one_rule():
    modules = sorted(p.stem for p in (ROOT / "rules").glob("*.py") if p.stem != "__init__")
    assert not [p for p in (ROOT / "rules").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert len(modules) == len(all_rules())
    for module in modules:
        assert module.startswith(("wl1", "wl2", "wl3", "wl4")), module
        text = (ROOT / "rules" / f"{module}.py").read_text()
        assert "from rules" not in text and "import rules" not in text, "rules import only warp_lint"


def test_every_package_folder_is_listed_in_pyproject():
    """setuptools silently drops a subpackage missing from `packages`."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "warp_lint").rglob("__init__.py")}
    assert on_disk <= listed, f"add {sorted(on_disk - listed)} to [tool.setuptools] packages"
    assert config["package-dir"] == {"warp_lint.rules": "rules"}


def test_advice_rules_are_opt_in_as_in_ruffs_default_selection():
    def codes(select=None, ignore=(), extend=()):
        return {rule.code for rule in select_rules(select, list(ignore), list(extend))}

    opt_in = {code for code, rule in all_rules().items() if not rule.default}
    assert "WL303" in opt_in and "WL201" not in opt_in
    assert codes() == set(all_rules()) - opt_in
    assert "WL303" in codes(extend=["WL303"]) and "WL303" in codes(["WL3"]) and "WL303" in codes(["ALL"])
    assert not codes(ignore=["WL"])  # any ignore prefix beats the default selection
    assert codes(ignore=["WL1"], extend=["WL303"]) == {c for c in codes() if not c.startswith("WL1")} | {"WL303"}
    # The gradcheck advice stays out of a default run and comes back when asked for.
    gradcheck = """
        import warp as wp

        def test_square(kernel, x, y):
            assert wp.autograd.gradcheck(kernel, dim=3, inputs=[x], outputs=[y])
        """
    assert [f.code for f in lint_code(gradcheck, select=sorted(codes()))] == []
    assert [f.code for f in lint_code(gradcheck, select=["WL303"])] == ["WL303"]


def test_rule_pages_are_generated_from_the_rules():
    """Regenerate with: python -m warp_lint.rule_pages docs/rules"""
    from warp_lint.rule_pages import pages

    folder = ROOT / "docs" / "rules"
    expected = pages()
    stale = [name for name, text in expected.items()
             if not (folder / name).exists() or (folder / name).read_text(encoding="utf-8") != text]
    extra = sorted(p.name for p in folder.glob("*.md") if p.name not in expected)
    assert not stale and not extra, f"run `python -m warp_lint.rule_pages docs/rules` (stale: {stale}, extra: {extra})"


def test_a_component_write_is_named_as_written():
    code = """
import warp as wp


@wp.kernel
def by_index(x: wp.array(dtype=float), n: int, out: wp.array(dtype=wp.vec3)):
    v = wp.vec3(0.0)
    for k in range(n):
        v[k] = v[k] * x[k]
    out[0] = v


@wp.kernel
def by_name(x: wp.array(dtype=float), n: int, out: wp.array(dtype=wp.vec3)):
    v = wp.vec3(0.0)
    for k in range(n):
        v.x = v.x * x[k]
    out[0] = v


@wp.kernel
def by_slice(x: wp.array(dtype=wp.mat33), out: wp.array(dtype=float)):
    z = x[0]
    z[0, :2] = 2.0 * z[0, :2]
    z[:2, 1:] = z[:2, 1:] * 2.0
    out[0] = wp.trace(z)
"""
    messages = [f.message for f in lint_code(code, select=["WL103"])]
    assert any(m.startswith("`v[k]`") for m in messages), messages
    assert any(m.startswith("`v.x`") for m in messages), messages
    assert any(m.startswith("`z[0, :2]`") for m in messages), messages
    assert any(m.startswith("`z[:2, 1:]`") for m in messages), messages


def test_the_dynamic_loop_fix_is_one_that_applies_to_the_loop():
    """A running maximum keeps its index; a product over a runtime count keeps each pass in an
    array (no `+=` or unrolling advice); a constant count over `max_unroll` is told to raise it, and
    raising it makes the loop static (no finding)."""
    running_max = lint_code("""
        import warp as wp

        @wp.kernel
        def largest(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
            best = float(-1.0e30)
            for j in range(n):
                best = wp.max(best, x[j] * x[j])
            out[0] = best * best
        """, select=["WL104"])
    assert len(running_max) == 1 and "index (or the arguments) of the running extreme" in running_max[0].message
    assert "+=" not in running_max[0].message and "wp.static" not in running_max[0].message
    power = """
        import warp as wp
        {options}
        @wp.kernel
        def power(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            s = float(1.0)
            for k in range(20):
                s = s * x[i]
            y[i] = s
        """
    (finding,) = lint_code(power.format(options=""), select=["WL104"])
    assert "own array slot" in finding.message and "raise the module's `max_unroll`" in finding.message
    assert lint_code(power.format(options='wp.set_module_options({"max_unroll": 32})'), select=["WL104"]) == []


def test_a_carried_value_compared_through_a_call_is_named_with_its_test():
    """`wp.dot(v, normal) < 0.0` passes no gradient back through the dot: the value is needed for
    the branch it decides, and the message says so rather than blaming `wp.dot`."""
    code = """
import warp as wp


@wp.kernel
def bounce(x: wp.array(dtype=wp.vec3), n: int, normal: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    v = x[i]
    for k in range(n):
        if wp.dot(v, normal[i]) < 0.0:
            v = v - 2.0 * normal[i]
        v = v + x[i]
    out[i] = v
"""
    (finding,) = lint_code(code, select=["WL104"])
    assert "previous pass is compared in `wp.dot(v, normal[i]) < 0.0`" in finding.message, finding.message


def test_a_helper_argument_is_used_as_the_helper_uses_its_parameter():
    """A carried value passed to a `@wp.func` of the file is used there as that helper uses the
    parameter: compared only (`if d >= best:`), it is a comparison (named so); not used on the way
    to any result, it is not needed at all; used in the result, it is needed as a value."""
    code = """
import warp as wp


@wp.func
def helper(d: float, best: float):
    BODY


@wp.kernel
def scan(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    i = wp.tid()
    best = float(1.0e10)
    for j in range(n):
        best = wp.min(best, helper(x[j] * x[j], best))
    out[i] = best
"""
    compared = "if d >= best:\n        return float(1.0e10)\n    return d"
    (finding,) = lint_code(code.replace("BODY", compared), select=["WL104"])
    assert "passed to `wp.min`" in finding.message  # its own update's use comes first
    only_compared = code.replace("BODY", compared).replace("best = wp.min(best, helper(x[j] * x[j], best))",
                                                            "c = helper(x[j] * x[j], best)\n        if c < 0.5:\n            best = x[j]")
    (finding,) = lint_code(only_compared, select=["WL104"])
    assert "compared in `helper`" in finding.message, finding.message
    unused = code.replace("BODY", "return d * 2.0").replace("best = wp.min(best, helper(x[j] * x[j], best))",
                                                            "best = helper(x[j] * x[j], best)")
    assert lint_code(unused, select=["WL104"]) == []  # `best` passes nothing into the helper's result
    used = code.replace("BODY", "return d * best").replace("best = wp.min(best, helper(x[j] * x[j], best))",
                                                          "best = helper(x[j] * x[j], best)")
    (finding,) = lint_code(used, select=["WL104"])
    assert "passed to `helper`" in finding.message, finding.message


def test_a_component_accumulated_in_a_dynamic_loop_is_told_to_keep_each_pass():
    """An accumulator's component read and written in each pass (a Gauss-Seidel sweep's clamped
    impulse): unrolling alone would not do, each pass's value needs its own slot."""
    code = """
import warp as wp


@wp.kernel
def sweep(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    acc = wp.vec4()
    for it in range(n):
        for k in range(4):
            acc[k] = wp.max(acc[k] + x[k], 0.0)
    out[0] = acc[0] + acc[1]
"""
    (finding,) = lint_code(code, select=["WL103"])
    assert "is written in each pass of a dynamic loop" in finding.message
    assert "their own array slots (one per thread and pass, `acc[tid, it, k]`)" in finding.message, finding.message


def test_a_carried_value_whose_product_is_only_compared_is_named_as_compared_and_a_func_gets_a_custom_adjoint():
    """`da = wp.dot(g, a)` only decides `if db <= da:`: the dot passes no gradient, so the carried
    `g` is needed for the comparisons it decides, and the message says so (not "passed to
    `wp.dot`"). In a @wp.func, which has no scratch array of its own, the fix is a custom adjoint
    or returning what the loop finds without a gradient; a kernel keeps each pass in an array."""
    code = """
import warp as wp


@wp.func
def search(a: wp.vec3, b: wp.vec3, n: int):
    g = a
    x = a
    for _i in range(n):
        da = wp.dot(g, a)
        db = wp.dot(g, b)
        s = a
        if db <= da:
            s = b
        x = 0.5 * (x + s)
        g = wp.normalize(x)
    return x + g
"""
    (finding,) = lint_code(code, select=["WL104"])
    assert finding.message.startswith("`g` "), finding.message
    assert "used in `da = wp.dot(g, a)`, which is only compared" in finding.message, finding.message
    assert "give this @wp.func a custom adjoint (`@wp.func_grad`)" in finding.message
    assert "history" not in finding.message


def test_a_carried_value_is_named_by_what_it_starts_from():
    """`v` starts from `qd` and is updated with `m` in the loop: it carries both gradients, and the
    message names the one a reader recognises, the value it starts from (not the first by name)."""
    code = """
import warp as wp


@wp.kernel
def settle(m: wp.array(dtype=float), qd: wp.array(dtype=wp.vec3), n: int, out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    v0 = qd[i]
    v = v0
    for k in range(n):
        v = v + m[i] * wp.dot(v, v) * v
    out[i] = v
"""
    (finding,) = lint_code(code, select=["WL104"])
    assert finding.message.startswith("`v` carries the gradient of `qd`"), finding.message
