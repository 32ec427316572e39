"""`may_touch_same_element`: whether a read can reach the element a later write overwrites, proved
apart only from index expressions that are provably different, never guessed."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from warp_lint.kernels import build_kernel_index
from warp_lint.module_options import build_module_options
from warp_lint.names import WarpNames
from warp_lint.same_element import (
    index_data_decides,
    may_touch_again,
    may_touch_same_element,
)
from warp_lint.triage import triage


def kernel_model(body: str, params: str = "a: wp.array(dtype=float), n: int, s: int"):
    source = f"import warp as wp\n\n@wp.kernel\ndef k({params}):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    module = cst.parse_module(source)
    names = WarpNames.from_triage(triage(source, whole_file=True))
    (function,) = build_kernel_index(module, names, build_module_options(module, names)).functions
    return function


def read_then_write(body: str, **options) -> bool:
    """Whether the first read of `a` can touch the element of the last write of `a`, before it."""
    function = kernel_model(body, **options)
    read = function.reads("a")[0]
    write = [access for access in function.accesses if access.array == "a" and access.kind == "write"][-1]
    return may_touch_same_element(function, read, write)


@pytest.mark.parametrize("body, touches", [
    ("i = wp.tid()\na[i] = a[i] * a[i]\n", True),
    ("i = wp.tid()\na[2 * i + 1] = a[2 * i] * a[2 * i]\n", False),
    ("i = wp.tid()\na[i + 1] = a[i - 1] * a[i - 1]\n", False),
    ("i = wp.tid()\nj = i + 1\na[j] = a[i] * a[i]\n", False),  # a local assigned once: its value stands in
    ("i = wp.tid()\nj = i\nj += 1\na[j] = a[i] * a[i]\n", True),  # assigned twice: unknown
    ("i = wp.tid()\na[int(i)] = a[i] * a[i]\n", True),  # a call: unknown
    ("i = wp.tid()\na[i * i] = a[i] * a[i]\n", True),  # not affine: unknown
    ("i = wp.tid()\na[i + s] = a[i] * a[i]\n", True),  # s may be zero
    # Loops: the read may come from an earlier iteration.
    ("a[0] = 1.0\nfor i in range(n):\n    a[i + 1] = 2.0 * a[i] * a[i]\n", False),
    ("for i in range(n):\n    a[i] = a[i + 1] * a[i + 1]\n", True),  # a[i + 1] read, overwritten next time
    ("for i in range(n - 1, -1, -1):\n    a[i] = a[i + 1] * a[i + 1]\n", False),  # counting down: never
    ("for i in range(0, n, 2):\n    a[i] = a[i + 2] * a[i + 2]\n", True),
    ("for i in range(0, n, 2):\n    a[i] = a[i + 1] * a[i + 1]\n", False),  # odd read, even written
    ("for i in range(0, n, s):\n    a[i + 1] = a[i] * a[i]\n", True),  # unknown step: unknown
    ("for i in range(n):\n    a[i] = 1.0\n    b = a[i + 1] * 2.0\n", True),  # read later in the body
    ("for i in range(n):\n    a[i + 1] = 1.0\n    b = a[i] * 2.0\n", False),
    ("for i in range(n):\n    b = a[i] * a[i]\nfor i in range(n):\n    a[i + 1] = 2.0\n", True),  # two loops
    ("for i in range(n):\n    for j in range(n):\n        a[i] = a[i] * a[i]\n", True),
    ("for i in range(n):\n    i = i + 1\n    a[i + 1] = a[i] * a[i]\n", True),  # the counter reassigned
    ("i = 0\nwhile i < n:\n    a[i + 1] = a[i] * a[i]\n    i += 1\n", True),
])
def test_one_dimensional_indices(body, touches):
    assert read_then_write(body) is touches


@pytest.mark.parametrize("body, touches", [
    ("i, j = wp.tid()\na[i, 0] = a[i, 1] * a[i, 1]\n", False),
    ("i, j = wp.tid()\na[i, j] = a[j, i] * a[j, i]\n", True),
    ("i, j = wp.tid()\na[i][j] = a[i, j + 1] * a[i, j + 1]\n", False),  # two subscripts name one element
    ("i, j = wp.tid()\nrow = a[i]\nv = row[0]\nrow[1] = v * v\n", True),  # through a row view: unknown
])
def test_two_dimensional_indices(body, touches):
    assert read_then_write(body, params="a: wp.array2d(dtype=float)") is touches


@pytest.mark.parametrize("loop, again", [
    ("for i in range(3):\n    m[i, i] = d[i]\n", False),
    ("for i in range(3):\n    m[i, 0] = d[i]\n", False),
    ("for i in range(3):\n    m[0, 0] = d[i]\n", True),
    ("for i in range(3):\n    m[i % 2, 0] = d[i]\n", True),
    ("for i in range(3):\n    for j in range(3):\n        m[i, i] = d[j]\n", True),  # again in the inner loop
])
def test_a_component_written_in_a_loop_touches_another_one_each_iteration(loop, again):
    function = kernel_model("m = wp.mat33()\n" + loop, params="d: wp.array(dtype=float)")
    (write,) = function.component_writes
    assert may_touch_again(function, write, write.loops[-1]) is again


INDEXED = "a: wp.array(dtype=float), ids: wp.array(dtype=int), parent: wp.array(dtype=int), n: int, s: int"


@pytest.mark.parametrize("body, data_decides", [
    # A tree's parent and child, loaded per joint: only the index data can make them one element.
    ("for j in range(n):\n    p = parent[j]\n    c = ids[j]\n    a[c] = a[p] * a[p]\n", True),
    ("i = wp.tid()\na[ids[i]] = a[parent[i]] * a[parent[i]]\n", True),
    ("i = wp.tid()\nk = ids[i]\na[i] = a[k] * a[k]\n", True),  # a loaded index against the thread's own
    # The same element by arithmetic: the same loaded index, read and written in one pass.
    ("i = wp.tid()\nk = ids[i]\na[k] = a[k] * a[k]\n", False),
    ("for j in range(n):\n    a[ids[j]] = a[ids[j]] * a[ids[j]]\n", False),
    ("i = wp.tid()\na[i] = a[i] * a[i]\n", False),
    # May meet through arithmetic alone (a loop counter, a scalar argument): not the data's doing.
    ("i = wp.tid()\nfor j in range(n):\n    a[j] = a[i] * a[i]\n", False),
    ("i = wp.tid()\na[i + s] = a[i] * a[i]\n", False),
    # Reassigned between read and write: the same spelling, another value loaded in between.
    ("i = wp.tid()\nk = ids[i]\nv = a[k]\nk = parent[i]\na[k] = v * v\n", True),
])
def test_whether_only_index_data_make_a_read_and_a_write_one_element(body, data_decides):
    function = kernel_model(body, params=INDEXED)
    read = function.reads("a")[0]
    write = [access for access in function.accesses if access.array == "a" and access.kind == "write"][-1]
    assert may_touch_same_element(function, read, write)
    assert index_data_decides(function, read, write) is data_decides
