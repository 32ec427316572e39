"""Property-based tests: kernels generated from a small grammar of Warp statements, with and
without planted hazards. No crash; planted hazards found; deterministic; independent of the order
and number of files and of parallelism; fixes re-parse and converge."""

from __future__ import annotations

import ast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warp_lint.engine import FileSettings
from warp_lint.fixer import applicable
from warp_lint.registry import all_rules
from warp_lint.runner import lint_files
from warp_lint.testing import fix_code, lint_code

HEADER = """import warp as wp


@wp.kernel
def generated(x: wp.array(dtype=float), x3: wp.array(dtype=wp.vec3), n: int,
              out: wp.array(dtype=float), out3: wp.array(dtype=wp.vec3), a: wp.array(dtype=float)):
    i = wp.tid()
    t = float(0.0)
    s = float(1.0)
    p = float(1.0)
"""

values = st.sampled_from(["x[i]", "1.5", "t", "x[i] * 2.0", "wp.sin(x[i])", "t + x[i]", "-x[i]"])

SAFE = [
    st.builds("    out[i] = {}\n".format, values),
    st.builds("    t = {} + 1.0\n".format, values),
    st.builds("    out[i] += {}\n".format, values),
    st.builds("    wp.atomic_add(out, 0, {})\n".format, values),
    st.builds("    out3[i] = wp.vec3({}, {}, {})\n".format, values, values, values),
    st.builds("    for j in range(n):\n        s += {}\n".format, values),
    # A product on its own local: after a dynamic loop accumulated `s`, `s * ...` is WL107's hazard.
    st.builds("    for j in range(4):\n        p = p * {}\n".format, values),
    st.builds("    if x[i] > 0.5:\n        t = {}\n".format, values),
]
HAZARDS = {
    "WL102": st.builds("    a[i] = a[i] * x[i] + {}\n".format, values),
    "WL103": st.just("    v = x3[i]\n    v.y = 0.0\n    out3[i] = v\n"),
    "WL104": st.builds("    for j in range(n):\n        s = s * x[i] + {}\n    out[i] = s\n".format, values),
    "WL101": st.builds("    out3[i].x = {}\n    out3[i].y = {}\n    out3[i].z = {}\n".format, values, values, values),
}
# The same statements where the value carries no gradient (it never reaches an output, or it is
# carried only linearly): activity and linearity make them no hazard (measured on Warp 1.19).
INACTIVE = {
    "WL102": st.builds("    a[i] = a[i] * 0.5 + {}\n".format, values),  # linear: only before 1.13
    "WL103": st.just("    v = x3[i]\n    v.y = 0.0\n"),  # `v` reaches no output
    "WL104": st.builds("    for j in range(n):\n        s = s * 0.5 + {}\n    out[i] = s\n".format, values),
}
# Warp 1.13.x: WL101 (<1.14) still applies, the double-store and additive-update hazards (<1.13) do not,
# so the "safe" grammar may store an element twice.
TARGET = ">=1.13,<1.14"
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def kernels(draw, planted: str | None = None):
    statements = draw(st.lists(st.one_of(SAFE), min_size=0, max_size=6))
    hazard_line = None
    if planted:
        position = draw(st.integers(0, len(statements)))
        before = HEADER + "".join(statements[:position])
        hazard_line = before.count("\n") + 1
        statements.insert(position, draw(HAZARDS[planted]))
    return HEADER + "".join(statements), hazard_line


@SETTINGS
@given(kernels())
def test_generated_safe_kernels_give_no_kernel_findings(case):
    code, _ = case
    found = lint_code(code, target=TARGET)
    assert found == [], [(f.code, f.start.line, f.message) for f in found]


@SETTINGS
@given(st.sampled_from(sorted(HAZARDS)).flatmap(lambda code: st.tuples(st.just(code), kernels(code))))
def test_planted_hazards_are_found_where_planted(case):
    code, (source, hazard_line) = case
    found = lint_code(source, target=TARGET)
    assert (code, hazard_line) in [(f.code, f.start.line) for f in found] or any(
        f.code == code and hazard_line <= f.start.line <= hazard_line + 2 for f in found)
    assert lint_code(source, target=TARGET) == found, "the same input gives the same findings"


@st.composite
def inactive_kernels(draw, code: str):
    statements = draw(st.lists(st.one_of(SAFE), min_size=0, max_size=6))
    statements.insert(draw(st.integers(0, len(statements))), draw(INACTIVE[code]))
    return HEADER + "".join(statements)


@SETTINGS
@given(st.sampled_from(sorted(INACTIVE)).flatmap(lambda code: st.tuples(st.just(code), inactive_kernels(code))))
def test_inactive_twins_of_planted_hazards_are_not_reported(case):
    code, source = case
    assert [f for f in lint_code(source, target=TARGET) if f.code == code] == []


@SETTINGS
@given(st.sampled_from(sorted(HAZARDS)).flatmap(kernels))
def test_fixes_reparse_and_converge_on_generated_kernels(case):
    source, _ = case
    fixed = fix_code(source, target=TARGET, unsafe=True)
    ast.parse(fixed)
    assert applicable(lint_code(fixed, target=TARGET), unsafe=True) == []


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(HAZARDS)).flatmap(kernels), min_size=17, max_size=24), st.randoms())
def test_findings_do_not_depend_on_file_order_count_or_parallelism(tmp_path_factory, cases, random):
    folder = tmp_path_factory.mktemp("tree")
    paths = []
    for number, (source, _) in enumerate(cases):
        path = folder / f"k{number}.py"
        path.write_text(source)
        paths.append(path)
    settings_for = lambda path: FileSettings(tuple(all_rules()), TARGET)  # noqa: E731

    def per_file(files, jobs):
        results, errors = lint_files(files, settings_for, jobs=jobs)
        assert errors == []
        return {r.path: [(f.code, f.start, f.end, f.message) for f in r.findings] for r in results}

    serial = per_file(paths, 1)
    shuffled = list(paths)
    random.shuffle(shuffled)
    assert per_file(shuffled, 2) == serial
    subset = shuffled[: len(shuffled) // 2]
    assert per_file(subset, 1) == {str(p): serial[str(p)] for p in subset}
