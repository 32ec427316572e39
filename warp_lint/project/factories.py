"""Where a factory's products go: the Warp definitions that call a func a factory makes.

newton builds its collision and rendering code from factories (`solve = create_solve_mpr(support,
depth_certificate=create_box)`, then `wp.static(solve.portal_core)(...)` in a kernel): a func made
inside a factory is called by whoever holds what the factory returns, or by the users of the
parameter it is handed to. ``FactoryFlow`` follows those values through holders (a local, an
attribute set on a returned local, a tuple element), calls of project functions (the parameter
they bind), factories passed as values and called through parameters, and returns; it answers
None wherever a value goes where it does not follow (a container, a method, an alias of an
attribute), so that the func's context stays unknown there. ``ProjectModel`` mixes it in: the
methods read the model's index, its host calls, its callers of Warp definitions and its static
values.
"""

from __future__ import annotations

import re
from typing import Iterator

from warp_lint.project.index import ModuleInfo, Symbol, WarpDefinition
from warp_lint.project.summary import (
    MODULE_SCOPE,
    AssignOp,
    CallOp,
    FileSummary,
    FunctionSummary,
    ReturnOp,
)

# Holders a factory's product passes through (locals, parameters, tuple elements, attributes)
# before a call of it, followed this far: newton's support functions pass six.
MAX_FACTORY_DEPTH = 8
_ELEMENT = re.compile(r"\[(\d+)\]")
_HEAD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
UNFOLLOWED = "?"  # what ``_carried`` says of an expression that mentions a holder in a way not followed


