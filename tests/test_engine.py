"""What the engine understands: imports, decorators, helpers, loops, versions, suppressions."""

from __future__ import annotations

import pytest

from warp_lint import suppression
from warp_lint.testing import fix_code, lint_code, snippet


def codes(code: str, **options) -> list[tuple[str, int]]:
    return [(f.code, f.start.line) for f in lint_code(code, **options)]


READ_THEN_WRITE_BODY = """
def square(a: {array}(dtype=float)):
    i = {tid}()
    a[i] = a[i] * a[i]
"""


@pytest.mark.parametrize("header, decorator, array, tid", [
    ("import warp as wp", "@wp.kernel", "wp.array", "wp.tid"),
    ("import warp", "@warp.kernel", "warp.array", "warp.tid"),
    ("import warp as w", "@w.kernel", "w.array", "w.tid"),
    ("from warp import kernel, array, tid", "@kernel", "array", "tid"),
    ("from warp import kernel as k, array as A, tid", "@k", "A", "tid"),
    ("import warp as wp", "@wp.kernel(enable_backward=True, module='unique')", "wp.array", "wp.tid"),
    ("import warp.sim\nimport warp as wp", "@warp.kernel", "wp.array", "wp.tid"),
])
def test_imports_and_decorators_however_written(header, decorator, array, tid):
    code = header + "\n\n" + decorator + READ_THEN_WRITE_BODY.format(array=array, tid=tid)
    assert ("WL102", code.count("\n", 0, code.index("a[i] = ")) + 1) in codes(code)


def test_names_that_only_look_like_warp_are_not_warp():
    assert codes("""
        import numpy as wp  # not warp, whatever its name
        import warp

        @wp.kernel
        def square(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = a[i] * a[i]
    """) == []


def test_a_file_that_never_imports_warp_is_skipped():
    assert codes("""
        # mentions warp only in a comment
        def kernel(a):
            a[0] = a[0] * a[0]
    """) == []


def test_backward_disabled_kernels_are_not_checked():
    assert codes("""
        import warp as wp

        @wp.kernel(enable_backward=False)
        def square(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = a[i] * a[i]
    """) == []
    assert codes("""
        import warp as wp

        wp.set_module_options({"enable_backward": False})

        @wp.kernel
        def square(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = a[i] * a[i]
    """) == []


def test_kernels_nested_in_functions_are_found_with_exact_positions():
    found = lint_code("""
        import warp as wp

        def test_square(test, device):
            x = 1

            @wp.kernel
            def square(a: wp.array(dtype=float)):
                i = wp.tid()
                a[i] = a[i] * a[i]

            @wp.kernel
            def cube(a: wp.array(dtype=float)):
                i = wp.tid()
                a[i] = a[i] * a[i] * a[i]

            x, y = (wp.ones(2, dtype=float, requires_grad=True) for _ in range(2))
            with wp.Tape() as tape:  # differentiated: reported by default
                wp.launch(square, 2, inputs=[x])
                wp.launch(cube, 2, inputs=[y])
            tape.backward(grads={x: wp.ones(2, dtype=float), y: wp.ones(2, dtype=float)})
    """, select=["WL102"])
    assert [(f.code, f.start.line, f.start.column, f.end.column) for f in found] == [
        ("WL102", 9, 9, 27), ("WL102", 14, 9, 34)]


