from __future__ import annotations

import dataclasses
from typing import ClassVar

import libcst as cst

from warp_lint.context import FileContext
from warp_lint.kernels import FunctionModel
from warp_lint.rule import Example, Rule


@dataclasses.dataclass(frozen=True)
class TileAdjointBug:
    """One release-bound adjoint bug of a tile operation, as measured (CPU, tape against central
    differences; the scripts and figures are in the rule's docstring)."""

    operation: str  # what the message names
    affected: str  # PEP 440 specifier of the releases that have it
    fixed_in: str
    effect: str  # the measured effect, for the message
    remedy: str  # what to do: the upgrade, and the workaround measured right on the old release


# The table is the data the rule reads, like TorchFix's deprecations: an entry per operation.
BUGS = {
    "tile_store": TileAdjointBug(
        operation="a second `wp.tile_store` into the same array",
        affected="<1.10.1",
        fixed_in="1.10.1",
        effect="the store's adjoint does not zero the array's gradient, so the value stored first (and"
               " overwritten) still gets the output's gradient (1.10.0: [1, 2, 3, 4] where it is 0)",
        remedy="upgrade to Warp 1.10.1 or later, or store only the final value into the array",
    ),
    "tile_assign": TileAdjointBug(
        operation="`wp.tile_assign` into a tile that carries a gradient",
        affected="<1.12",
        fixed_in="1.12.0",
        effect="the assignment's adjoint does not zero the overwritten part of the destination, so the"
               " values it replaced still get the gradient, counted twice with the source's"
               " (1.11.1: [1..8] where elements 2-5 have 0)",
        remedy="upgrade to Warp 1.12 or later, or (from 1.10.1) store the two parts into the output array"
               " with two `wp.tile_store` calls (`offset=`) instead of assembling them in one tile",
    ),
    "element": TileAdjointBug(
        operation="an element write into a tile that carries a gradient (`t[i] = v`; a component of a"
                  " tile of vectors or an entry of a tile of matrices alike)",
        affected="<1.17",
        fixed_in="1.17.0",
        effect="the write's adjoint does not zero the overwritten element's gradient, so the value it"
               " replaced still gets the gradient (1.16.0: dL/dx[1] = 2 where it is 0; a mat22 entry:"
               " 6 where it is 0)",
        remedy="upgrade to Warp 1.17 or later, or build the tile with each element written once: start"
               " from `wp.tile_zeros` and write `t[k] = wp.where(k == j, v, x[k])` for every k",
    ),
}
# Tile constructors whose elements carry no gradient: what overwrites them loses nothing.
GRADIENT_FREE = frozenset({
    "warp.tile_zeros", "warp.tile_empty", "warp.tile_ones", "warp.tile_full", "warp.tile_arange",
    "warp.tile_randf", "warp.tile_randi",
})
STORES = ("warp.tile_store", "warp.tile_store_indexed")
# Tile builtins that return no tile: a local bound from them is not a tile.
NOT_TILES = frozenset({"warp.tile_store", "warp.tile_store_indexed", "warp.tile_atomic_add",
                       "warp.tile_atomic_add_indexed", "warp.tile_assign"})


