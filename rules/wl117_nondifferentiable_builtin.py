from __future__ import annotations

import libcst as cst
from packaging.version import Version

from warp_lint.context import FileContext
from warp_lint.dataflow import ACCUMULATING, STORING, Dataflow, dataflow_of
from warp_lint.kernels import CallSite, FunctionModel
from warp_lint.rule import Example, Rule
from warp_lint.warp_builtins import not_differentiable
from warp_lint.warp_builtins_table import NOT_DIFFERENTIABLE

# Which builtins Warp leaves without an adjoint is read from Warp (warp_builtins_table). What is
# classified here is the mathematics: the builtins whose value follows their float arguments, so a
# zero gradient through them is wrong. The rest are piecewise constant (`floor`, `sign`, `step`:
# zero is right almost everywhere), integer-valued, random, queries by id, or constants.
DERIVATIVE_NOT_ZERO = {
    "frac": "use `x - wp.trunc(x)`, the same value, whose gradient is 1",
    "mod": "apply the scalar `wp.mod` to each component, which is differentiable",
    "atomic_exch": "store with `a[i] = v` where no other thread writes the slot",
    "atomic_cas": "store with `a[i] = v` where no other thread writes the slot",
    "select": "use `wp.where(cond, a, b)`",
    "curlnoise": "differentiate it by hand with a @wp.func_grad",
    "texture_sample": "differentiate the lookup by hand with a @wp.func_grad",
    "tile_max": "take `wp.tile_argmax` and read the value at that index",
    "tile_min": "take `wp.tile_argmin` and read the value at that index",
    "tile_reduce": "use `wp.tile_sum` for sums, or differentiate the reduction by hand",
    "tile_scan_inclusive": "differentiate the scan by hand (its adjoint is a reversed scan)",
    "tile_scan_exclusive": "differentiate the scan by hand (its adjoint is a reversed scan)",
    "tile_scan_max_inclusive": "differentiate the scan by hand",
    "tile_scan_min_inclusive": "differentiate the scan by hand",
    "tile_sort": "sort indices, not values, and gather the values with them",
    "tile_diag_add": "add the diagonal in a differentiable step of its own (store the matrix, add `d[i]` to"
                     " `A[i, i]` in a kernel, load it again), or differentiate it by hand, passing the matrix's"
                     " gradient to the matrix and its diagonal to the diagonal",
    "tile_cholesky": "differentiate the factorisation by hand",
    "tile_cholesky_inplace": "differentiate the factorisation by hand",
    "tile_cholesky_solve": "differentiate the solve by hand (its adjoint is a solve with the same factor)",
    "tile_cholesky_solve_inplace": "differentiate the solve by hand",
    "tile_lower_solve": "differentiate the solve by hand",
    "tile_lower_solve_inplace": "use the out-of-place `wp.tile_lower_solve`",
    "tile_upper_solve": "differentiate the solve by hand (or solve the transposed lower system)",
    "tile_upper_solve_inplace": "differentiate the solve by hand",
    "dense_chol": "differentiate it by hand with a @wp.func_grad",
    "dense_chol_batched": "differentiate it by hand",
    "dense_gemm_batched": "differentiate it by hand",
    "dense_solve_batched": "differentiate it by hand",
    "dense_subs": "differentiate it by hand with a @wp.func_grad",
}
# Not measured, so not reported: whether a gradient passes through them is left to `--confirm`.
UNDECIDED = {"extract", "load", "store", "index", "indexref", "tile_from_thread", "tile_view", "tile_stack",
             "tile_stack_push", "tile_stack_pop", "tile_stack_clear", "tile_stack_count", "volume_lookup_f",
             "volume_lookup_v", "volume_sample_i", "tile_query_valid"}
# No gradient to lose through their arguments: piecewise constant (`floor`, `sign`, `step`: zero is
# right almost everywhere), integer or bool valued, random, queries and reads by id, constants,
# assertions, stores into volumes. A test checks that every builtin of the table is in one of the
# three sets, so a release that adds one makes someone decide where it goes.
NO_GRADIENT_TO_LOSE = frozenset("""
    argmax argmin array atomic_and atomic_or atomic_xor bit_and bit_and_inplace bit_count bit_or
    bit_or_inplace bit_xor bit_xor_inplace block_dim bool breakpoint bvh_get_group_root
    bvh_query_aabb bvh_query_aabb_tiled bvh_query_capsule bvh_query_next bvh_query_next_tiled
    bvh_query_ray bvh_query_ray_tiled bvh_query_sphere cast ceil expect_eq expect_near
    expect_neq floor floordiv hash_grid_point_id hash_grid_query hash_grid_query_next identity
    int int16 int32 int64 int8 intersect_tri_tri invert isfinite isinf isnan iter_next len
    lower_bound lshift mesh_eval_face_normal mesh_get mesh_get_bvh mesh_get_group_root
    mesh_get_index mesh_get_point mesh_get_velocity mesh_query_aabb mesh_query_aabb_next
    mesh_query_aabb_next_tiled mesh_query_aabb_tiled mesh_query_next mesh_query_ray_anyhit
    mesh_query_ray_count_intersections mesh_query_sphere nonzero poisson printf quat_identity
    rand_init randf randi randn randu range reversed rint round rshift sample_cdf
    sample_triangle sample_unit_cube sample_unit_disk sample_unit_hemisphere
    sample_unit_hemisphere_surface sample_unit_ring sample_unit_sphere
    sample_unit_sphere_surface sample_unit_square sign slice static step tid tile_arange
    tile_argmax tile_argmin tile_bit_and_inplace tile_bit_or_inplace tile_bit_xor_inplace
    tile_bvh_query_aabb tile_bvh_query_next tile_bvh_query_ray tile_empty tile_full
    tile_mesh_query_aabb tile_mesh_query_aabb_next tile_ones tile_randf tile_randi tile_zeros
    transform_identity trunc tuple uint16 uint32 uint64 uint8 unot volume_lookup volume_lookup_i
    volume_lookup_index volume_store volume_store_f volume_store_i volume_store_v
    volume_voxel_count zeros
""".split())
STORES = STORING | ACCUMULATING
# Builtins whose argument tells overloads apart in the table: the kind of a vector's first argument.
VECTOR_DTYPES = ("warp.vec", "warp.spatial_vector")


