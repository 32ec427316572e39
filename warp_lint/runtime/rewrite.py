"""Source rewrites of a kernel or ``@wp.func`` around its flagged statement (plain ``ast``, no warp).

Two families, both applied to the dedented source of the user's function and compiled by
:mod:`warp_lint.runtime.generated` next to a verbatim copy:

* **instrumentation** (:func:`instrument`): counters before the flagged statement (did it run; did
  the guarded operand of a value-dependent rule reach its singular point) and a probe around the
  value it computes (``value * (1 + probe)``, with the value also accumulated into a tap), so the
  experiment can measure that the statement ran *and* that a derivative flows through it;
* **safe forms** (:func:`safe_form`): the flagged statement alone rewritten the way the rule says it
  should be written. A disagreement between AD and finite differences only confirms a finding when
  it goes away in this counterfactual kernel, run on the same inputs. Each rule names its safe
  form (``Rule.safe_form``); the rewrites live here, in one place.

Every name this module introduces starts with ``_wl_``; :data:`WARP_ALIAS` is bound to ``warp`` in
the generated module, whatever alias the user's code uses.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from collections.abc import Iterator

WARP_ALIAS = "_wl_wp"
HITS_PARAM = "_wl_hits"  # int32[HITS_PER_SLOT per slot]: the counters below
PROBE_PARAM = "_wl_probe"  # float32[1 per slot], zero: the flagged value is scaled by (1 + probe)
TAP_PARAM = "_wl_tap"  # float32[1 per slot]: the flagged value, summed over executions
SHADOW_PARAM = "_wl_shadow"  # prefix of the array a redirected in-place write goes to (per array)
# Per slot: the statement ran, its singular point was reached, its value was not probed, how far
# execution got toward it, and a dynamic loop updated a value it reads (before it, not around it).
HITS_RAN, HITS_SINGULAR, HITS_UNPROBED, HITS_PROGRESS, HITS_FED = 0, 1, 2, 3, 4
HITS_PER_SLOT = 5
# Progress toward a flagged statement: marker k * PROGRESS_STRIDE + j + 1 before the j-th
# statement of the k-th block on its path (the largest reached is kept): how far execution got.
PROGRESS_STRIDE = 1024

# Unroll bound of the static-loop safe form: the synthesized inputs never make a loop run longer
# (arrays hold at most 16 elements per dimension, counts are 4). A loop that would is caught by the
# forward comparison: the counterfactual must compute the same values as the original.
UNROLL = 16
# Fewest trips a loop of unknown bound is cut to, to fit: fewer, and its safe form rarely computes
# what it does (synthesized counts are 4).
MIN_GUESSED_TRIPS = 4
UNROLL_BUDGET = 64  # copies of a loop body (nested loops multiply): compile time grows with it
# Statements the copies of one rewrite may add (a copy of a long body costs as much as many of a
# short one): past it the native compile takes minutes. Measured on newton 1.8 (CPU): at 1200,
# XPBD restitution took 1249 s and GJK 843 s cold; at 600, 365 s and 401 s, same verdicts.
UNROLL_STATEMENTS = 600
# ... and all the rewrites of one function: a quarter more, so that the loops left once the
# flagged ones are unrolled (GJK: 17 statements, restitution: 139) can be made static too.
FUNCTION_UNROLL_STATEMENTS = UNROLL_STATEMENTS * 5 // 4

_VECTOR_ATTRIBUTES = {"x": 0, "y": 1, "z": 2, "w": 3}


class RewriteError(Exception):
    """The flagged statement cannot be located or rewritten; ``str()`` says why."""


class NoSafeForm(RewriteError):
    """The rule's safe form does not apply to this statement (``str()`` says why)."""


# -- locating ------------------------------------------------------------------------------------
def _statement_lists(node: ast.AST) -> Iterator[list[ast.stmt]]:
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(node, "handlers", []) or []:
        yield handler.body


def find_statement(block: list[ast.stmt], line: int) -> tuple[list[ast.stmt], int] | None:
    """The innermost statement spanning ``line`` (relative to the parsed source): (its list, its index)."""
    for index, statement in enumerate(block):
        end = getattr(statement, "end_lineno", statement.lineno)
        if statement.lineno <= line <= end:
            for inner in _statement_lists(statement):
                found = find_statement(inner, line)
                if found is not None:
                    return found
            return block, index
    return None


def enclosing(definition: ast.FunctionDef, target: ast.stmt) -> list[ast.stmt]:
    """The compound statements around ``target``, outermost first."""
    path: list[ast.stmt] = []

    def visit(block: list[ast.stmt]) -> bool:
        for statement in block:
            if statement is target:
                return True
            for inner in _statement_lists(statement):
                path.append(statement)
                if visit(inner):
                    return True
                path.pop()
        return False

    visit(definition.body)
    return path


def parse_function(source: str) -> ast.FunctionDef:
    tree = ast.parse(source)
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, ast.FunctionDef):
        raise RewriteError("not a function definition")
    return definition