class TestHelpers:
    def test_a_helper_that_writes_its_argument_writes_the_callers_array(self):
        assert codes("""
            import warp as wp

            @wp.func
            def store(a: wp.array(dtype=float), i: int, v: float):
                a[i] = v

            @wp.func
            def relay(a: wp.array(dtype=float), i: int, v: float):
                store(a, i, v)

            @wp.kernel
            def k(a: wp.array(dtype=float), b: wp.array(dtype=float)):
                i = wp.tid()
                b[i] = a[i]
                relay(a, i, 2.0)
        """) == [("WL102", 15)]

    def test_a_helper_that_reads_its_argument_reads_the_callers_array(self):
        assert codes("""
            import warp as wp

            @wp.func
            def load(a: wp.array(dtype=float), i: int) -> float:
                return a[i]

            @wp.kernel
            def k(a: wp.array(dtype=float)):
                i = wp.tid()
                v = load(a, i)
                a[i] = v * 2.0
        """) == [("WL102", 11)]

    def test_a_helper_that_reads_then_writes_is_reported_in_the_helper(self):
        assert codes("""
            import warp as wp

            @wp.func
            def double(a: wp.array(dtype=float), i: int):
                a[i] = a[i] * a[i]

            @wp.kernel
            def k(a: wp.array(dtype=float)):
                double(a, wp.tid())
        """) == [("WL102", 5)]


class TestArrayAccess:
    def test_accumulation_is_differentiable(self):
        assert codes("""
            import warp as wp

            @wp.kernel
            def k(x: wp.array(dtype=float), a: wp.array(dtype=float)):
                i = wp.tid()
                v = a[i]
                a[i] += x[i] * v
                a[i] -= x[i]
                wp.atomic_add(a, i, x[i])
                wp.atomic_sub(a, i, v)
        """) == []

    def test_other_atomics_write(self):
        assert codes("""
            import warp as wp

            @wp.kernel
            def k(x: wp.array(dtype=float), a: wp.array(dtype=float)):
                i = wp.tid()
                v = a[i]
                wp.atomic_max(a, 0, v * x[i])
        """) == [("WL102", 7), ("WL118", 7)]  # WL118: every thread ties for slot 0

    def test_shape_is_not_a_read(self):
        assert codes("""
            import warp as wp

            @wp.kernel
            def k(a: wp.array(dtype=float)):
                i = wp.tid()
                if i < a.shape[0]:
                    a[i] = 1.0
        """) == []

    def test_a_read_later_in_a_loop_precedes_the_next_iterations_write(self):
        assert codes("""
            import warp as wp

            @wp.kernel
            def k(a: wp.array(dtype=float), out: wp.array(dtype=float)):
                for j in range(3):
                    a[j] = 1.0
                    out[j] = a[j + 1]
        """) == [("WL102", 6)]

    def test_a_helper_read_later_in_a_loop_precedes_the_next_iterations_write(self):
        assert codes("""
            import warp as wp

            @wp.func
            def peek(a: wp.array(dtype=float), j: int):
                return a[j]

            @wp.kernel
            def k(a: wp.array(dtype=float), out: wp.array(dtype=float)):
                for j in range(3):
                    a[j] = 1.0
                    out[j] = peek(a, j + 1)
        """) == [("WL102", 10)]

    def test_elements_read_and_written_apart_are_no_read_then_write(self):
        assert codes("""
            import warp as wp

            @wp.kernel
            def k(x: wp.array(dtype=float), n: int, prods: wp.array(dtype=float)):
                prods[0] = 1.0
                for i in range(n):
                    prods[i + 1] = x[i] * prods[i]
                    prods[i + 1] = prods[i + 1] * prods[i + 1]
        """) == [("WL102", 8)]

    def test_two_dimensional_element_store_is_not_a_component_write(self):
        assert codes("""
            import warp as wp

            @wp.kernel
            def k(x: wp.array2d(dtype=float), y: wp.array(dtype=float, ndim=2)):
                i, j = wp.tid()
                y[i][j] = x[i, j]
                y[i, j] = x[i, j]
        """, target="<1.14") == []


