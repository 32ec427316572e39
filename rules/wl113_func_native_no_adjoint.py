from __future__ import annotations

import ast
import re

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.kernels import FunctionModel
from warp_lint.rule import Example, Rule
# `wp.tile[int, 1]`, `wp.array[wp.int32]`: containers of integers.
INTEGER_ELEMENT = re.compile(r"\[(int|bool|(wp|warp)\.(u?int\d*|bool))\b")
# A C++ assignment: `=` that is no comparison, or a compound one (`+=`).
ASSIGNMENT = re.compile(r"(?<![=!<>+\-*/%&|^])=(?!=)|[+\-*/%&|^]=")


class FuncNativeNoAdjoint(Rule):
    """A `@wp.func_native` snippet without an `adj_snippet` is called from a differentiable kernel.

    ## What it does
    Flags `@wp.func_native(snippet)` functions that have no `adj_snippet` (keyword or second
    positional argument), take a floating-point value or array, and are called by a
    differentiable kernel or `@wp.func` in the same file. Native functions given an
    `adj_snippet`, functions on integers and handles only, ones that take values and return an
    integer (a sort key: no gradient leaves them) and store into none of their arrays (the
    snippet, written in the decorator or a module constant, is read: `return (uint64_t)arr.data;`
    takes an address), ones that hand back an array (reads
    through the handle are differentiated as reads of the array), ones called only from kernels with
    `enable_backward=False`, ones with a `wp.ref[T]` parameter (Warp 1.19 refuses those in a
    backward kernel with an error) and ones returning a `@wp.struct` (refused too) are not flagged.

    ## Why is this bad?
    Warp cannot differentiate native code: without `adj_snippet` the generated adjoint is empty,
    and the gradient through the call stops, silently. Measured on 1.12.1 through 1.19.0 with
    `out[tid] = x[tid] * x[tid]` as a snippet: AD gradient `[0, 0]` against finite differences
    `[1.14, 2.31]`; with `adj_snippet="adj_x[tid] += 2.0f * x[tid] * adj_out[tid];"` it matches.

    ## Fix safety
    No automatic fix: write the adjoint (`adj_snippet=`, using `adj_`-prefixed argument names and
    `adj_ret`), or launch the calling kernels with `enable_backward=False` when no gradient is
    wanted.

    ## Warp versions
    All versions (measured on 1.12.1 through 1.19.0).

    ## Confirmation
    gradcheck of the kernels that call the function; confirmed when calling the native through a
    copy given an adjoint by central differences of the native itself (float32 values and vectors
    in, a float32 value, vector or matrix out) removes the disagreement.
    """

    code = "WL113"
    name = "func-native-no-adjoint"
    runtime_strategy = ("gradcheck",)
    safe_form = "native-adjoint"

    VALID = [
        Example('''
            import warp as wp

            @wp.func_native("out[tid] = x[tid] * x[tid];", adj_snippet="adj_x[tid] += 2.0f * x[tid] * adj_out[tid];")
            def square_into(x: wp.array(dtype=float), out: wp.array(dtype=float), tid: int): ...

            @wp.kernel
            def square(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                square_into(x, out, i)
            '''),
        Example('''
            import warp as wp

            @wp.func_native("out[tid] = x[tid] * x[tid];")
            def square_into(x: wp.array(dtype=float), out: wp.array(dtype=float), tid: int): ...

            @wp.kernel(enable_backward=False)
            def square(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                square_into(x, out, i)
            '''),
        # A sort key: the float goes in, an integer comes out, nothing is written.
        Example('''
            import warp as wp

            @wp.func_native("uint32_t i = reinterpret_cast<uint32_t&>(f); return i ^ 0x80000000u;")
            def float_flip(f: float) -> wp.uint32: ...

            @wp.kernel
            def keys(d: wp.array(dtype=float), out: wp.array(dtype=wp.uint32)):
                i = wp.tid()
                out[i] = float_flip(d[i] * d[i])
            '''),
        Example('''
            import warp as wp

            @wp.func_native("ids[tid] = tid * 2;")
            def label(ids: wp.array(dtype=int), tid: int): ...

            @wp.kernel
            def tag(ids: wp.array(dtype=int)):
                label(ids, wp.tid())
            '''),
        # An address: the snippet (a module constant) reads `arr.data` and stores nothing.
        Example('''
            import warp as wp

            address_cpp = "return (uint64_t)arr.data;"

            @wp.func_native(address_cpp)
            def address_of(arr: wp.array(dtype=float)) -> wp.uint64: ...

            @wp.func
            def row_address(arr: wp.array(dtype=float), row: int) -> wp.uint64:
                return address_of(arr) + wp.uint64(row * 4)
            '''),
        # Handing back an array handle: reads through it are reads of `x` (measured right on 1.19).
        Example('''
            import warp as wp

            @wp.func_native("return arr;")
            def passthrough(arr: wp.array(dtype=float)) -> wp.array(dtype=float): ...

            @wp.kernel
            def square(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                a = passthrough(x)
                out[i] = a[i] * a[i]
            '''),
    ]
    INVALID = [
        Example('''
            import warp as wp

            @wp.func_native("out[tid] = x[tid] * x[tid];")
            def square_into(x: wp.array(dtype=float), out: wp.array(dtype=float), tid: int): ...

            @wp.kernel
            def square(x: wp.array(dtype=float), out: wp.array(dtype=float)):
                i = wp.tid()
                square_into(x, out, i)
            '''),
        # An integer comes back, but the snippet stores into `out`: that store has no adjoint.
        Example('''
            import warp as wp

            @wp.func_native("out[tid] = x[tid] * x[tid]; return 1;")
            def square_counted(x: wp.array(dtype=float), out: wp.array(dtype=float), tid: int) -> int: ...

            @wp.kernel
            def square(x: wp.array(dtype=float), out: wp.array(dtype=float), count: wp.array(dtype=int)):
                i = wp.tid()
                wp.atomic_add(count, 0, square_counted(x, out, i))
            '''),
        Example('''
            import warp as wp

            snippet = "return a * b;"

            @wp.func_native(snippet)
            def mul(a: float, b: float) -> float: ...

            @wp.func
            def energy(a: float, b: float):
                return mul(a, b) * 0.5
            '''),
    ]

    def check(self, context: FileContext) -> None:
        functions = context.kernels.functions
        for native in functions:
            if native.kind != "func_native" or _has_adjoint(native) or \
                    not _carries_gradient(native, _snippet(native, context.triage.tree)) or \
                    _returns_struct(native, context.kernels.structs):
                continue
            callers = [f for f in functions if f.differentiable and f.kind in ("kernel", "func")
                       and any(call.name == native.name for call in f.calls)]
            if not callers:
                continue
            kernel = next((f for f in callers if f.kind == "kernel"), callers[0])
            context.report(
                self, native.decorator,
                f"`{native.name}` is native code without an `adj_snippet`, called from the differentiable"
                f" `{kernel.name}`: the gradient through it is silently zero; add an `adj_snippet` or launch"
                f" with enable_backward=False",
                data=kernel.runtime_data(),
            )