class FactoryFlow:
    """The factory-following part of ``ProjectModel`` (see the module's docstring)."""

    def _made_callers(self, func: Symbol, name: str) -> list[tuple[Symbol, WarpDefinition]] | None:
        """The kernels and funcs that call a func a factory makes, through what the factory returns:
        `shade = make_shade(config)` in a function whose kernels call `shade(...)`, or `solve =
        make_solver()` whose kernels call `wp.static(solve.core)(...)` after the factory set
        `solve.core = solve_core` (newton makes its collision and rendering code this way). []
        for a func defined at module level or used only by the other definitions of its factory;
        None when it leaves its factory, or a caller holds the result, in a way not followed (an
        argument of a call, an alias, a closure of a host function)."""
        enclosing, separator, _ = func.qualname.rpartition(".<locals>.")
        info = self.index.info_of(func)
        summary = self.index.summary(info) if separator and info is not None else None
        if summary is None:
            return [] if not separator else None
        factory = summary.functions.get(enclosing)
        exports = _exports(factory, name, arguments=True) if factory is not None else None
        closures = [other for qualname, other in summary.functions.items()
                    if qualname.startswith(enclosing + ".<locals>.") and name in other.words]
        if exports is None or any(_exports(closure, name) != [] for closure in closures):
            return None  # a host function nested in the factory hands it on too
        found: list[tuple[Symbol, WarpDefinition]] = []
        for call, argument, positional in _plain_arguments(factory, name):
            # `certificate = depth_certificate(certificate_support)`: the users of the parameter it binds
            callers = self._passed_users(info, factory, call, argument, positional, depth=0)
            if callers is None:
                return None
            found += [c for c in callers if all(c[0] != f[0] for f in found)]
        for position, attribute in exports:
            if attribute.startswith("="):
                callers = self._replaced_callers(attribute[1:])
                if callers is None:
                    return None
                found += [c for c in callers if all(c[0] != f[0] for f in found)]
                continue
            callers = self._holders_callers(Symbol("function", func.module, enclosing, func.path), position,
                                            attribute, depth=0)
            if callers is None:
                return None
            found += [c for c in callers if all(c[0] != f[0] for f in found)]
        return found

    def _replaced_callers(self, target: str) -> list[tuple[Symbol, WarpDefinition]] | None:
        """The callers of the Warp definition that assigning to ``target`` replaces: a module of the
        project (named by the end of the dotted path before the last name, `_src.collision_sdf` in
        `mjwarp._src.collision_sdf.user_sdf`) that defines that name. Warp resolves a kernel's calls
        when it builds the module, so the module's calls reach what was set there. None where no
        one module of the project holds such a definition."""
        path, _, name = target.rpartition(".")
        parts = path.split(".")
        for start in range(1, len(parts)):
            suffix = ".".join(parts[start:])
            modules = [info for module, infos in self.index.modules.items() for info in infos
                       if module == suffix or module.endswith("." + suffix)]
            held = [Symbol("warp", info.name, name, info.path) for info in modules
                    if self.index.warp_definition(Symbol("warp", info.name, name, info.path)) is not None]
            if len(held) == 1:
                return self._callers(held[0], name)
            if held:
                return None
        return None

    def _holders_callers(self, factory: Symbol, position: int | None, attribute: str,
                         depth: int) -> list[tuple[Symbol, WarpDefinition]] | None:
        """The Warp definitions that call element ``position`` (None: the whole result) of what
        ``factory`` returns, then ``attribute`` of it, wherever the project calls the factory."""
        if depth > MAX_FACTORY_DEPTH:
            return None
        name = factory.qualname.rsplit(".", 1)[-1]
        # `wp.static(make_manifold(...))(...)` in a kernel or func: it calls what the factory makes
        found = self._callers(factory, name)
        calls = [(info, function, call) for info, function, call in self._host_calls.get(name, ())
                 if self.index.resolve(info.path, function.qualname, call.func) == factory]
        through = self._calls_through_parameters(factory, name)
        if through is None:
            return None
        for info, function, call in calls + through:
            callers = self._factory_call_users(info, function, call, position, attribute, depth)
            if callers is None:
                return None
            found += callers
        return found

    def _factory_call_users(self, info: ModuleInfo, function: FunctionSummary, call: CallOp, position: int | None,
                            attribute: str, depth: int) -> list[tuple[Symbol, WarpDefinition]] | None:
        """The Warp definitions that call element ``position`` (then ``attribute``) of what one call
        of a factory makes."""
        if call.role == "return" and any(op.__class__ is ReturnOp and op.value is not None
                                         and op.value.call == call.index for op in function.ops):
            # `return make_shade(config)`: the caller is a factory of the same thing
            return self._holders_callers(_function_symbol(info, function), position, attribute, depth + 1)
        holder = _holder(function, call, position, attribute)
        if holder:
            return self._holder_users(info, function, holder, depth)
        if holder == "":
            return []  # the result is kept, but not the part that holds the func
        return self._argument_users(info, function, call, position, attribute, depth)

    def _calls_through_parameters(self, target: Symbol, name: str
                                  ) -> list[tuple[ModuleInfo, FunctionSummary, CallOp]] | None:
        """The calls of ``target`` made through a parameter it is passed for (`create_mpr(...,
        depth_certificate=make_box_certificate)`, then `depth_certificate(support)` in `create_mpr`).
        None where it is passed to what is not followed (a method, an unresolved callee)."""
        found = []
        for info, function, call in self._host_calls_passing(name):
            for argument, positional in _positions(call):
                if not argument.value.plain or \
                        self.index.resolve(info.path, function.qualname, argument.value.code) != target:
                    continue
                bound = self._bound_parameter(info, function, call, argument, positional)
                if bound is None:
                    return None
                callee_info, callee, param = bound
                found += [(callee_info, callee, op) for op in callee.ops if op.__class__ is CallOp and op.func == param]
        return found

    def _passed_users(self, info: ModuleInfo, function: FunctionSummary, call: CallOp, argument, positional: int,
                      depth: int) -> list[tuple[Symbol, WarpDefinition]] | None:
        """The Warp definitions that call what ``argument`` of ``call`` passes on: the users of the
        parameter it binds in each project function the callee may be (a project function, or a
        parameter of ``function`` every caller gives a project function for)."""
        callees = self._callee_functions(info, function, call.func)
        if callees is None or depth > MAX_FACTORY_DEPTH:
            return None
        found: list[tuple[Symbol, WarpDefinition]] = []
        for callee_info, callee in callees:
            param = _bound_name(callee, call, argument, positional)
            users = self._holder_users(callee_info, callee, param, depth + 1) if param is not None else None
            if users is None:
                return None
            found += users
        return found

    def _callee_functions(self, info: ModuleInfo, function: FunctionSummary, code: str
                          ) -> list[tuple[ModuleInfo, FunctionSummary]] | None:
        """The project functions a call's callee ``code`` may be: the one it resolves to, or, for a
        parameter of ``function``, what every call of ``function`` passes for it (a default of None
        is no callee: the call is guarded). None where that is not known: a method, a public
        function users may call with anything, a value that cannot be named."""
        symbols: set[Symbol] = set()
        param = next((p for p in function.params if p.name == code), None)
        if param is None:
            resolved = self.index.resolve(info.path, function.qualname, code)
            symbols = {resolved} if resolved is not None else set()
        else:
            owner = _function_symbol(info, function)
            if function.owner is not None or param.kind != "positional" and param.kind != "keyword_only" or \
                    self._public(owner):
                return None
            name = function.qualname.rsplit(".", 1)[-1]
            position = [p.name for p in function.params if p.kind == "positional"].index(code) \
                if param.kind == "positional" else None
            if self._calls_through_parameters(owner, name) or any(
                    self.index.resolve(i.path, f.qualname, a.value.code) == owner
                    for i, f, c in self._host_calls_passing(name) for a, _ in _positions(c) if a.value.plain):
                return None  # itself passed around: its callers are not all known
            for caller_info, caller, call in self._host_calls.get(name, ()):
                if self.index.resolve(caller_info.path, caller.qualname, call.func) != owner:
                    continue
                if any(a.value.star for a in call.args):
                    return None
                value = call.argument(position, code)
                if value is None:
                    if param.default is None:
                        continue  # not passed, None: the call through it is guarded
                    return None
                values = self.static_values(caller_info, caller, value)
                if values is None:
                    return None
                symbols |= values
        found = []
        for symbol in symbols:
            target = self.index.function(symbol) if symbol.kind == "function" else None
            target_info = self.index.info_of(symbol)
            if target is None or target.owner is not None or target_info is None:
                return None
            found.append((target_info, target))
        return found

    def _argument_users(self, info: ModuleInfo, function: FunctionSummary, call: CallOp, position: int | None,
                        attribute: str, depth: int) -> list[tuple[Symbol, WarpDefinition]] | None:
        """The Warp definitions that call what a factory call makes when the call is itself an
        argument of a project function (`make_contacts(refiner=make_refiner(support))`): the users
        of the parameter it binds there. None when it is used any other way."""
        for op in function.ops:
            if op.__class__ is not CallOp or op.index == call.index:
                continue
            for argument, positional in _positions(op):
                if argument.value.call != call.index:
                    continue
                bound = self._bound_parameter(info, function, op, argument, positional)
                if bound is None:
                    return None
                callee_info, target, param = bound
                held = param + ("" if position is None else f"[{position}]") + attribute
                return self._holder_users(callee_info, target, held, depth + 1)
        return None

    def _bound_parameter(self, info: ModuleInfo, scope: FunctionSummary, call: CallOp, argument,
                         positional: int) -> tuple[ModuleInfo, FunctionSummary, str] | None:
        """The project function ``call`` (in ``scope``) calls, and the name of its parameter that
        ``argument`` (the ``positional``-th positional one, or a keyword) binds; None when that is
        not known for sure: a starred argument, a method, an unresolved callee, `*args`."""
        if argument.value.star or any(a.value.star for a in call.args) or not call.dotted:
            return None
        callee = self.index.resolve(info.path, scope.qualname, call.func)
        target = self.index.function(callee) if callee is not None and callee.kind == "function" else None
        if target is None or target.owner is not None:
            return None
        param = _bound_name(target, call, argument, positional)
        callee_info = self.index.info_of(callee)
        if param is None or callee_info is None:
            return None
        return callee_info, target, param

    def _holder_users(self, info: ModuleInfo, function: FunctionSummary, code: str,
                      depth: int) -> list[tuple[Symbol, WarpDefinition]] | None:
        """The Warp definitions that call ``code`` (`shade`, `solve.core`), where its head is a
        local of ``function`` (or a global of its module): the definitions nested in it, and
        wherever the value is passed on as an argument of a project function or returned.
        None when it goes where this does not follow (an alias, a container, a method)."""
        head = _head(code)
        summary = self.index.summary(info)
        if summary is None or depth > MAX_FACTORY_DEPTH:
            return None
        if function.qualname == MODULE_SCOPE:
            return self._global_holder_users(info, summary, code, depth)
        nested = function.qualname + ".<locals>."
        found = [(d.symbol, d) for d in self.definitions_in(info)
                 if d.symbol.qualname.startswith(nested) and code in _called_codes(d)]
        closures = [other for qualname, other in summary.functions.items()
                    if qualname.startswith(nested) and head in other.words and head not in other.local_names]
        for scope in [function, *closures]:
            passed = self._passed_on(info, scope, code, depth)
            if passed is None:
                return None
            found += passed
        return found

    def _global_holder_users(self, info: ModuleInfo, summary: FileSummary, code: str,
                             depth: int) -> list[tuple[Symbol, WarpDefinition]] | None:
        """``_holder_users`` for a module-level name: the Warp definitions of any file that call it."""
        head = _head(code)
        rest = code[len(head):]
        symbol = self.index.resolve(info.path, MODULE_SCOPE, head)
        if symbol is None or symbol.kind != "value" or symbol.path != info.path:
            return None
        found = []
        for definition, called in self._calls_by_name.get(code.rsplit(".", 1)[-1], ()):
            called = called.replace(" ", "")
            if called.endswith(rest) and self.index.resolve(
                    definition.symbol.path, _scope_of(definition.summary), called[:len(called) - len(rest)]) == symbol:
                found.append((definition.symbol, definition))
        for other_info, other, call in self._host_calls_passing(head):
            if other_info.path == info.path and other.qualname == MODULE_SCOPE:
                continue  # the module's own statements: followed below
            for argument in call.args:
                chain = argument.value.code.replace(" ", "")
                if head in argument.value.names and (not argument.value.plain or self.index.resolve(
                        other_info.path, other.qualname, chain.split("[", 1)[0]) in (symbol, None)):
                    return None  # another function passes it on: not followed
        passed = self._passed_on(info, summary.functions[MODULE_SCOPE], code, depth)
        return None if passed is None else found + passed

    def _passed_on(self, info: ModuleInfo, scope: FunctionSummary, code: str,
                   depth: int) -> list[tuple[Symbol, WarpDefinition]] | None:
        """The Warp definitions that call ``code`` after ``scope``'s own statements hand it on: as
        an argument of a project function (its parameter's users), or as what ``scope`` returns
        (the callers of ``scope`` as a factory). None when it is handed on any other way."""
        head = _head(code)
        found: list[tuple[Symbol, WarpDefinition]] = []
        for op in scope.ops:
            kind = op.__class__
            if kind is CallOp:
                for argument, positional in _positions(op):
                    carried = _carried_in_display(argument.value, head, code)
                    if carried is None:
                        continue
                    bound = self._bound_parameter(info, scope, op, argument, positional)
                    if carried == UNFOLLOWED or bound is None:
                        return None
                    callee_info, target, param = bound
                    users = self._holder_users(callee_info, target, param + carried, depth + 1)
                    if users is None:
                        return None
                    found += users
            elif kind is AssignOp and len(op.pairs) > 1 and op.value is not None and op.value.plain \
                    and all(value is not None and value.code == op.value.code for _, value in op.pairs):
                carried = _carried(op.value, head, code)  # `first, second = pair`
                if carried is None:
                    continue
                element = _ELEMENT.match(carried)
                if element is None or int(element[1]) >= len(op.pairs) or not _is_name(op.pairs[int(element[1])][0]):
                    return None
                users = self._holder_users(info, scope, op.pairs[int(element[1])][0] + carried[element.end():],
                                           depth + 1)
                if users is None:
                    return None
                found += users
            elif kind is AssignOp:
                for target, value in op.pairs:
                    carried = _carried(value, head, code) if value is not None and "(" not in value.code else None
                    if carried is None:
                        continue
                    owner, _, attribute = target.rpartition(".")
                    returned = _returned_position(scope, owner) if owner and _is_name(attribute) else None
                    if returned is not None and carried != UNFOLLOWED and not op.augmented:
                        # `solve.cooperative = certificate.cooperative`, `solve` returned: set on the product
                        users = self._holders_callers(_function_symbol(info, scope), returned[0],
                                                      f".{attribute}{carried}", depth + 1)
                        if users is None:
                            return None
                        found += users
                        continue
                    if carried == UNFOLLOWED or not _is_name(target) or op.augmented:
                        return None  # a container, an attribute of something else: not followed
                    users = self._holder_users(info, scope, target + carried, depth + 1)  # an alias
                    if users is None:
                        return None
                    found += users
            elif kind is ReturnOp and op.value is not None:
                values = [op.value] if op.value.elements is None else list(op.value.elements)
                for position, value in enumerate(values):
                    if "(" in value.code:
                        continue  # what a call returns: its arguments are followed above
                    carried = _carried(value, head, code)
                    if carried == UNFOLLOWED:
                        return None
                    if carried is not None:
                        users = self._holders_callers(_function_symbol(info, scope),
                                                      None if op.value.elements is None else position, carried,
                                                      depth + 1)
                        if users is None:
                            return None
                        found += users
        return found