class TestLoops:
    @pytest.mark.parametrize("loop, dynamic", [
        ("for j in range(16):", False),
        ("for j in range(17):", True),
        ("for j in range(2, 40, 8):", False),
        ("for j in range(N):", False),
        ("for j in range(BIG):", True),
        ("for j in range(n):", True),
        ("for j in range(x.shape[0]):", True),
        ("for j in range(wp.static(64)):", False),
    ])
    def test_static_and_dynamic_loops(self, loop, dynamic):
        code = f"""
            import warp as wp

            N = wp.constant(8)
            BIG = 100

            @wp.kernel
            def k(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
                p = float(1.0)
                {loop}
                    p = p * x[0]
                out[0] = p
        """
        assert bool(codes(code)) is dynamic

    def test_max_unroll_setting_is_honoured(self):
        code = """
            import warp as wp

            wp.config.max_unroll = 4

            @wp.kernel
            def k(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                p = float(1.0)
                for j in range(8):
                    p = p * x[j]
                out[0] = p
        """
        assert codes(code) == [("WL104", 9)]

    def test_break_makes_a_loop_dynamic_and_continue_only_before_1_17(self):
        template = """
            import warp as wp

            @wp.kernel
            def k(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                p = float(1.0)
                for j in range(4):
                    if x[j] < 0.0:
                        {exit}
                    p = p * x[j]
                out[0] = p
        """
        assert codes(template.format(exit="break")) == [("WL104", 9)]
        assert codes(template.format(exit="continue"), target="<1.17") == [("WL104", 9)]
        assert codes(template.format(exit="continue"), target=">=1.17") == []


class TestVersions:
    CODE = """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
            i = wp.tid()
            y[i].x = x[i]
    """

    @pytest.mark.parametrize("target, reported", [
        ("", True), ("<1.14", True), ("==1.13.0", True), (">=1.10", True), ("==1.19.0", False),
        (">=1.14", False), ("~=1.14", False), ("1.4.2", True),
    ])
    def test_target_version_decides(self, target, reported):
        found = lint_code(self.CODE, target=target)
        assert bool(found) is reported
        if found:
            assert found[0].message.endswith("[Warp <1.14]")


class TestSuppression:
    CODE = """
        import warp as wp

        @wp.kernel
        def k(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = a[i] * a[i]{comment}
    """

    @pytest.mark.parametrize("comment, suppressed", [
        ("  # noqa", True), ("  # noqa: WL102", True), ("  # NOQA:WL101,WL102", True), ("  # noqa: WL101", False),
        ("  # noqa: E501 WL102", True), ("  # a noqa-less comment", False),
    ])
    def test_noqa(self, comment, suppressed):
        assert (codes(self.CODE.format(comment=comment)) == []) is suppressed

    def test_noqa_inside_a_string_is_not_a_directive(self):
        code = self.CODE.format(comment="") + '\nNOTE = "# noqa"\n'
        assert codes(code)

    @pytest.mark.parametrize("only_lines, expected", [
        (None, [2, 6]), ({6}, [2, 6]), ({2, 3}, [2, 6]), ({3, 4}, []), ({5}, [2, 6]), ({99}, []),
    ])
    def test_directives_of_some_lines_read_the_file_as_the_full_parse_does(self, only_lines, expected):
        text = 'x = 1\ny = 2  # noqa: WL102\nz = 3\ndoc = """\n# noqa inside a string\n"""  # NOQA\n'
        assert sorted(suppression.parse_directives(text, only_lines)) == expected

    def test_unused_noqa_is_reported_on_request_with_a_fix(self):
        found = lint_code(self.CODE.format(comment="  # noqa: WL102, WL101"), report_unused_noqa=True)
        assert [(f.code, f.message) for f in found] == [
            ("WL900", "Unused `# noqa` for WL101: nothing is reported here")]
        assert found[0].fix.edits[0].content == "# noqa: WL102"

    LINE = """
        import warp as wp

        @wp.kernel
        def k(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = 2.0{comment}
    """

    @pytest.mark.parametrize("comment, fixed", [
        ("  # noqa: WL102", ""),  # the whitespace that separated the comment goes with it
        ("  # noqa: WL102, F841", "  # noqa: F841"),  # another linter's code stays
        ("  # type: ignore  # noqa: WL102", "  # type: ignore"),
        ("  # noqa: WL102  # a reason", "  # a reason"),
        ("  # noqa: WL102 because of x", "  # because of x"),  # the rest stays a comment
    ])
    def test_the_safe_fix_removes_unused_codes_and_the_whitespace_before_them(self, comment, fixed):
        fixed_code = fix_code(self.LINE.format(comment=comment), select=["WL102"], report_unused_noqa=True)
        assert fixed_code == snippet(self.LINE.format(comment=fixed))

    def test_an_unused_noqa_alone_on_its_line_goes_with_its_line(self):
        code = self.LINE.format(comment="\n            # noqa: WL102")
        assert fix_code(code, select=["WL102"], report_unused_noqa=True) == snippet(self.LINE.format(comment=""))

    def test_a_bare_noqa_is_reported_but_removed_only_by_an_unsafe_fix(self):
        """A bare `# noqa` silences every linter on the line: warp-lint cannot know it is unused."""
        code = self.LINE.format(comment="  # noqa")
        found = lint_code(code, report_unused_noqa=True)
        assert [f.code for f in found] == ["WL900"]
        assert fix_code(code, report_unused_noqa=True) == snippet(code)
        assert fix_code(code, report_unused_noqa=True, unsafe=True) == snippet(self.LINE.format(comment=""))