class TileAdjointVersionBug(Rule):
    """A tile operation whose adjoint a Warp release gets wrong: the overwritten value keeps its gradient.

    ## What it does
    Flags, in a differentiated kernel or `@wp.func`, a tile operation whose adjoint is wrong in the
    Warp releases the target covers, from a table of measured, release-bound bugs kept as data in
    the module (`BUGS`: operation, affected releases, measured effect, fix release, remedy):
    a second `wp.tile_store` (or `wp.tile_store_indexed`) into the same array (before 1.10.1);
    `wp.tile_assign(dst, src, offset)` into a tile that carries a gradient (before 1.12); an
    element write `t[i] = v` (`t[i, j] = v` on a tile of vectors, `t[i, j, k] = v` on a tile of
    matrices) into a tile that carries a gradient (before 1.17). Writes into a tile made by
    `wp.tile_zeros`, `tile_empty`, `tile_ones`, `tile_full`, `tile_arange`, `tile_randf` or
    `tile_randi` are not flagged: what they overwrite carries no gradient. A target range with
    none of the affected releases (`--target-warp-version`, else the installed Warp) gives no
    finding.

    ## Why is this bad?
    An overwrite must stop the gradient of the value it replaces. In these releases the adjoint
    of the operation passes the gradient on to the new value but leaves it on the old one too, so
    whatever the overwritten value came from gets a gradient it does not have, without a warning.
    Measured per release in "Warp versions".

    ## Fix safety
    No automatic fix: upgrade to the release named in the message, or use the workaround it gives,
    measured right on the old release (two `wp.tile_store` calls with `offset=` instead of
    `wp.tile_assign`; a fresh `wp.tile_zeros` tile with each element written once for element
    writes; a single final `wp.tile_store`).

    ## Warp versions
    Measured on the CPU, tape against central differences (step 1e-2), loss `sum_i (i+1) y_i`:
    - `wp.tile_store(y, tile_load(x)); wp.tile_store(y, tile_load(z))`: dL/dx is
      [1, 2, 3, 4] on 1.9.1 and 1.10.0 (FD: 0), 0 on 1.10.1, 1.11.0 and 1.19.0; dL/dz right
      everywhere. Affected: <1.10.1.
    - `d = tile_load(x, 8); wp.tile_assign(d, tile_load(z, 4), offset=(2,)); tile_store(y, d)`:
      dL/dx is [1, 2, 3, 4, 5, 6, 7, 8] on 1.10.1 and 1.11.1 (FD: [1, 2, 0, 0, 0, 0, 7, 8]), right
      on 1.12.0, 1.12.1 and 1.19.0. Two `wp.tile_store` calls with `offset=` are right on 1.10.1
      and 1.11.1. (Before 1.12, `tile_assign` of register tiles does not compile on the CPU; the
      measurement uses `storage="shared"`.) Affected: <1.12.
    - `t = tile_load(x); t[1] = 2 z[0]; tile_store(y, t)`: dL/dx[1] is 2 on 1.10.1, 1.12.1 and
      1.16.0 (FD: 0), 0 on 1.17.0 and 1.19.0; the same for a component of a vec2 tile (3 for 0) and
      an entry of a mat22 tile (6 for 0), shared and register storage alike. A `wp.tile_zeros` tile
      with each element written once through `wp.where` is right on 1.10.1, 1.12.1, 1.16.0 and
      1.19.0 (storing the tile and then writing `y[1]` is not a workaround before 1.13: that
      double store is wrong too). Affected: <1.17.
    Not kept, measured right: `wp.tile_dot` (first in 1.13.0; right on the CPU on 1.13.0, 1.14.0
    and 1.19.0, also with the result written by one thread).

    ## Confirmation
    None at run time: the bug belongs to the Warp release, read from the target version; the
    scripts of the measurement reproduce it on that release.
    """

    code = "WL119"
    name = "tile-adjoint-version-bug"
    affected_versions = "<1.17"  # the union of the table's ranges

    VALID: ClassVar[list[Example]] = [
        Example("""
            import warp as wp

            @wp.kernel
            def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
                d = wp.tile_load(x, shape=8)
                wp.tile_store(y, d)
                s = wp.tile_load(z, shape=4)
                wp.tile_store(y, s, offset=2)
            """, target="==1.19.0"),
        Example("""
            import warp as wp

            @wp.kernel
            def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
                t = wp.tile_zeros(shape=4, dtype=float)
                for k in range(4):
                    t[k] = wp.where(k == 1, z[0] * 2.0, x[k])
                wp.tile_store(y, t)
            """, target="==1.16.0"),
        Example("""
            import warp as wp

            @wp.kernel
            def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
                t = wp.tile_load(x, shape=4)
                t[1] = z[0] * 2.0
                wp.tile_store(y, t)
            """, target="==1.19.0"),
    ]
    INVALID: ClassVar[list[Example]] = [
        Example("""
            import warp as wp

            @wp.kernel
            def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
                t = wp.tile_load(x, shape=4)
                t[1] = z[0] * 2.0
                wp.tile_store(y, t)
            """, target="==1.16.0"),
        Example("""
            import warp as wp

            @wp.kernel
            def patch(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
                d = wp.tile_load(x, shape=8, storage="shared")
                s = wp.tile_load(z, shape=4, storage="shared")
                wp.tile_assign(d, s, offset=(2,))
                wp.tile_store(y, d)
            """, target="==1.11.1"),
        Example("""
            import warp as wp

            @wp.kernel
            def refresh(x: wp.array(dtype=float), z: wp.array(dtype=float), y: wp.array(dtype=float)):
                a = wp.tile_load(x, shape=4)
                wp.tile_store(y, a)
                b = wp.tile_load(z, shape=4)
                wp.tile_store(y, b)
            """, target="==1.10.0"),
        Example("""
            import warp as wp

            @wp.kernel
            def pin(x: wp.array(dtype=wp.mat22), z: wp.array(dtype=float), y: wp.array(dtype=wp.mat22)):
                t = wp.tile_load(x, shape=4)
                t[1, 0, 1] = z[0] * 2.0
                wp.tile_store(y, t)
            """, target="<1.17"),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            self._stores(context, function)
            self._assigns(context, function)
            self._element_writes(context, function)

    def _stores(self, context: FileContext, function: FunctionModel) -> None:
        """Two tile stores into the same array at the same place (the same offset and index
        arguments, as written): stores at different offsets overwrite nothing."""
        stored: dict[tuple[str, str, tuple[str, ...]], int] = {}
        for call in function.calls:
            if call.name not in STORES or len(call.node.args) < 2:
                continue
            target = call.node.args[0].value
            if not isinstance(target, cst.Name) or target.value not in function.arrays:
                continue
            where = tuple(sorted(context.code(arg).strip().rstrip(",") for arg in call.node.args[2:]))
            key = (call.name, target.value, where)
            if key in stored:
                self._report(context, call.node, "tile_store",
                             f"`{target.value}` was stored into at the same place before, by the tile store at"
                             f" line {stored[key]}")
            else:
                stored[key] = context.position(call.node)[0].line

    def _assigns(self, context: FileContext, function: FunctionModel) -> None:
        for call in function.calls:
            if call.name != "warp.tile_assign" or not call.node.args:
                continue
            target = call.node.args[0].value
            if isinstance(target, cst.Name) and \
                    _carries_gradient(context, function, target.value, call.order, call.statement):
                self._report(context, call.node, "tile_assign", f"`{target.value}` carries a gradient")

    def _element_writes(self, context: FileContext, function: FunctionModel) -> None:
        for write in function.component_writes:
            if write.operator is not None or write.is_field or write.is_attribute:
                continue
            if _carries_gradient(context, function, write.name, write.order, write.node):
                self._report(context, write.node, "element", f"the tile `{write.name}` carries a gradient")

    def _report(self, context: FileContext, node: cst.CSTNode, key: str, detail: str) -> None:
        bug = BUGS[key]
        context.report(
            self, node,
            f"{bug.operation} has a wrong adjoint in Warp {bug.affected} ({detail}): {bug.effect}; {bug.remedy}",
            affected_versions=bug.affected,
        )


def _carries_gradient(context: FileContext, function: FunctionModel, name: str, order: int,
                      statement: cst.CSTNode | None) -> bool:
    """Whether the local ``name`` holds, at the statement of this order, a tile whose elements can
    carry a gradient: bound from a tile builtin other than the gradient-free constructors. A call
    can share its order with the binding just before it (a call records no fact of its own), so
    bindings of the same order count, except the statement's own."""
    binding = None
    for candidate in function.bindings:
        if candidate.name == name and candidate.order <= order and candidate.operator is None \
                and candidate.node is not statement:
            binding = candidate
    if binding is None or not isinstance(binding.value, cst.Call):
        return False
    builder = context.names.qualify(binding.value.func) or ""
    return builder.startswith("warp.tile") and builder not in GRADIENT_FREE and builder not in NOT_TILES