def _callee(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _warp(attribute: str) -> ast.expr:
    return ast.Attribute(value=ast.Name(WARP_ALIAS, ast.Load()), attr=attribute, ctx=ast.Load())


def _call(name: str | ast.expr, *args: ast.expr) -> ast.Call:
    func = ast.Name(name, ast.Load()) if isinstance(name, str) else name
    return ast.Call(func=func, args=list(args), keywords=[])


def _array_param(name: str, dtype: str) -> ast.arg:
    annotation = ast.parse(f"{WARP_ALIAS}.array(dtype={WARP_ALIAS}.{dtype})", mode="eval").body
    return ast.arg(arg=name, annotation=annotation)


# -- value-dependent operands --------------------------------------------------------------------
def singular_operands(statement: ast.stmt, kind: str) -> list[ast.expr]:
    """Expressions in the flagged statement whose value decides the hazard, as counter increments.

    ``sqrt-zero`` (WL110): the argument of ``sqrt``/``pow(q, 0.5)`` is zero. ``unselected-nonfinite``
    (WL109): the operand ``wp.where``/``wp.select`` does not select is not finite. Each returned
    expression evaluates to 1 when the point is reached and 0 otherwise.
    """
    found: list[ast.expr] = []
    for node in ast.walk(statement):
        name = _callee(node)
        if kind == "sqrt-zero":
            if name == "sqrt" and len(node.args) == 1:
                found.append(_call("_wl_is_zero", copy.deepcopy(node.args[0])))
            elif name == "pow" and len(node.args) == 2 and _is_half(node.args[1]):
                found.append(_call("_wl_is_zero", copy.deepcopy(node.args[0])))
        elif kind == "unselected-nonfinite" and name in ("where", "select") and len(node.args) == 3:
            condition, first, second = (copy.deepcopy(a) for a in node.args)
            # where(c, a, b) returns a when c; select(c, a, b) returns b when c.
            taken, other = (first, second) if name == "where" else (second, first)
            found.append(_call("_wl_unselected_nonfinite", condition, taken, other))
    return found


def _is_half(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0.5


# -- instrumentation -----------------------------------------------------------------------------
def _is_constant(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _is_constant(node.operand)
    return False


def _through(value: ast.expr, slot: int) -> ast.Call:
    probe = ast.Subscript(value=ast.Name(PROBE_PARAM, ast.Load()), slice=ast.Constant(slot), ctx=ast.Load())
    return _call("_wl_through", value, probe, ast.Name(TAP_PARAM, ast.Load()), ast.Constant(slot),
                 ast.Name(HITS_PARAM, ast.Load()))


def _probe_statement(statement: ast.stmt, slot: int) -> tuple[list[ast.stmt], str] | None:
    """Rewrite ``statement`` so its value passes through probe ``slot``: (statements, what is probed)."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        if isinstance(target, (ast.Tuple, ast.List)):
            # `a, b = f(...)`: a tuple has no `_wl_through` overload, and a copy that does not build
            # would take every other statement's probe with it.
            return None
        if not _is_constant(statement.value):
            return [ast.Assign(targets=[target], value=_through(statement.value, slot))], "the assigned value"
        local = _component_base(target)
        if local is not None:
            # `v.y = 0.0`: what flows on is the rest of `v`; probe the local before the write.
            before = ast.Assign(targets=[ast.Name(local, ast.Store())],
                                value=_through(ast.Name(local, ast.Load()), slot))
            return [before, statement], f"`{local}` before the component write"
        return None
    if isinstance(statement, ast.AugAssign) and not _is_constant(statement.value):
        return [ast.AugAssign(target=statement.target, op=statement.op, value=_through(statement.value, slot))], \
            "the operand of the augmented assignment"
    if isinstance(statement, ast.Return) and statement.value is not None and not isinstance(statement.value, ast.Tuple):
        return [ast.Return(value=_through(statement.value, slot))], "the returned value"
    return None


def _component_base(target: ast.expr) -> str | None:
    """``v`` for ``v.x``, ``v[0]``, ``m[1, 2]`` where ``v`` is a plain name."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        return target.value.id
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
        return target.value.id
    return None


@dataclasses.dataclass
class Instrumented:
    source: str
    slots: dict[int, int]  # flagged line (relative) -> its slot: counters 2*slot (ran), 2*slot+1 (singular)
    probed: dict[int, str | None]  # slot -> what its probe scales (None: no probe)
    setting: SafeForm | None = None  # the safe forms applied before instrumenting (instrument_in_setting)

    @property
    def has_probe(self) -> bool:
        return any(self.probed.values())


def instrument(source: str, flagged: list[tuple[int, str | None]], new_name: str, decorator: str, *,
               probe: bool = True, params: list[str] | None = None, constants: dict[str, object] | None = None,
               max_unroll: int = 16) -> Instrumented:
    """The function renamed, with a counter slot per flagged statement (``flagged``: relative line,
    singular kind): ``_wl_hits[HITS_PER_SLOT*slot + HITS_RAN]`` counts its executions, ``+ HITS_SINGULAR``
    the singular points reached, ``+ HITS_FED`` the updates, in dynamic loops before it, of what it
    reads (``params``, ``constants`` and ``max_unroll`` tell which loops are dynamic) and, with
    ``probe``, its value is scaled by ``1 + _wl_probe[slot]`` (and summed into ``_wl_tap[slot]``).
    One copy serves every finding of a kernel."""
    definition = parse_function(source)
    located, slots = _locate(definition, flagged)
    context = Context(params or [], constants or {}, max_unroll)
    for slot, (statement, _) in enumerate(located):
        updates = {id(u): u for _, inside in _feeding_loops(definition, statement, context) for u in inside}
        for update in updates.values():  # a nested loop's updates are its outer loop's too: counted once
            block = _block_of(definition, update)
            block.insert(next(i for i, s in enumerate(block) if s is update), ast.Expr(_call(
                _warp("atomic_add"), ast.Name(HITS_PARAM, ast.Load()), ast.Constant(HITS_PER_SLOT * slot + HITS_FED),
                ast.Constant(1))))
    return _instrument(definition, located, slots, new_name, decorator, probe)


def instrument_in_setting(specs: list[tuple[str, int]], source: str, flagged: list[tuple[int, str | None]],
                          new_name: str, decorator: str, params: list[str], constants: dict[str, object] | None = None,
                          max_unroll: int = 16, *, int_bounds: dict[str, int] | None = None,
                          array_ndims: dict[str, int] | None = None) -> Instrumented:
    """``instrument`` on the function with the safe forms ``specs`` applied first (the setting an
    isolation compares in): a statement an unrolled loop repeats has one probe slot, which scales
    its value in every iteration. A form that does not apply is left out, as ``safe_forms`` leaves
    it out of the copy compared. Raises :class:`RewriteError` where a form replaced a flagged
    statement."""
    definition = parse_function(source)
    located, slots = _locate(definition, flagged)  # before the forms, which may replace them
    context = Context(params, constants or {}, max_unroll, int_bounds or {}, array_ndims or {})
    form, _ = _apply_forms(definition, specs, context)
    helpers = _name_helpers(definition, form, new_name)
    try:
        made = _instrument(definition, located, slots, new_name, decorator, True)
    except RewriteError as error:
        raise RewriteError(f"the flagged statement is rewritten itself in this setting ({error})") from error
    made.source = "\n\n".join([*helpers, made.source])
    made.setting = form
    return made


def _locate(definition: ast.FunctionDef, flagged: list[tuple[int, str | None]]
            ) -> tuple[list[tuple[ast.stmt, str | None]], dict[int, int]]:
    """The flagged statements, one per slot (with the singular kind checked there), and each
    flagged line's slot."""
    located: list[tuple[ast.stmt, str | None]] = []
    slots: dict[int, int] = {}
    for line, singular in flagged:
        found = find_statement(definition.body, line)
        if found is None:
            raise RewriteError(f"no statement on line {line} of {definition.name}")
        statement = found[0][found[1]]
        known = next((k for k, (s, _) in enumerate(located) if s is statement), None)
        if known is None:
            known = len(located)
            located.append((statement, singular))
        elif singular and not located[known][1]:
            located[known] = (statement, singular)
        slots[line] = known
    return located, slots


def _instrument(definition: ast.FunctionDef, located: list[tuple[ast.stmt, str | None]], slots: dict[int, int],
                new_name: str, decorator: str, probe: bool) -> Instrumented:
    probed: dict[int, str | None] = {}
    anchors: list[ast.stmt] = []
    for slot, (statement, singular) in enumerate(located):
        block = _block_of(definition, statement)
        index = next(i for i, s in enumerate(block) if s is statement)
        hits = ast.Name(HITS_PARAM, ast.Load())
        inserted: list[ast.stmt] = [ast.Expr(_call(_warp("atomic_add"), hits,
                                                   ast.Constant(HITS_PER_SLOT * slot + HITS_RAN), ast.Constant(1)))]
        for check in singular_operands(statement, singular) if singular else []:
            inserted.append(ast.Expr(_call(_warp("atomic_add"), copy.deepcopy(hits),
                                           ast.Constant(HITS_PER_SLOT * slot + HITS_SINGULAR), check)))
        replacement: list[ast.stmt] = [statement]
        probed[slot] = None
        if probe:
            rewritten = _probe_statement(statement, slot)
            if rewritten is not None:
                replacement, probed[slot] = rewritten
        block[index:index + 1] = inserted + replacement
        anchors.append(inserted[0])
    for slot, anchor in enumerate(anchors):
        _mark_progress(definition, anchor, HITS_PER_SLOT * slot + HITS_PROGRESS)
    definition.name = new_name
    definition.decorator_list = [ast.parse(decorator, mode="eval").body]
    definition.args.args.append(_array_param(HITS_PARAM, "int32"))
    if any(probed.values()):
        definition.args.args.append(_array_param(PROBE_PARAM, "float32"))
        definition.args.args.append(_array_param(TAP_PARAM, "float32"))
    return Instrumented(ast.unparse(ast.fix_missing_locations(definition)), slots, probed)


def _path_to(block: list[ast.stmt], statement: ast.stmt) -> list[tuple[list[ast.stmt], int]] | None:
    """The (block, position) pairs from ``block`` down to ``statement``."""
    for position, candidate in enumerate(block):
        if candidate is statement:
            return [(block, position)]
        for inner in _statement_lists(candidate):
            found = _path_to(inner, statement)
            if found is not None:
                return [(block, position), *found]
    return None


def _mark_progress(definition: ast.FunctionDef, anchor: ast.stmt, counter: int) -> None:
    """Markers of how far execution got toward ``anchor``: at the start of each block on its path
    and before each statement there that may leave the path (a branch, a loop, a return)."""
    path = _path_to(definition.body, anchor) or []
    for depth, (block, position) in reversed(list(enumerate(path))):
        steps = [j for j in range(position + 1)
                 if j == 0 or isinstance(block[j], (ast.If, ast.For, ast.While, ast.Return, ast.Continue, ast.Break))]
        for j in reversed(steps):
            marker = ast.Expr(_call(_warp("atomic_max"), ast.Name(HITS_PARAM, ast.Load()), ast.Constant(counter),
                                    ast.Constant(depth * PROGRESS_STRIDE + j + 1)))
            block.insert(j, marker)


def _block_of(definition: ast.FunctionDef, statement: ast.stmt) -> list[ast.stmt]:
    def visit(block: list[ast.stmt]) -> list[ast.stmt] | None:
        for candidate in block:
            if candidate is statement:
                return block
            for inner in _statement_lists(candidate):
                found = visit(inner)
                if found is not None:
                    return found
        return None

    found = visit(definition.body)
    if found is None:
        raise RewriteError("statement not found")
    return found


def rename(source: str, new_name: str, decorator: str) -> str:
    """The function unchanged but for its name and decorator: the verbatim copy."""
    definition = parse_function(source)
    definition.name = new_name
    definition.decorator_list = [ast.parse(decorator, mode="eval").body]
    return ast.unparse(ast.fix_missing_locations(definition))


# -- safe forms ----------------------------------------------------------------------------------
@dataclasses.dataclass
class SafeForm:
    """A counterfactual kernel source and how its arrays relate to the original's."""

    source: str
    description: str  # what was rewritten, for the evidence
    renamed_outputs: dict[str, str]  # original array -> the array that now holds what it held
    added_params: dict[str, str]  # new parameter -> the original parameter whose type and values it takes
    preserves_forward: bool  # the rewrite computes the same values: forwards must match
    # Integer arrays the harness puts back to their values before the launch between the recorded
    # forward pass and the backward pass (a counter whose replayed atomic must return what it did).
    rewound: list[str] = dataclasses.field(default_factory=list)
    # Definitions the rewritten function calls, placed before it (templates: ``{prefix}`` names them
    # after the copy, so two copies in one generated module never define one name twice).
    helpers: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Context:
    """What a rewrite may need to know about the function beyond its source."""

    params: list[str]  # parameter names
    constants: dict[str, object] = dataclasses.field(default_factory=dict)  # names the function sees
    max_unroll: int = 16  # the module's unroll limit: constant loops up to it are static already
    # Largest value the synthesized inputs give each integer parameter, and each array's ndim: a
    # loop up to one of them is unrolled that many times, not UNROLL.
    int_bounds: dict[str, int] = dataclasses.field(default_factory=dict)
    array_ndims: dict[str, int] = dataclasses.field(default_factory=dict)
    budget: int = 2 * UNROLL_BUDGET  # loop bodies all the rewrites of one function may add
    statements: int = FUNCTION_UNROLL_STATEMENTS  # statements they may add


def safe_form(kind: str, source: str, line: int, new_name: str, decorator: str, params: list[str],
              constants: dict[str, object] | None = None, max_unroll: int = 16, **bounds: dict) -> SafeForm:
    """Apply the safe form ``kind`` to the statement on ``line`` (relative to ``source``).

    ``params`` are the function's parameter names (arrays among them); ``constants`` the names it
    sees (module globals, closure), used to tell constant loop bounds. Raises :class:`NoSafeForm`
    when the statement has a shape the safe form does not cover.
    """
    result, skipped = safe_forms([(kind, line)], source, new_name, decorator, params, constants, max_unroll,
                                 **bounds)
    if skipped:
        raise skipped[0][1]
    return result


def safe_forms(specs: list[tuple[str, int]], source: str, new_name: str, decorator: str, params: list[str],
               constants: dict[str, object] | None = None, max_unroll: int = 16, *,
               int_bounds: dict[str, int] | None = None, array_ndims: dict[str, int] | None = None
               ) -> tuple[SafeForm, list[tuple[tuple[str, int], RewriteError]]]:
    """Apply several safe forms (kind, relative line) to one function: the statements are located
    first, then rewritten one by one. Returns the combined form and the specs that did not apply
    (with why): one that does not fit its statement, or a statement an earlier rewrite replaced."""
    definition = parse_function(source)
    context = Context(params, constants or {}, max_unroll, int_bounds or {}, array_ndims or {})
    combined, skipped = _apply_forms(definition, specs, context)
    helpers = _name_helpers(definition, combined, new_name)
    definition.name = new_name
    definition.decorator_list = [ast.parse(decorator, mode="eval").body]
    combined.source = "\n\n".join([*helpers, ast.unparse(ast.fix_missing_locations(definition))])
    return combined, skipped


def _name_helpers(definition: ast.FunctionDef, form: SafeForm, new_name: str) -> list[str]:
    """The form's helper definitions named after the copy ``new_name``, and the calls of the
    function to them renamed alike."""
    prefix = f"{NATIVE_ADJOINT_PREFIX}{new_name}_"
    for node in ast.walk(definition):
        if isinstance(node, ast.Name) and node.id.startswith(NATIVE_ADJOINT_PREFIX) and not node.id.startswith(prefix):
            node.id = prefix + node.id[len(NATIVE_ADJOINT_PREFIX):]
    return [helper.format(prefix=prefix) for helper in form.helpers]


def _apply_forms(definition: ast.FunctionDef, specs: list[tuple[str, int]], context: Context
                 ) -> tuple[SafeForm, list[tuple[tuple[str, int], RewriteError]]]:
    """Rewrite ``definition`` in place by each form of ``specs``: the combined form (no source yet)
    and the specs that did not apply."""
    located: list[tuple[tuple[str, int], ast.stmt | None]] = []
    for kind, line in specs:
        found = find_statement(definition.body, line)
        located.append(((kind, line), found[0][found[1]] if found else None))
    combined = SafeForm("", "", {}, {}, preserves_forward=True)
    descriptions, skipped = [], []
    # Forms that rewrite inside a statement keep it in place, so a form that replaces the
    # statement (two rules flag one line) still finds it afterwards.
    located.sort(key=lambda item: item[0][0] not in IN_PLACE_FORMS)
    for spec, statement in located:
        rewriter = SAFE_FORMS.get(spec[0])
        try:
            if rewriter is None:
                raise NoSafeForm(f"no safe form named {spec[0]!r}")
            if spec[0] in WHOLE_FUNCTION_FORMS:
                result = rewriter(definition, [], 0, context)
            elif statement is None:
                raise RewriteError(f"no statement on line {spec[1]} of {definition.name}")
            else:
                block = _block_of(definition, statement)  # raises when an earlier rewrite replaced it
                result = rewriter(definition, block, block.index(statement), context)
        except RewriteError as error:
            skipped.append((spec, error))
            continue
        descriptions.append(result.description)
        combined.renamed_outputs.update(result.renamed_outputs)
        combined.added_params.update(result.added_params)
        combined.preserves_forward = combined.preserves_forward and result.preserves_forward
        combined.rewound += [name for name in result.rewound if name not in combined.rewound]
        combined.helpers += [helper for helper in result.helpers if helper not in combined.helpers]
    combined.description = "; ".join(descriptions)
    return combined, skipped


def _redirect_write(definition: ast.FunctionDef, block: list[ast.stmt], index: int, context: Context) -> SafeForm:
    """WL102: the in-place store writes to a separate array instead (`a[i] = a[i] * a[i]` ->
    `_wl_shadow[i] = a[i] * a[i]`), so no later replay reads overwritten memory."""
    target, value = _stored(block[index], "the flagged write is not a plain store into an array element"
                                          " (a helper call?)")
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
            and target.value.id in context.params):
        raise NoSafeForm("the flagged write is not a store into an element of an array parameter")
    array = target.value.id
    name = f"{SHADOW_PARAM}_{array}"
    shadow = ast.Subscript(value=ast.Name(name, ast.Load()), slice=copy.deepcopy(target.slice), ctx=ast.Store())
    block[index] = ast.Assign(targets=[shadow], value=value)
    if not any(a.arg == name for a in definition.args.args):
        argument = next(a for a in definition.args.args if a.arg == array)
        definition.args.args.append(ast.arg(arg=name, annotation=copy.deepcopy(argument.annotation)))
    return SafeForm("", f"the store into `{array}` redirected to a separate array (`{name}`)",
                    {array: name}, {name: array}, preserves_forward=False)


def _stored(statement: ast.stmt, otherwise: str) -> tuple[ast.expr, ast.expr]:
    """(target, value) of a plain or augmented assignment (`a[i] *= g` stores `a[i] * g`)."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        return statement.targets[0], statement.value
    if isinstance(statement, ast.AugAssign):
        return statement.target, ast.BinOp(left=_as_load(statement.target), op=statement.op, right=statement.value)
    raise NoSafeForm(otherwise)


def _as_load(node: ast.expr) -> ast.expr:
    loaded = copy.deepcopy(node)
    for child in ast.walk(loaded):
        if hasattr(child, "ctx"):
            child.ctx = ast.Load()
    return loaded


def _rebuild_component(definition: ast.FunctionDef, block: list[ast.stmt], index: int, context: Context) -> SafeForm:
    """WL103: the component write on a local becomes a new value (`v.y = c` ->
    `_wl_e_v = v - v; _wl_e_v.y = c - v.y; v = v + _wl_e_v`), whose adjoint cuts the old
    component. The delta is named after the local: Warp refuses one name for a vector and a
    matrix (two rewritten locals of a function). A vector or matrix parameter is such a local too
    (Warp passes it by value, and takes a new value for its name); an array parameter is not."""
    target, value = _stored(block[index], "the flagged statement is not a component assignment")
    local = _component_base(target)
    if local is None or local in context.array_ndims:
        raise NoSafeForm("the flagged statement does not assign a component of a local or of a value parameter")
    if isinstance(target, ast.Attribute) and target.attr not in _VECTOR_ATTRIBUTES:
        raise NoSafeForm(f"`.{target.attr}` is not a vector component")
    delta = f"_wl_e_{local}"
    delta_target = copy.deepcopy(target)
    delta_target.value = ast.Name(delta, ast.Load())
    delta_target.ctx = ast.Store()
    old = _as_load(target)
    block[index:index + 1] = [
        ast.Assign(targets=[ast.Name(delta, ast.Store())],
                   value=ast.BinOp(left=ast.Name(local, ast.Load()), op=ast.Sub(), right=ast.Name(local, ast.Load()))),
        ast.Assign(targets=[delta_target], value=ast.BinOp(left=value, op=ast.Sub(), right=old)),
        ast.Assign(targets=[ast.Name(local, ast.Store())],
                   value=ast.BinOp(left=ast.Name(local, ast.Load()), op=ast.Add(), right=ast.Name(delta, ast.Load()))),
    ]
    return SafeForm("", f"the component write on `{local}` rebuilt as a new value", {}, {}, preserves_forward=True)


def _names_read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_assigned(node: ast.AST) -> set[str]:
    found = set()
    for child in ast.walk(node):
        targets = []
        if isinstance(child, ast.Assign):
            targets = child.targets
        elif isinstance(child, (ast.AugAssign, ast.AnnAssign)):
            targets = [child.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    found.add(name.id)
    return found


def _range_loop(loop: ast.stmt) -> bool:
    return isinstance(loop, ast.For) and _callee(loop.iter) == "range" and isinstance(loop.target, ast.Name)


def _constant(node: ast.expr, context: Context) -> int | None:
    """The integer value of a loop bound known before the kernel runs: a literal, a module
    constant, ``wp.static(...)`` of one, or arithmetic on those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        value = context.constants.get(node.id)
        value = getattr(value, "val", value)  # wp.constant(...) wraps the value in some releases
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant(node.operand, context)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        left, right = _constant(node.left, context), _constant(node.right, context)
        if left is None or right is None:
            return None
        return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]
    if isinstance(node, ast.Call) and _callee(node) == "static" and len(node.args) == 1:
        return _constant(node.args[0], context)
    return None


def _dynamic(loop: ast.stmt, context: Context) -> bool:
    """Whether Warp generates a dynamic loop (whose adjoint does not keep each pass's values) for ``loop``."""
    if getattr(loop, "lineno", None) is None:
        return False  # a static loop an earlier rewrite made
    if not _range_loop(loop):
        return True  # while loops, iteration over arrays
    if any(isinstance(n, ast.Break) for n in _own_nodes(loop.body)):
        return True  # Warp keeps a loop with its own `break` dynamic (a nested loop's is the nested loop's)
    bounds = [_constant(a, context) for a in loop.iter.args]
    if any(b is None for b in bounds) or (len(bounds) == 3 and bounds[2] == 0):
        return True
    forced = any(_callee(a) == "static" for a in loop.iter.args)
    return not forced and len(range(*bounds)) > context.max_unroll


def _known_trips(loop: ast.For | ast.While, context: Context) -> int | None:
    """The loop's unroll count where its bound is known (a constant, an integer parameter, an
    array's extent, an expression of integer parameters); None where it is a guess (a `while`, a
    range up to a value the function computes)."""
    if isinstance(loop, ast.While):
        return None
    args = loop.iter.args
    stop = args[1] if len(args) >= 2 else args[0]
    step = _range_step(loop)
    if step is not None and step < 0:
        # `range(n - 1, -1, -1)` runs from its start down to its stop: its start bounds it.
        first, last = _upper_bound(args[0], context), _constant(stop, context)
        return None if first is None or last is None else max(0, min(-((last - first) // -step), UNROLL))
    known = _constant(stop, context)
    if known is not None:
        return max(0, min(known, UNROLL))
    if isinstance(stop, ast.Name) and stop.id in context.int_bounds:
        return min(context.int_bounds[stop.id], UNROLL)
    if (isinstance(stop, ast.Subscript) and isinstance(stop.value, ast.Attribute) and stop.value.attr == "shape"
            and isinstance(stop.value.value, ast.Name) and stop.value.value.id in context.array_ndims):
        return 16 if context.array_ndims[stop.value.value.id] == 1 else 4
    names = {n.id for n in ast.walk(stop) if isinstance(n, ast.Name)}
    if names and names <= set(context.int_bounds):
        bound = _upper_bound(stop, context)
        return UNROLL if bound is None else max(0, min(bound, UNROLL))
    return None


def _upper_bound(node: ast.expr, context: Context) -> int | None:
    """The most an expression of integer parameters can be on synthesized inputs (each parameter
    at most its bound): sums, a constant subtracted, products by a non-negative constant. None
    where that needs a lower bound (a parameter subtracted) or is not arithmetic."""
    known = _constant(node, context)
    if known is not None:
        return known
    if isinstance(node, ast.Name):
        return context.int_bounds.get(node.id)
    if not isinstance(node, ast.BinOp):
        return None
    left, right = _upper_bound(node.left, context), _upper_bound(node.right, context)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Add):
        return left + right
    constant_right = _constant(node.right, context)
    if isinstance(node.op, ast.Sub) and constant_right is not None:
        return left - constant_right
    if isinstance(node.op, ast.Mult):
        constant_left = _constant(node.left, context)
        if constant_left is not None and constant_left >= 0:
            return constant_left * right
        if constant_right is not None and constant_right >= 0:
            return left * constant_right
    return None


def _trips(loop: ast.For | ast.While, context: Context) -> int:
    """How many iterations the loop can run on synthesized inputs: its unroll count (a loop of
    unknown bound: UNROLL; one that runs longer makes a safe form whose forward differs, which says so)."""
    known = _known_trips(loop, context)
    return UNROLL if known is None else known


def _range_step(loop: ast.For) -> int | None:
    """The step of `for ... in range(...)`: 1 where none is given, the literal's value (a
    negative one too), None where it is not a non-zero integer literal."""
    args = loop.iter.args
    if len(args) < 3:
        return 1
    literal = args[2]
    negative = isinstance(literal, ast.UnaryOp) and isinstance(literal.op, ast.USub)
    value = literal.operand if negative else literal
    if not (isinstance(value, ast.Constant) and type(value.value) is int and value.value != 0):
        return None
    return -value.value if negative else value.value


def _unroll(loop: ast.For | ast.While, serial: str, trips: int = UNROLL) -> list[ast.stmt]:
    """`for j in range(a, b)` -> a `range(wp.static(trips))` loop guarded by `j < b` (forced
    unroll); `while c:` -> the same static loop running the body while `c` holds. A `break` becomes
    a flag that guards the rest of the loop, a `continue` one that guards the rest of the iteration."""
    if loop.orelse:
        raise NoSafeForm("a loop with an `else` clause")
    going = f"_wl_go{serial}"
    breaks = any(isinstance(n, ast.Break) for n in _own_nodes(loop.body))
    body = _without_jump(loop.body, ast.Break, going) if breaks else loop.body
    if any(isinstance(n, ast.Continue) for n in _own_nodes(body)):
        staying = f"_wl_on{serial}"
        body = ([ast.Assign(targets=[ast.Name(staying, ast.Store())], value=ast.Constant(True))]
                + _without_jump(body, ast.Continue, staying))
    counter = f"_wl_k{serial}"
    static = _call(_warp("static"), ast.Constant(trips))
    flag = [ast.Assign(targets=[ast.Name(going, ast.Store())], value=ast.Constant(True))]
    if isinstance(loop, ast.While):
        stop = ast.Assign(targets=[ast.Name(going, ast.Store())], value=ast.Constant(False))
        step = ast.If(test=ast.Name(going, ast.Load()),
                      body=[ast.If(test=loop.test, body=body, orelse=[stop])], orelse=[])
        return flag + [ast.For(target=ast.Name(counter, ast.Store()), iter=_call("range", static), body=[step],
                               orelse=[])]
    args = loop.iter.args
    if not 1 <= len(args) <= 3 or loop.iter.keywords:
        raise NoSafeForm("an unusual range()")
    start = args[0] if len(args) >= 2 else ast.Constant(0)
    stop = args[1] if len(args) >= 2 else args[0]
    step = _range_step(loop)
    if step is None:
        raise NoSafeForm("a range() whose step is not an integer literal")
    low, high = f"_wl_lo{serial}", f"_wl_hi{serial}"
    index = ast.BinOp(left=ast.Name(low, ast.Load()), op=ast.Add(),
                      right=ast.BinOp(left=ast.Name(counter, ast.Load()), op=ast.Mult(), right=ast.Constant(step)))
    guard: ast.expr = ast.Compare(left=ast.Name(loop.target.id, ast.Load()), ops=[ast.Lt() if step > 0 else ast.Gt()],
                                  comparators=[ast.Name(high, ast.Load())])
    if breaks:
        guard = ast.BoolOp(op=ast.And(), values=[ast.Name(going, ast.Load()), guard])
    iteration = [ast.Assign(targets=[ast.Name(loop.target.id, ast.Store())], value=index),
                 ast.If(test=guard, body=body, orelse=[])]
    return (flag if breaks else []) + [
        ast.Assign(targets=[ast.Name(low, ast.Store())], value=start),
        ast.Assign(targets=[ast.Name(high, ast.Store())], value=stop),
        ast.For(target=ast.Name(counter, ast.Store()), iter=_call("range", static), body=iteration, orelse=[]),
    ]


def _own_nodes(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of a loop body outside the loops and functions nested in it (whose `break` and
    `continue` are their own)."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.For, ast.While, ast.FunctionDef)):
            continue
        for block in _statement_lists(statement):
            yield from _own_nodes(block)


def _without_jump(body: list[ast.stmt], jump: type[ast.Break] | type[ast.Continue], flag: str) -> list[ast.stmt]:
    """``body`` with this loop's ``jump`` (`break` or `continue`) turned into `flag = False`, and
    what follows a statement that may jump run only while `flag` holds."""
    rewritten: list[ast.stmt] = []
    for position, statement in enumerate(body):
        if isinstance(statement, jump):
            rewritten.append(ast.Assign(targets=[ast.Name(flag, ast.Store())], value=ast.Constant(False)))
            return rewritten  # nothing after the jump runs
        may_jump = not isinstance(statement, (ast.For, ast.While, ast.FunctionDef)) and any(
            isinstance(n, jump) for n in _own_nodes([statement]))
        if may_jump:
            statement = copy.copy(statement)
            for field in ("body", "orelse", "finalbody"):
                block = getattr(statement, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    setattr(statement, field, _without_jump(block, jump, flag))
        rewritten.append(statement)
        if may_jump:
            rest = _without_jump(body[position + 1:], jump, flag)
            if rest:
                rewritten.append(ast.If(test=ast.Name(flag, ast.Load()), body=rest, orelse=[]))
            return rewritten
    return rewritten


def _replace_statement(definition: ast.FunctionDef, old: ast.stmt, new: list[ast.stmt]) -> None:
    def visit(block: list[ast.stmt]) -> bool:
        for position, statement in enumerate(block):
            if statement is old:
                block[position:position + 1] = new
                return True
            for inner in _statement_lists(statement):
                if visit(inner):
                    return True
        return False

    if not visit(definition.body):
        raise RewriteError("loop not found")


def _unrolled_size(statement: ast.stmt, loops: list[ast.stmt], trips: dict[int, int]) -> int:
    """Statements ``statement`` becomes once the loops among ``loops`` in it are unrolled."""
    inner = sum(_unrolled_size(child, loops, trips) for block in _statement_lists(statement) for child in block)
    if any(statement is loop for loop in loops):
        return 1 + trips[id(statement)] * inner
    return 1 + inner


def _unroll_all(definition: ast.FunctionDef, loops: list[ast.stmt], why: str, context: Context) -> SafeForm:
    if not loops:
        raise NoSafeForm(f"no dynamic `for ... in range(...)` loop {why}")
    depth = {}
    for loop in loops:
        if not (isinstance(loop, ast.While) or _range_loop(loop)):
            raise NoSafeForm("a loop that is not `for ... in range(...)` or `while`")
        nested = sum(1 for other in loops if other is not loop and any(n is loop for n in ast.walk(other)))
        depth[id(loop)] = nested
    trips = {id(loop): _trips(loop, context) for loop in loops}

    def sizes() -> tuple[int, int]:
        bodies = 1
        for loop in loops:
            copies = trips[id(loop)]
            for outer in loops:
                if outer is not loop and any(n is loop for n in ast.walk(outer)):
                    copies *= trips[id(outer)]
            bodies = max(bodies, copies)
        return bodies, sum(_unrolled_size(l, loops, trips) for l in loops if depth[id(l)] == 0)

    bodies, statements = sizes()
    # A loop whose trip count is a guess (a `while`, a range up to a value computed in the
    # function) gets as many trips as fit: a draw that needs more makes a safe form whose forward
    # differs, which says so.
    guessed = [loop for loop in loops if _known_trips(loop, context) is None]
    allowed = min(UNROLL_STATEMENTS, context.statements)
    while ((bodies > min(UNROLL_BUDGET, context.budget) or statements > allowed)
           and any(trips[id(loop)] > MIN_GUESSED_TRIPS for loop in guessed)):
        for loop in guessed:
            trips[id(loop)] = max(MIN_GUESSED_TRIPS, trips[id(loop)] - 1)
        bodies, statements = sizes()
    if bodies > min(UNROLL_BUDGET, context.budget):
        raise NoSafeForm(f"unrolling {len(loops)} loop(s) would copy a body {bodies} times")
    if statements > allowed:
        raise NoSafeForm(f"unrolling {len(loops)} loop(s) would add {statements} statements: too large to compile")
    context.budget -= bodies
    context.statements -= statements
    # Innermost first: an outer loop's body then already holds the unrolled inner one.
    for serial, loop in enumerate(sorted(loops, key=lambda l: -depth[id(l)])):
        _replace_statement(definition, loop, _unroll(loop, f"{serial}_{loop.lineno}", trips[id(loop)]))
    return SafeForm("", f"{len(loops)} dynamic loop(s) {why} made static (unrolled, guarded by the original bounds)",
                    {}, {}, preserves_forward=True)


def _static_enclosing_loops(definition: ast.FunctionDef, block: list[ast.stmt], index: int, context: Context) -> SafeForm:
    """WL104: the dynamic loops around the flagged statement become static loops, whose adjoint
    replays every iteration with its own values."""
    loops = [s for s in enclosing(definition, block[index]) if isinstance(s, (ast.For, ast.While))]
    return _unroll_all(definition, [l for l in loops if _dynamic(l, context)], "around the flagged statement",
                       context)


def has_dynamic_loops(source: str, constants: dict[str, object] | None = None, max_unroll: int = 16) -> bool:
    """Whether Warp generates a dynamic loop anywhere in the function."""
    context = Context([], constants or {}, max_unroll)
    return any(isinstance(n, (ast.For, ast.While)) and _dynamic(n, context) for n in ast.walk(parse_function(source)))


def _static_all_loops(definition: ast.FunctionDef, block: list[ast.stmt], index: int, context: Context) -> SafeForm:
    """Every dynamic loop of the function made static (the isolation of a hazard whose kernel
    also replays dynamic loops, flagged or not): given last, after the statements' own forms."""
    loops = [n for n in ast.walk(definition) if isinstance(n, (ast.For, ast.While)) and _dynamic(n, context)]
    return _unroll_all(definition, loops, "in the function", context)


def _static_feeding_loops(definition: ast.FunctionDef, block: list[ast.stmt], index: int, context: Context) -> SafeForm:
    """WL107: the dynamic loops before the flagged use that update what it reads (directly or
    through locals computed from them) become static loops."""
    loops = [loop for loop, _ in _feeding_loops(definition, block[index], context)]
    # A loop nested in another selected loop is unrolled with it.
    outermost = [l for l in loops if not any(o is not l and any(n is l for n in ast.walk(o)) for o in loops)]
    inner = [l for l in loops if l not in outermost]
    return _unroll_all(definition, outermost + inner, "that feed the flagged use", context)


def _feeding_loops(definition: ast.FunctionDef, statement: ast.stmt, context: Context
                   ) -> list[tuple[ast.stmt, list[ast.stmt]]]:
    """The dynamic loops before ``statement`` (not around it) that update what it reads, directly
    or through locals computed from them, each with its statements that do."""
    needed = _names_read(statement)
    loops: list[tuple[ast.stmt, list[ast.stmt]]] = []
    # Walk the function's statements before the flagged one, last first, growing the set of
    # names the flagged use depends on.
    # Statements an earlier rewrite inserted have no line: they are warp-lint's, never a loop to unroll.
    ordered = [s for s in _flatten(definition.body) if getattr(s, "lineno", None) is not None
               and s.lineno < statement.lineno]
    around = {id(s) for s in enclosing(definition, statement)}
    for earlier in reversed(ordered):
        if isinstance(earlier, (ast.For, ast.While)):
            if id(earlier) in around:
                continue
            if _names_assigned(earlier) & needed:
                updates = [s for s in _flatten(earlier.body) if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                           and _names_assigned(s) & needed]
                loops.append((earlier, updates))
                needed |= _names_read(earlier)
        elif isinstance(earlier, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and _names_assigned(earlier) & needed:
            needed |= _names_read(earlier)
    return [(loop, updates) for loop, updates in loops if _dynamic(loop, context)]


def _flatten(block: list[ast.stmt]) -> Iterator[ast.stmt]:
    for statement in block:
        yield statement
        for inner in _statement_lists(statement):
            yield from _flatten(inner)


NATIVE_ADJOINT_PREFIX = "_wl_fdadj_"
NATIVE_ADJOINT_STEP = 1.0e-3  # relative step of the central differences (float32 values)


def _native_adjoint(definition: ast.FunctionDef, block: list[ast.stmt], index: int, context: Context) -> SafeForm:
    """WL113: each native function the flagged statement calls without an `adj_snippet` is
    called, everywhere in the function, through a copy given an adjoint: a @wp.func calling it,
    with a @wp.func_grad of central differences of the native itself. The forward is the
    native's own; only the missing adjoint changes."""
    natives: dict[str, object] = {}
    for node in ast.walk(block[index]):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            native = context.constants.get(node.func.id)
            if getattr(native, "native_snippet", None) is not None and getattr(native, "adj_native_snippet", 1) is None:
                natives[node.func.id] = native
    if not natives:
        raise NoSafeForm("the flagged statement calls no native function without an adjoint")
    helpers = [_finite_difference_adjoint(name, native) for name, native in natives.items()]
    for node in ast.walk(definition):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in natives:
            node.func = ast.Name(NATIVE_ADJOINT_PREFIX + node.func.id, ast.Load())
    names = ", ".join(f"`{name}`" for name in natives)
    return SafeForm("", f"the native {names} given an adjoint by central differences of itself", {}, {},
                    preserves_forward=True, helpers=helpers)


def _warp_type_text(t: object) -> tuple[str, str]:
    """(annotation text in a generated module, kind: float | vector | matrix | other) of a native's
    parameter or result type; float32 values only are differentiated."""
    name = getattr(t, "__name__", "")
    if t is float or name == "float32":
        return f"{WARP_ALIAS}.float32", "float"
    if t is int:
        return f"{WARP_ALIAS}.int32", "other"
    if t is bool:
        return f"{WARP_ALIAS}.bool", "other"
    if name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"):
        return f"{WARP_ALIAS}.{name}", "other"
    shape = getattr(t, "_shape_", None)
    scalar = getattr(getattr(t, "_wp_scalar_type_", None), "__name__", None)
    if shape is not None and scalar == "float32" and len(shape) == 1:
        return f"{WARP_ALIAS}.types.vector(length={shape[0]}, dtype={WARP_ALIAS}.float32)", "vector"
    if shape is not None and scalar == "float32" and len(shape) == 2 and "quat" not in name and "transform" not in name:
        return f"{WARP_ALIAS}.types.matrix(shape={tuple(shape)}, dtype={WARP_ALIAS}.float32)", "matrix"
    raise NoSafeForm(f"the native function takes or returns a {name or t!r}: no finite-difference adjoint for it")


def _finite_difference_adjoint(name: str, native: object) -> str:
    """The template of a @wp.func calling the native ``name`` and its @wp.func_grad: central
    differences of the native along each float32 argument (each component of a vector),
    contracted with the adjoint of its result."""
    params = list(getattr(native, "input_types", {}).items())
    function = getattr(native, "func", None)
    result = getattr(function, "__annotations__", {}).get("return")
    if isinstance(result, str):  # `from __future__ import annotations`: the text, seen from the native's module
        try:
            result = eval(result, dict(getattr(function, "__globals__", {})))  # noqa: S307 - the user's own annotation
        except Exception:  # noqa: BLE001
            raise NoSafeForm(f"the result type of `{name}` ({result}) does not resolve") from None
    if not params or result is None:
        raise NoSafeForm(f"`{name}` returns nothing: it writes through its arguments")
    typed = [(param, *_warp_type_text(t)) for param, t in params]
    result_text, result_kind = _warp_type_text(result)
    contract = {"float": "({}) * adj_ret", "vector": f"{WARP_ALIAS}.dot({{}}, adj_ret)",
                "matrix": f"{WARP_ALIAS}.ddot({{}}, adj_ret)"}.get(result_kind)
    if contract is None:
        raise NoSafeForm(f"`{name}` returns an integer: no gradient leaves it")
    signature = ", ".join(f"{param}: {text}" for param, text, _ in typed)
    arguments = [param for param, _, _ in typed]
    lines = [f"@{WARP_ALIAS}.func", f"def {{prefix}}{name}({signature}) -> {result_text}:",
             f"    return {name}({', '.join(arguments)})", "", "",
             f"@{WARP_ALIAS}.func_grad({{prefix}}{name})", f"def {{prefix}}{name}_grad({signature}, adj_ret: {result_text}):"]

    def difference(position: int, up: str, down: str) -> str:
        """The native at the arguments with the one at ``position`` moved up, minus moved down."""
        def call(moved: str) -> str:
            return f"{name}({', '.join(moved if k == position else a for k, a in enumerate(arguments))})"
        return contract.format(f"{call(up)} - {call(down)}")

    for position, (param, _, kind) in enumerate(typed):
        if kind == "float":
            lines += [f"    _wl_h = {WARP_ALIAS}.max({WARP_ALIAS}.abs({param}), 1.0) * {NATIVE_ADJOINT_STEP}",
                      f"    {WARP_ALIAS}.adjoint[{param}] += ({difference(position, f'{param} + _wl_h', f'{param} - _wl_h')})"
                      " / (2.0 * _wl_h)"]
        elif kind == "vector":
            lines.append(f"    _wl_g = {param} - {param}")
            for component in range(int(getattr(params[position][1], "_shape_")[0])):
                lines += [f"    _wl_h = {WARP_ALIAS}.max({WARP_ALIAS}.abs({param}[{component}]), 1.0) * {NATIVE_ADJOINT_STEP}",
                          f"    _wl_e = {param} - {param}", f"    _wl_e[{component}] = _wl_h",
                          f"    _wl_g[{component}] = ({difference(position, f'{param} + _wl_e', f'{param} - _wl_e')}) / (2.0 * _wl_h)"]
            lines.append(f"    {WARP_ALIAS}.adjoint[{param}] += _wl_g")
        elif kind == "matrix":
            raise NoSafeForm(f"`{name}` takes a matrix: no finite-difference adjoint for it")
    if not any(kind in ("float", "vector") for _, _, kind in typed):
        lines.append("    pass")
    return "\n".join(lines)


def _select_branch(definition: ast.FunctionDef, block: list[ast.stmt], index: int, context: Context) -> SafeForm:
    """WL109 / WL108: each `wp.where(c, a, b)` / `wp.select(c, a, b)` / `a if c else b` of the
    statement becomes an `if`/`else` block before it, whose adjoint runs only the branch taken."""
    statement = block[index]
    hoisted: list[ast.stmt] = []
    # Each selection gets a name of its own in the function: another statement's may hold another type.
    taken_names = {n.id for n in ast.walk(definition) if isinstance(n, ast.Name) and n.id.startswith("_wl_sel")}

    class Hoist(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            name = _callee(node)
            if name in ("where", "select") and len(node.args) == 3 and not node.keywords:
                condition, first, second = node.args
                taken, other = (first, second) if name == "where" else (second, first)
                return self._branch(condition, taken, other)
            return node

        def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
            self.generic_visit(node)
            return self._branch(node.test, node.body, node.orelse)

        def _branch(self, condition: ast.expr, taken: ast.expr, other: ast.expr) -> ast.Name:
            name = f"_wl_sel{len(hoisted) + len(taken_names)}"
            hoisted.append(ast.If(test=condition, body=[ast.Assign(targets=[ast.Name(name, ast.Store())], value=taken)],
                                  orelse=[ast.Assign(targets=[ast.Name(name, ast.Store())], value=other)]))
            return ast.Name(name, ast.Load())

    rewritten = Hoist().visit(statement)
    if not hoisted:
        raise NoSafeForm("no wp.where / wp.select / conditional expression in the flagged statement")
    block[index:index + 1] = hoisted + [rewritten]
    return SafeForm("", f"{len(hoisted)} selection(s) turned into if/else blocks", {}, {}, preserves_forward=True)


def _rewrite_calls(block: list[ast.stmt], index: int, rewrite) -> int:
    """Replaces, inner calls first, each call of the statement ``block[index]`` that ``rewrite``
    gives a replacement for (None: kept); how many it replaced."""
    count = 0

    class Rewrite(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            nonlocal count
            self.generic_visit(node)
            replacement = rewrite(node)
            if replacement is None:
                return node
            count += 1
            return replacement

    block[index] = Rewrite().visit(block[index])
    return count


def _guarded_sqrt(definition: ast.FunctionDef, block: list[ast.stmt], index: int, context: Context) -> SafeForm:
    """WL110: `wp.sqrt(q)` / `wp.pow(q, 0.5)` of the statement guarded at zero (`sqrt(q)` when
    `q > 0`, else 0), the gradient `wp.length` gives."""
    def guarded(node: ast.Call) -> ast.AST | None:
        name = _callee(node)
        if (name == "sqrt" and len(node.args) == 1) or (name == "pow" and len(node.args) == 2 and _is_half(node.args[1])):
            return _call("_wl_sqrt_guarded", node.args[0])
        return None

    count = _rewrite_calls(block, index, guarded)
    if not count:
        raise NoSafeForm("no wp.sqrt / wp.pow(q, 0.5) in the flagged statement")
    return SafeForm("", f"{count} square root(s) guarded at zero", {}, {}, preserves_forward=True)


def _differentiable_builtin(definition: ast.FunctionDef, block: list[ast.stmt], index: int,
                            context: Context) -> SafeForm:
    """WL117: the statement's builtin without an adjoint written with ones that have one, the
    same values: `frac(x)` as `x - trunc(x)` (trunc's zero gradient is right almost everywhere),
    a statement `atomic_exch(a, i, v)` as the store `a[i] = v` (the same where threads write
    distinct slots)."""
    statement = block[index]

    def differentiable(node: ast.Call) -> ast.AST | None:
        if _callee(node) == "frac" and len(node.args) == 1 and isinstance(node.func, ast.Attribute):
            truncated = ast.Call(ast.Attribute(node.func.value, "trunc", ast.Load()), [node.args[0]], [])
            return ast.BinOp(node.args[0], ast.Sub(), truncated)
        return None

    if isinstance(statement, ast.Expr) and _callee(statement.value) == "atomic_exch" and \
            len(statement.value.args) == 3 and not statement.value.keywords:
        array, slot, value = statement.value.args
        block[index] = ast.Assign([ast.Subscript(array, slot, ast.Store())], value)
        return SafeForm("", "the atomic exchange written as a plain store", {}, {}, preserves_forward=True)
    count = _rewrite_calls(block, index, differentiable)
    if not count:
        raise NoSafeForm("no builtin of the statement has a differentiable form here")
    return SafeForm("", f"{count} wp.frac(x) written as x - wp.trunc(x)", {}, {}, preserves_forward=True)


_COUNTER_ATOMICS = {"atomic_add": "_wl_take", "atomic_sub": "_wl_give"}


def _replayed_counter(definition: ast.FunctionDef, block: list[ast.stmt], index: int, context: Context) -> SafeForm:
    """WL111: the statement's `wp.atomic_add(counter, i, n)` becomes a plain read and store of the
    counter (`_wl_take`), which the backward pass replays where it skips the atomic (and leaves its
    result 0); the harness puts the counter back before the backward pass, so the replay hands each
    thread the slot of the forward pass, as a `@wp.func_replay` returning the recorded slot does.
    Threads replay in launch order on the CPU; on a GPU, where they need not, the counterfactual
    may disagree and decide nothing."""
    counters: list[str] = []

    class Replayed(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            helper = _COUNTER_ATOMICS.get(_callee(node) or "")
            if helper is None or len(node.args) != 3 or node.keywords:
                return node
            counter = node.args[0]
            if isinstance(counter, ast.Name) and counter.id in context.params:
                counters.append(counter.id)
            elif (isinstance(counter, ast.Attribute) and isinstance(counter.value, ast.Name)
                  and counter.value.id in context.params):
                counters.append(f"{counter.value.id}.{counter.attr}")  # a struct's array field
            else:
                return node
            return _call(helper, *node.args)

    block[index] = Replayed().visit(block[index])
    if not counters:
        raise NoSafeForm("no wp.atomic_add(counter, i, n) / wp.atomic_sub on an array parameter in the flagged "
                         "statement")
    names = ", ".join(f"`{name}`" for name in dict.fromkeys(counters))
    return SafeForm("", f"the atomic on {names} made a read and store the backward pass replays, with the counter "
                        "put back before it (each thread's adjoint then reads its own slot, as a @wp.func_replay "
                        "returning the recorded slot gives)",
                    {}, {}, preserves_forward=True, rewound=list(dict.fromkeys(counters)))


# Forms of the whole function rather than of a statement (their line is ignored).
STATIC_ALL_LOOPS = "static-all-loops"
WHOLE_FUNCTION_FORMS = {STATIC_ALL_LOOPS}
# Forms that make loops static: a setting with every dynamic loop made static holds them already.
LOOP_FORMS = {"static-enclosing-loops", "static-feeding-loops"}
# Forms that rewrite expressions of the statement and leave the statement itself in its block.
IN_PLACE_FORMS = {"select-branch", "guarded-sqrt", "replayed-counter", "native-adjoint", "differentiable-builtin"}

SAFE_FORMS = {
    "redirect-write": _redirect_write,
    "rebuild-component": _rebuild_component,
    "static-enclosing-loops": _static_enclosing_loops,
    "static-feeding-loops": _static_feeding_loops,
    "select-branch": _select_branch,
    "guarded-sqrt": _guarded_sqrt,
    "replayed-counter": _replayed_counter,
    "native-adjoint": _native_adjoint,
    "differentiable-builtin": _differentiable_builtin,
    STATIC_ALL_LOOPS: _static_all_loops,
}

# Warp helpers the rewrites call, defined once in every generated module (after `import warp as
# _wl_wp` and `from typing import Any as _wl_Any`). Overloads by value type: a generic `Any` cannot scale a
# vector by a float32 probe of another precision.
HELPERS = '''
@_wl_wp.func
def _wl_is_zero(q: _wl_Any):
    if q == q - q:
        return 1
    return 0


@_wl_wp.func
def _wl_nonfinite(x: _wl_Any):
    if _wl_wp.isfinite(x):
        return 0
    return 1


@_wl_wp.func
def _wl_unselected_nonfinite(c: _wl_Any, taken: _wl_Any, other: _wl_Any):
    if c:
        return _wl_nonfinite(other)
    return _wl_nonfinite(taken)


@_wl_wp.func
def _wl_take(counter: _wl_wp.array(dtype=_wl_Any), i: int, n: _wl_Any):
    old = counter[i]
    counter[i] = old + n
    return old


@_wl_wp.func
def _wl_give(counter: _wl_wp.array(dtype=_wl_Any), i: int, n: _wl_Any):
    old = counter[i]
    counter[i] = old - n
    return old


@_wl_wp.func
def _wl_sqrt_guarded(q: _wl_Any):
    if q > q - q:
        return _wl_wp.sqrt(q)
    return q - q
'''

# The probe scales the value by (1 + s); a scalar also moves by s, so that a value that is exactly
# zero (a square root at its singular point) still shows whether a derivative flows through it.
_THROUGH = '''
@_wl_wp.func
def _wl_through(value: {annotation}, s: _wl_wp.float32, tap: _wl_wp.array(dtype=_wl_wp.float32), k: int,
                hits: _wl_wp.array(dtype=_wl_wp.int32)):
    {accumulate}
    return {probed}
'''

# A transform: its translation is probed (a scaled rotation is no rotation), the rotation passes on.
_THROUGH_TRANSFORM = '''
@_wl_wp.func
def _wl_through(value: _wl_wp.types.transformation(dtype={scalar}), s: _wl_wp.float32,
                tap: _wl_wp.array(dtype=_wl_wp.float32), k: int, hits: _wl_wp.array(dtype=_wl_wp.int32)):
    p = _wl_wp.transform_get_translation(value)
    q = _wl_wp.transform_get_rotation(value)
    _wl_wp.atomic_add(tap, k, _wl_wp.float32(p[0] + {scalar}(2.0) * p[1] + {scalar}(3.0) * p[2]))
    return _wl_wp.transformation(p * {scalar}(1.0 + s), q, dtype={scalar})
'''

# Any other type (integers, structs...): passed on as it is, and counted as not probed.
_THROUGH_OTHERS = '''
@_wl_wp.func
def _wl_through(value: _wl_Any, s: _wl_wp.float32, tap: _wl_wp.array(dtype=_wl_wp.float32), k: int,
                hits: _wl_wp.array(dtype=_wl_wp.int32)):
    _wl_wp.atomic_add(hits, k * {per_slot} + {unprobed}, 1)
    return value
'''

_SCALARS = ("float16", "float32", "float64")


def through_helpers() -> str:
    """``_wl_through`` overloads: scalars, vectors, matrices, quaternions and transforms of each precision."""
    parts = []
    for scalar in _SCALARS:
        cast = f"_wl_wp.{scalar}"
        scaled = f"value * {cast}(1.0 + s)"
        parts.append(_THROUGH.format(annotation=f"_wl_wp.{scalar}", probed=f"{scaled} + {cast}(s)",
                                     accumulate=f"_wl_wp.atomic_add(tap, k, _wl_wp.float32(value))"))
        sum_vector = ("t = _wl_wp.float32(0.0)\n    for i in range(len(value)):\n"
                      "        t += _wl_wp.float32(value[i]) * _wl_wp.float32(i + 1)\n    _wl_wp.atomic_add(tap, k, t)")
        parts.append(_THROUGH.format(annotation=f"_wl_wp.types.vector(length=_wl_Any, dtype=_wl_wp.{scalar})",
                                     probed=scaled, accumulate=sum_vector))
        parts.append(_THROUGH.format(annotation=f"_wl_wp.types.quaternion(dtype=_wl_wp.{scalar})",
                                     probed=scaled, accumulate=sum_vector))
        sum_matrix = ("t = _wl_wp.float32(0.0)\n    for r in range(len(value)):\n"
                      "        for c in range(len(value[r])):\n"
                      "            t += _wl_wp.float32(value[r][c]) * _wl_wp.float32(r + 3 * c + 1)\n"
                      "    _wl_wp.atomic_add(tap, k, t)")
        parts.append(_THROUGH.format(annotation=f"_wl_wp.types.matrix(shape=(_wl_Any, _wl_Any), dtype=_wl_wp.{scalar})",
                                     probed=scaled, accumulate=sum_matrix))
        parts.append(_THROUGH_TRANSFORM.format(scalar=cast))
    parts.append(_THROUGH_OTHERS.format(per_slot=HITS_PER_SLOT, unprobed=HITS_UNPROBED))
    return "".join(parts)