def _returned_position(function: FunctionSummary, name: str) -> tuple[int | None] | None:
    """Where ``function`` returns its local ``name``: (None,) for the whole result, (k,) for the
    k-th element of a returned tuple; None when it does not return it as itself."""
    if not _is_name(name):
        return None
    for op in function.ops:
        if op.__class__ is ReturnOp and op.value is not None:
            if op.value.code == name:
                return (None,)
            for position, element in enumerate(op.value.elements or ()):
                if element.code == name:
                    return (position,)
    return None


def _bound_name(target: FunctionSummary, call: CallOp, argument, positional: int) -> str | None:
    """The name of ``target``'s parameter that ``argument`` of ``call`` binds; None for a starred
    argument or `*args`/`**kwargs`."""
    if argument.value.star or any(a.value.star for a in call.args):
        return None
    param = next((p for p in target.params if p.name == argument.keyword), None) if argument.keyword else \
        (target.params[positional] if positional < len(target.params) else None)
    return None if param is None or param.kind in ("vararg", "varkw") else param.name


def _positions(call: CallOp) -> Iterator[tuple[object, int]]:
    """Each argument of ``call`` with its place among the positional ones (-1 before the first)."""
    positional = -1
    for argument in call.args:
        positional += argument.keyword is None
        yield argument, positional