class NondifferentiableBuiltin(Rule):
    """A builtin Warp does not differentiate is on the gradient path: its gradient is zero, without a warning.

    ## What it does
    Flags a call to a Warp builtin that the installed releases register as not differentiable
    (read from Warp's own registry into a table per release, `python -m warp_lint.warp_builtins`),
    whose true derivative is not zero (`wp.frac`, the vector `wp.mod`, `wp.atomic_exch`,
    `wp.tile_max`, tile scans and sorts, several tile solvers; older releases add `texture_sample`,
    `tile_cholesky`, `tile_lower_solve`, `curlnoise`), where an argument carries a gradient and
    the result reaches an output. Piecewise constant builtins (`wp.floor`, `wp.sign`, `wp.step`),
    whose zero gradient is right, integer, random and query builtins, and calls on values that
    carry no gradient are not flagged.

    ## Why is this bad?
    Warp generates no adjoint for such a builtin: the backward pass passes nothing back through it,
    and every gradient that flows only through it is zero, with no error and no warning. Measured
    on 1.19.0 (CPU, against central differences): `y = 2 wp.frac(x)` gives 0 where the derivative
    is 2; `wp.mod(v, wp.vec3(10.0))` gives 0 where it is 1 (the scalar `wp.mod` is right);
    `wp.atomic_exch(y, i, 2 x)` gives 0 for 2; `wp.tile_max` gives 0 where the largest element
    has 1; `wp.tile_scan_inclusive` gives 0 where the element k has n - k. Some are worse than
    zero (WARP_FACTS): `tile_sort` sends the gradient to the unsorted positions.

    ## Fix safety
    No automatic fix: the message gives a differentiable form where there is one (`x - wp.trunc(x)`
    for `wp.frac(x)`, the same value, measured right), else a `@wp.func_grad` by hand.

    ## Warp versions
    Per builtin, as Warp's registry says for each release in the table (1.12.1, 1.15.0, 1.17.0,
    1.19.0); a finding names the releases.

    ## Confirmation
    gradcheck: the gradient through the call is zero where finite differences are not; confirmed
    when the differentiable form (`x - wp.trunc(x)` for `frac`, a plain store for a statement
    `atomic_exch`) gives the right one.
    """

    code = "WL117"
    name = "nondifferentiable-builtin"
    runtime_strategy = ("gradcheck",)
    safe_form = "differentiable-builtin"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def wrap(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = (x[i] - wp.trunc(x[i])) * 2.0
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def cell(x: wp.array(dtype=float), cells: wp.array(dtype=float)):
                i = wp.tid()
                cells[i] = wp.floor(x[i] * 4.0)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def wrap(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = wp.mod(x[i], 10.0)
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def wrap(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = wp.frac(x[i]) * 2.0
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def wrap(x: wp.array(dtype=wp.vec3), y: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                y[i] = wp.mod(x[i], wp.vec3(10.0, 10.0, 10.0))
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def peak(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                t = wp.tile_load(x, shape=8)
                wp.tile_store(y, wp.tile_max(t))
            """),
    ]

    def check(self, context: FileContext) -> None:
        for function in context.kernels.functions:
            if not function.differentiable or function.kind not in ("kernel", "func"):
                continue
            flow = dataflow_of(function, context.names)
            for call in function.calls:
                builtin = (call.name or "").removeprefix("warp.")
                if not (call.name or "").startswith("warp.") or builtin not in DERIVATIVE_NOT_ZERO:
                    continue
                if self._releases(context, function, call, builtin, context.target_version or "") and \
                        _on_gradient_path(function, flow, call):
                    self._report(context, function, call, builtin, self._releases(context, function, call, builtin))

    @staticmethod
    def _releases(context: FileContext, function: FunctionModel, call: CallSite, builtin: str,
                  target: str = "") -> list[str]:
        """The releases of the table within ``target`` where Warp does not differentiate this call:
        every overload, or the one its first argument's kind picks (known only for a vector: an
        element of a vector array, a vector parameter or constructor)."""
        found = []
        for release, entry in not_differentiable(builtin, target).items():
            if entry == "all" or ("vector" in entry and _vector_argument(context, function, call)):
                found.append(release)
        return found

    def _report(self, context: FileContext, function: FunctionModel, call: CallSite, builtin: str,
                releases: list[str]) -> None:
        listed = sorted(NOT_DIFFERENTIABLE, key=Version)
        destinations = _destinations(function, dataflow_of(function, context.names), call)
        # An in-place form writes its result over an argument: the output's gradient is left there,
        # passed back unchanged (measured for tile_cholesky_solve_inplace), not zeroed.
        lost = "the output's gradient is passed back unchanged" if builtin.endswith("_inplace") else "zero"

        where = (f"Warp {releases[0]} registers" if len(releases) == 1
                 else f"Warp {releases[0]} to {releases[-1]} register")
        context.report(
            self, call.node,
            f"`wp.{builtin}` has no adjoint ({where} it as not differentiable), but a gradient flows"
            f" through it here: the backward pass passes nothing back through it, to any of its arguments, so"
            f" that gradient is lost"
            f" without a warning ({lost}); {DERIVATIVE_NOT_ZERO[builtin]}",
            affected_versions=_specifier(releases, listed),
            # the outputs the lost gradient would come from: none exists where they have no `.grad`
            data={**function.runtime_data(), **({"destinations": sorted(destinations)} if destinations else {})},
        )


def _on_gradient_path(function: FunctionModel, flow: Dataflow, call: CallSite) -> bool:
    """Whether an argument of the call carries a gradient and its value reaches an output: the
    local it is assigned to reaches one (the dataflow, reading Warp's registry as Warp does, gives
    that local no gradient: the loss this rule reports), or it is stored, returned or passed to a
    store."""
    if all(flow.free(argument.value) for argument in call.node.args):
        return False
    statement = call.statement
    if isinstance(statement, (cst.Assign, cst.AnnAssign)):
        targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
        names = [t.value for t in targets if isinstance(t, cst.Name)]
        return any(name in flow.useful for name in names) if names else True  # a store into an array
    if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
        # the call is the statement (`wp.atomic_exch(y, i, v)`), or its value goes to a store;
        # printed or asserted, it reaches no output
        return statement.value is call.node or flow.qualify(statement.value.func) in STORES
    return isinstance(statement, (cst.Return, cst.AugAssign))


def _destinations(function: FunctionModel, flow: Dataflow, call: CallSite) -> frozenset[str] | None:
    """The array parameters the call's value is stored into: the array its statement stores into
    (`y[i] = ...`, `wp.tile_store(y, ...)`, `wp.atomic_exch(y, ...)`), or those a local assigned
    from it reaches (``Dataflow.destinations``); None where that is not known (a return, a helper's
    write)."""
    statement, arrays = call.statement, set(function.arrays)
    if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call) and statement.value.args:
        first = statement.value.args[0].value
        return frozenset({first.value}) if isinstance(first, cst.Name) and first.value in arrays else None
    if not isinstance(statement, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
        return None
    targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
    found: set[str] = set()
    for target in targets:
        root = target
        while isinstance(root, (cst.Subscript, cst.Attribute)):
            root = root.value
        if not isinstance(root, cst.Name):
            return None
        if root.value in arrays:
            found.add(root.value)
            continue
        reached = flow.destinations({root.value})
        if reached is None:
            return None
        found |= reached & arrays
    return frozenset(found) or None


def _vector_argument(context: FileContext, function: FunctionModel, call: CallSite) -> bool:
    """Whether the call's first argument is a vector: an element of an array of vectors, a vector
    parameter, or a vector constructor."""
    if not call.node.args:
        return False
    value = call.node.args[0].value
    params = {p.name: p.type for p in function.params}
    if isinstance(value, cst.Subscript) and isinstance(value.value, cst.Name) and value.value.value in params:
        dtype = params[value.value.value].dtype or ""
    elif isinstance(value, cst.Name) and value.value in params:
        dtype = params[value.value].dtype or ""
    elif isinstance(value, cst.Call):
        dtype = context.names.qualify(value.func) or ""
    else:
        return False
    return dtype.startswith(VECTOR_DTYPES)


def _specifier(releases: list[str], listed: list[str]) -> str | None:
    """The versions a finding holds for, from the releases of the table where it does: None for
    all of them; `<R` where it stops before release R; `>=R` where it starts at release R."""
    positions = [listed.index(release) for release in releases]
    if len(releases) == len(listed) or positions != list(range(positions[0], positions[-1] + 1)):
        return None
    if positions[0] == 0:
        return f"<{listed[positions[-1] + 1]}"
    if positions[-1] == len(listed) - 1:
        return f">={releases[0]}"
    return f">={releases[0]},<{listed[positions[-1] + 1]}"