def _has_adjoint(native: FunctionModel) -> bool:
    args = native.decorator_args
    positional = [a for a in args if a.keyword is None]
    adjoint = positional[1] if len(positional) >= 2 else next(
        (a for a in args if a.keyword is not None and a.keyword.value == "adj_snippet"), None)
    return adjoint is not None and not (isinstance(adjoint.value, cst.Name) and adjoint.value.value == "None")


def _carries_gradient(native: FunctionModel, snippet: str | None) -> bool:
    """A parameter that can carry a gradient; False too when a `wp.ref[T]` parameter makes Warp refuse
    the call from a backward kernel (an error, not a silent zero)."""
    if native.node.returns is not None and _is_array(native.node.returns.annotation):
        # It hands back an array: the handle carries the array's own gradient storage, and reads
        # through it are differentiated as reads of that array (measured right on 1.19).
        return False
    arrays = [p.name for p in native.params if p.type.is_array]
    if native.name in native.integer_helpers and (
            not arrays or snippet is not None and not any(_stores_into(snippet, array) for array in arrays)):
        # An integer result and nothing written: no gradient leaves it (a sort key, an array's
        # address read from `arr.data`).
        return False
    carries = False
    for param in native.params:
        kind, annotation = param.type.kind, param.type.annotation.replace(" ", "")
        if "ref[" in annotation:
            return False
        if kind in ("array", "scalar", "composite") and not param.type.differentiable or INTEGER_ELEMENT.search(annotation):
            continue
        carries = True
    return carries


def _snippet(native: FunctionModel, tree: ast.Module) -> str | None:
    """The native snippet's text: a string written in the decorator, or a module-level string
    constant it names; None where it is neither."""
    positional = [a for a in native.decorator_args if a.keyword is None]
    argument = positional[0].value if positional else next(
        (a.value for a in native.decorator_args if a.keyword is not None and a.keyword.value == "snippet"), None)
    if isinstance(argument, cst.SimpleString):
        return argument.evaluated_value if isinstance(argument.evaluated_value, str) else None
    if isinstance(argument, cst.Name):
        texts = [statement.value.value for statement in tree.body if isinstance(statement, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == argument.value for t in statement.targets)
                 and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)]
        return texts[0] if len(texts) == 1 else None
    return None


def _stores_into(snippet: str, array: str) -> bool:
    """Whether a C++ statement of the snippet assigns through the array (`arr[i] = v`,
    `arr.data[i] += v`, `*address(arr, i) = v`) or hands it to an atomic."""
    name = re.compile(rf"\b{re.escape(array)}\b")
    for statement in snippet.split(";"):
        assignment = ASSIGNMENT.search(statement)
        if assignment and name.search(statement[:assignment.start()]):
            return True
        if re.search(rf"atomic_\w+\s*\(\s*&?\s*{re.escape(array)}\b", statement):
            return True
    return False


def _returns_struct(native: FunctionModel, structs: dict) -> bool:
    """Warp 1.19 refuses a native function that returns a `@wp.struct`: an error, not a silent zero."""
    returns = native.node.returns
    return returns is not None and isinstance(returns.annotation, cst.Name) and returns.annotation.value in structs


def _is_array(annotation: cst.BaseExpression) -> bool:
    head = annotation.value if isinstance(annotation, cst.Subscript) else annotation
    head = head.func if isinstance(head, cst.Call) else head
    return isinstance(head, (cst.Attribute, cst.Name)) and \
        (head.attr.value if isinstance(head, cst.Attribute) else head.value).startswith("array")