def _plain_arguments(factory: FunctionSummary, name: str) -> list[tuple[CallOp, object, int]]:
    """The calls in ``factory`` that pass ``name`` itself as an argument, with the argument and
    its place among the positional ones."""
    return [(op, argument, positional) for op in factory.ops if op.__class__ is CallOp
            for argument, positional in _positions(op) if argument.value.code == name]


def _exports(factory: FunctionSummary, name: str, arguments: bool = False) -> list[tuple[int | None, str]] | None:
    """How the local definition ``name`` leaves ``factory``: (its position in the returned tuple, or
    None for the whole result; "" or the attribute it is set as on a returned local, ".core").
    None when it also leaves another way: passed to a call (with ``arguments``, passed as itself
    is followed elsewhere, ``_plain_arguments``), stored, aliased, returned in a dict."""
    returned: dict[str, int | None] = {}
    for op in factory.ops:
        if op.__class__ is ReturnOp and op.value is not None:
            if _is_name(op.value.code):
                returned[op.value.code] = None
            for position, element in enumerate(op.value.elements or ()):
                if _is_name(element.code):
                    returned[element.code] = position
    exports = [(returned[name], "")] if name in returned else []
    # calls that pass it only as itself: with ``arguments``, the value they make (an assignment's
    # whole value, ``Value.call``) is theirs to follow
    passing = {op.index for op in factory.ops if op.__class__ is CallOp and any(
        a.value.code == name for a in op.args) and not any(
        name in a.value.names and a.value.code != name for a in op.args)} if arguments else set()
    for op in factory.ops:
        kind = op.__class__
        if kind is AssignOp:
            for target, value in op.pairs:
                if value is None or name not in value.names or value.call in passing:
                    continue
                head, _, attribute = target.partition(".")
                if value.code == name and head not in returned and target.count(".") >= 2 and \
                        all(_is_name(part) for part in target.split(".")):
                    exports.append((None, "=" + target))  # `plugins.collision.user_sdf = user_sdf`
                    continue
                if value.code != name or not _is_name(attribute) or head not in returned:
                    return None
                exports.append((returned[head], "." + attribute))
        elif kind is CallOp and any(name in argument.value.names and not (arguments and argument.value.code == name)
                                    for argument in op.args):
            return None
        elif kind is ReturnOp and op.value is not None and name in op.value.names and name not in returned:
            return None
    return exports