class TestBadInput:
    def test_syntax_error_is_reported_with_its_position(self):
        found = lint_code("import warp as wp\n\ndef f(:\n    pass\n")
        assert [(f.code, f.start.line) for f in found] == [("E999", 3)]
        assert "SyntaxError" in found[0].message

    def test_python2_code_is_a_syntax_error(self):
        found = lint_code("import warp\nprint 'hello'\n")
        assert [f.code for f in found] == ["E999"]

    def test_undecodable_bytes_are_reported(self):
        from warp_lint.engine import FileSettings
        from warp_lint.workspace import lint_bytes

        result = lint_bytes("bad.py", b"import warp\nx = '\xff\xfe'\n", FileSettings(("WL102",), ""))
        assert [(f.code, f.start.line) for f in result.findings] == [("E902", 2)]
        assert "coding" in result.findings[0].message


@pytest.mark.parametrize("annotation", [
    "wp.array(dtype=float)", "wp.array[float]", "wp.array1d[wp.float32]", "wp.array[float, Literal[1]]",
])
def test_array_annotations_in_call_and_subscript_style(annotation):
    code = f"""
        from typing import Literal
        import warp as wp

        @wp.kernel
        def k(a: {annotation}):
            i = wp.tid()
            a[i] = a[i] * a[i]
    """
    assert codes(code) == [("WL102", 7)]


def test_two_dimensional_subscript_style_annotation():
    assert codes("""
        from typing import Literal
        import warp as wp

        @wp.kernel
        def k(x: wp.array2d[float], y: wp.array[float, Literal[2]]):
            i, j = wp.tid()
            y[i][j] = x[i, j]
    """, target="<1.14") == []


def test_integer_arrays_carry_no_gradient():
    assert codes("""
        import warp as wp

        @wp.kernel
        def k(flags: wp.array[int], counts: wp.array(dtype=wp.uint32), ids: wp.array(dtype=wp.vec3i)):
            i = wp.tid()
            flags[i] = flags[i] | 4
            counts[i] *= wp.uint32(2)
            ids[i].x = ids[i].y
    """, target="<1.14") == []


def test_integer_locals_in_dynamic_loops_carry_no_gradient():
    assert codes("""
        import warp as wp

        @wp.func
        def factorial(n: int) -> int:
            result = int(1)
            for i in range(2, n + 1):
                result *= i
            return result
    """) == []


def test_matrix_built_from_literal_rows_is_a_constant():
    assert codes("""
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), out: wp.array(dtype=wp.mat22)):
            i = wp.tid()
            m = wp.mat22(wp.vec2(1.0, 2.0), wp.vec2(3.0, 4.0))
            m[0, 1] = x[i]
            out[i] = m
    """) == []