def _carried_in_display(value, head: str, code: str) -> str | None:
    """``_carried``, where a tuple display carries ``code`` as an element: `(a, b)` carries `b` as "[1]"."""
    if value.elements is None or value.star:
        return _carried(value, head, code)
    for position, element in enumerate(value.elements):
        carried = _carried(element, head, code)
        if carried is not None:
            return carried if carried == UNFOLLOWED else f"[{position}]{carried}"
    return None if head not in value.names else UNFOLLOWED


def _holder(function: FunctionSummary, call: CallOp, position: int | None, attribute: str) -> str | None:
    """The code that holds element ``position`` of ``call``'s result, then ``attribute`` of it:
    `shade` of `shade = make()`, `solve.core` of `solve = make()`, `gjk` of `gjk = make().core`.
    "" when the result is assigned but never keeps that part; None when it is used another way."""
    if call.role == "assign":
        if call.target is not None:  # one plain target holds the whole result
            if not _is_name(call.target):
                return None
            return call.target + ("" if position is None else f"[{position}]") + attribute
        if position is None:
            return None
        for op in function.ops:
            if op.__class__ is AssignOp and op.value is not None and op.value.call == call.index:
                pairs = op.pairs
                return pairs[position][0] + attribute if position < len(pairs) and _is_name(pairs[position][0]) \
                    else None
        return None
    for op in function.ops:  # `gjk = make().core`, `support = make()[0]`: a part of the result
        if op.__class__ is AssignOp and op.stmt == call.stmt and len(op.pairs) == 1 and position is not None:
            target, value = op.pairs[0]
            kept = value.code.rsplit(")", 1)[-1].replace(" ", "") if value is not None else ""
            element = _ELEMENT.match(kept)
            if _is_name(target) and element is not None and element.end() == len(kept):
                return target + attribute if int(element[1]) == position else ""
        if op.__class__ is AssignOp and op.stmt == call.stmt and len(op.pairs) == 1 and position is None:
            target, value = op.pairs[0]
            kept = value.code.rsplit(")", 1)[-1] if value is not None else ""
            if _is_name(target) and kept.startswith(".") and _is_name(kept[1:]):
                if attribute == kept or attribute.startswith(kept + "."):
                    return target + attribute[len(kept):]
                return ""
    return None


def _called_codes(definition: WarpDefinition) -> set[str]:
    return {code.replace(" ", "") for code in definition.summary.calls_in_body}


def _function_symbol(info: ModuleInfo, function: FunctionSummary) -> Symbol:
    return Symbol("function", info.name, function.qualname, info.path)


def _carried(value, head: str, code: str) -> str | None:
    """Whether the expression ``value`` carries ``code`` (`solve.core`, whose head is ``head``):
    None when it does not (it does not mention ``head``, or it is another attribute of it); else
    the part of ``code`` still to follow past it ("" or ".core"); ``UNFOLLOWED`` when it mentions
    ``head`` another way (inside a call, a container, a subscript)."""
    if head not in value.names:
        return None
    chain = value.code.replace(" ", "")
    if not value.plain or "[" in chain or not (chain == head or chain.startswith(head + ".")):
        return UNFOLLOWED
    if code == chain or code.startswith((chain + ".", chain + "[")):
        return code[len(chain):]
    return None


def _head(code: str) -> str:
    """The name a holder's code starts with: `solve` of `solve.core`, `funcs` of `funcs[0]`."""
    return _HEAD.match(code)[0]


def _is_name(code: str) -> bool:
    return code.isidentifier()


def _scope_of(function: FunctionSummary) -> str:
    head, separator, _ = function.qualname.rpartition(".<locals>.")
    return head if separator else MODULE_SCOPE