def test_a_diagonal_built_from_constants_then_updated_is_reported_at_the_update_only():
    """Measured (tests/measured, wl103_*): the first loop overwrites constants, which carry no gradient;
    the second overwrites the first loop's values."""
    assert codes("""
        import warp as wp

        @wp.kernel
        def k(d: wp.array(dtype=float), r: wp.array(dtype=float), k: float, out: wp.array(dtype=wp.mat33)):
            tid = wp.tid()
            m = wp.mat33(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            for i in range(3):
                m[i, i] = d[i] * k
            for i in range(3):
                m[i, i] = r[i]
            out[tid] = m
    """, select=["WL103"]) == [("WL103", 10)]


def test_an_augmented_component_store_stays_reported_until_1_18():
    """Measured (tests/measured, wl101_component_accumulate): `y[i].y += v` drops the gradient of `v`
    through 1.17.0, while `y[i].x = v` is right from 1.14.0."""
    code = """
        import warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
            i = wp.tid()
            y[i].x = x[i]
            y[i].y += x[i] * x[i]
    """
    assert codes(code, target="==1.13.0") == [("WL101", 6), ("WL101", 7)]
    assert codes(code, target="==1.17.0") == [("WL101", 7)]
    assert codes(code, target=">=1.18") == []


STRUCT_FIELD_UPDATE = """
    import warp as wp

    @wp.struct
    class Particle:
        pos: wp.vec3
        vel: wp.vec3

    @wp.kernel
    def step(particles: wp.array(dtype=Particle), f: wp.array(dtype=wp.vec3), dt: float):
        tid = wp.tid()
        p = particles[tid]
        particles[tid].vel = p.vel + f[tid] * dt
"""


def test_a_field_update_on_a_struct_array_element_is_the_component_write_it_is():
    """Measured (tests/measured, wl101_struct_field_update): `f` gets no gradient up to 1.13.0, the
    right one from 1.14.0; the update only adds to the field it read, so no replay goes wrong."""
    assert codes(STRUCT_FIELD_UPDATE, target="<1.14") == [("WL101", 12)]
    assert codes(STRUCT_FIELD_UPDATE, target=">=1.14") == []
    product = STRUCT_FIELD_UPDATE.replace("p.vel + f[tid] * dt", "wp.cw_mul(p.vel, f[tid])")
    assert codes(product, target=">=1.14") == [("WL102", 12)]  # measured wrong on every release
    other_field = STRUCT_FIELD_UPDATE.replace("p.vel + f[tid] * dt", "p.vel + p.pos * wp.length(p.pos)")
    assert codes(other_field, target=">=1.14") == []  # `pos` is not overwritten: its replay is right


SCALED_IN_PLACE = """
    import warp as wp

    @wp.kernel
    def k(a: wp.array(dtype=float), b: wp.array(dtype=float), g: wp.array(dtype=float), damping: float):
        i = wp.tid()
        a[i] = a[i] * damping
        b[i] = b[i] * g[i]
"""


def test_scaling_in_place_by_a_constant_keeps_the_gradient_right_from_1_13():
    """Measured (tests/measured, wl102_scaled_in_place): right on 1.13.0 and 1.19.0; on 1.4.2
    and 1.12.1 the store does not cut the old value's gradient (AD 2.16 against FD 1.02)."""
    assert codes(SCALED_IN_PLACE, target=">=1.13") == [("WL102", 7)]
    assert codes(SCALED_IN_PLACE, target="<1.13") == [("WL102", 6), ("WL102", 7)]


def test_an_update_through_a_local_copy_is_read_like_one_in_the_store():
    code = """
        import warp as wp

        @wp.kernel
        def k(a: wp.array(dtype=float), b: wp.array(dtype=float), x: wp.array(dtype=float), damping: float):
            i = wp.tid()
            v = a[i]
            a[i] = v + x[i] * x[i]
            w = b[i]
            b[i] = w * damping
    """
    assert codes(code, target=">=1.13") == []
    assert codes(code, target="<1.13") == [("WL102", 7), ("WL102", 9)]
    used_elsewhere = code.replace("b[i] = w * damping", "b[i] = w * damping + w * w")
    assert codes(used_elsewhere, target=">=1.13") == [("WL102", 9)]
