"""The project index: every file's summary, and what a name means anywhere in the project.

Names resolve as Python binds them: a function's own definitions and imports, then its module's
definitions, module-level assignments and imports; ``from m import n`` follows ``n`` through
``m``'s own imports (re-exports through ``__init__``, star imports, imports under ``if
TYPE_CHECKING:``), or names the submodule ``m.n``. Attributes follow modules, classes (their
methods, through the bases) and instances (the attributes their methods assign).

Summaries are read lazily through a ``loader`` (the engine's, which caches them by content), so a
file is summarised only when something needs it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Any, Callable, Iterator

from warp_lint.project.layout import is_package_init, module_name, resolve_relative
from warp_lint.project.summary import (
    MODULE_SCOPE,
    NOT_LITERAL,
    WARP_DECORATOR_KINDS,
    ArmOp,
    AssignOp,
    CallOp,
    ClassSummary,
    FileSummary,
    FunctionSummary,
    ImportBinding,
    Loc,
)

MAX_RESOLUTION_DEPTH = 12
# The bases that make a class's `apply` torch's, which runs its `forward`.
AUTOGRAD_FUNCTIONS = frozenset({"torch.autograd.Function", "torch.autograd.function.Function",
                                "torch.autograd.function.InplaceFunction"})


ANNOTATION_PARTS = re.compile(r"[|\[\],]")  # `wp.HashGrid | None`, `Optional[wp.Mesh]`


@dataclasses.dataclass(frozen=True)
class Symbol:
    """A resolved name. ``kind``: module, function (host), class, warp (kernel, func or struct),
    value (a module-level assignment that is none of those), external (outside the project)."""

    kind: str
    module: str  # the module's name; the qualified name for external symbols
    qualname: str = ""  # inside the module
    path: str = ""

    @property
    def display(self) -> str:
        return self.qualname or self.module


@dataclasses.dataclass
class ModuleInfo:
    name: str
    path: str
    is_package: bool
    summary: FileSummary | None = None
    loaded: bool = False
    bindings: dict | None = None  # scope -> local name -> ImportBinding, built on first use
    mentions_warp: bool = True  # whether the file's bytes mention `warp` (the project model's eager set)


@dataclasses.dataclass(frozen=True)
class WarpDefinition:
    """A kernel, ``@wp.func`` or struct, with what its decorators say."""

    symbol: Symbol
    summary: FunctionSummary
    kind: str  # kernel | func | func_grad | func_replay | func_native | struct
    options: dict[str, Any]  # decorator keywords (``**OPTIONS`` expanded where the dict is literal)
    backward_disabled: str | None  # why backward is off, in words, else None
    generic: bool = False
    disabled_at: Loc | None = None  # where it is switched off: the decorator or the module setting
    disabled_by: str = ""  # decorator | config | module_options


def _memoized(maxsize: int):
    """Memoise a ProjectIndex method per index. ``functools.lru_cache`` on a method keeps every
    index it has seen alive (and with it every summary: a million objects after a run, which the
    interpreter then spends seconds collecting at exit), and its ``cache_clear`` empties every
    index's cache at once."""

    def decorate(method):
        name = method.__name__

        @functools.wraps(method)
        def memoized(self, *arguments):
            memo = self._memos.get(name)
            if memo is None:
                memo = self._memos[name] = {}
            try:
                return memo[arguments]
            except KeyError:
                pass
            if len(memo) >= maxsize:
                memo.clear()
            value = memo[arguments] = method(self, *arguments)
            return value

        return memoized

    return decorate


class ProjectIndex:
    def __init__(self, files: list[Path], loader: Callable[[str], FileSummary | None]):
        self._loader = loader
        self._memos: dict[str, dict] = {}  # method -> arguments -> result (``_memoized``)
        self.modules: dict[str, list[ModuleInfo]] = {}
        self.by_path: dict[str, ModuleInfo] = {}
        self._resolving: set[tuple[str, str]] = set()
        self._package_tops: dict = {}  # folder -> its topmost package (``module_name``)
        for file in files:
            self.add_file(file)

    def add_file(self, file: Path) -> ModuleInfo:
        key = str(file)
        info = self.by_path.get(key)
        if info is None:
            info = ModuleInfo(module_name(file, self._package_tops), key, is_package_init(file))
            self.by_path[key] = info
            self.modules.setdefault(info.name, []).append(info)
        return info

    def set_summary(self, path: str, summary: FileSummary | None) -> None:
        info = self.add_file(Path(path))
        info.summary, info.loaded, info.bindings = summary, True, None
        self._clear_caches()

    def _clear_caches(self) -> None:
        self._memos.clear()

    def summary(self, info: ModuleInfo) -> FileSummary | None:
        if not info.loaded:
            info.summary, info.loaded = self._loader(info.path), True
        return info.summary

    def infos(self) -> Iterator[ModuleInfo]:
        return iter(self.by_path.values())

    @_memoized(maxsize=1)
    def gradient_free_conditions(self) -> tuple[frozenset[str], ...]:
        """The conditions no run holds together with required gradients, because the project raises
        when they meet (`if model.n > 0 and model.requires_grad: raise ...`): an `if` arm they all
        guard runs only without gradients, as the `else` of `if x.requires_grad:` does."""
        found = set()
        for info in self.infos():
            summary = self.summary(info)
            for function in summary.functions.values() if summary is not None else ():
                found.update(frozenset(op.conditions) for op in function.ops
                             if op.__class__ is ArmOp and op.refuses_gradients)
        return tuple(found)

    # -- modules --------------------------------------------------------------------------
    def module(self, name: str, near: ModuleInfo | None = None) -> ModuleInfo | None:
        candidates = self.modules.get(name)
        if not candidates:
            return None
        if len(candidates) == 1 or near is None:
            return candidates[0]
        # Two scripts folders with a `util.py` each: the importer's own folder is on sys.path.
        folder = str(Path(near.path).parent)
        return next((c for c in candidates if str(Path(c.path).parent) == folder), candidates[0])

    def module_symbol(self, info: ModuleInfo) -> Symbol:
        return Symbol("module", info.name, "", info.path)

    def info_of(self, symbol: Symbol) -> ModuleInfo | None:
        return self.by_path.get(symbol.path) if symbol.path else self.module(symbol.module)

    # -- names ----------------------------------------------------------------------------
    @_memoized(maxsize=65536)
    def resolve(self, path: str, scope: str, code: str) -> Symbol | None:
        """What the dotted name ``code`` means in function ``scope`` (a qualname, or MODULE_SCOPE)
        of the file ``path``; None when it is a local variable, a builtin or unknown."""
        info = self.by_path.get(path)
        if info is None:
            return None
        head, *attributes = code.split(".")
        symbol = self._name(info, scope, head)
        for attribute in attributes:
            if symbol is None:
                return None
            symbol = self.member(symbol, attribute)
        return symbol

    def import_origin(self, path: str, code: str) -> str | None:
        """The project file that the module-level import binding the head of ``code`` in ``path``
        reads from, whether or not that file parses now (a helper it will define once it does)."""
        info = self.by_path.get(path)
        if info is None:
            return None
        binding = self._bindings(info).get(MODULE_SCOPE, {}).get(code.split(".", 1)[0])
        if binding is None:
            return None
        absolute = resolve_relative(info.name, info.is_package, binding.level, binding.module)
        source = self.module(absolute, info) if absolute else None
        return source.path if source is not None and source is not info else None

    def imports_name(self, info: ModuleInfo | None, scope: str, name: str) -> bool:
        """Whether an import written in ``scope`` binds ``name`` (a function's lazy `from .kernels
        import step`: it resolves like a module's import, not like a local variable)."""
        return info is not None and name in self._bindings(info).get(scope, {})

    def _bindings(self, info: ModuleInfo) -> dict[str, dict[str, ImportBinding]]:
        """Scope -> local name -> the import that binds it last."""
        table = info.bindings
        if table is None:
            table = info.bindings = {}
            summary = self.summary(info)
            for binding in summary.imports if summary is not None else ():
                table.setdefault(binding.scope, {})[binding.local] = binding
        return table

    def _name(self, info: ModuleInfo, scope: str, name: str) -> Symbol | None:
        summary = self.summary(info)
        if summary is None:
            return None
        if scope != MODULE_SCOPE:
            bindings = self._bindings(info)
            # a nested function sees its enclosing functions' names: `outer.<locals>.inner`
            parts = scope.split(".<locals>.")
            for length in range(len(parts), 0, -1):
                enclosing = ".<locals>.".join(parts[:length])
                function = summary.functions.get(enclosing)
                if function is not None and name in function.local_functions:
                    return self._local_definition(info, summary, function.local_functions[name])
                binding = bindings.get(enclosing, {}).get(name)
                if binding is not None:
                    return self._import(info, binding)
        return self._module_name(info.path, name)

    def _local_definition(self, info: ModuleInfo, summary: FileSummary, qualname: str) -> Symbol | None:
        if qualname in summary.warp_defs and self.warp_definition(Symbol("warp", info.name, qualname, info.path)):
            return Symbol("warp", info.name, qualname, info.path)
        if qualname in summary.classes:
            return Symbol("class", info.name, qualname, info.path)
        if qualname in summary.functions:
            return Symbol("function", info.name, qualname, info.path)
        return None

    @_memoized(maxsize=131072)
    def _module_name(self, path: str, name: str) -> Symbol | None:
        """``name`` at the top level of the module in ``path``: a definition, an assignment, an import."""
        if (path, name) in self._resolving or len(self._resolving) > MAX_RESOLUTION_DEPTH:
            return None  # an import cycle, or a chain of re-exports too long to follow
        self._resolving.add((path, name))
        try:
            return self._module_name_uncached(self.by_path[path], name)
        finally:
            self._resolving.discard((path, name))

    def _module_name_uncached(self, info: ModuleInfo, name: str) -> Symbol | None:
        summary = self.summary(info)
        if summary is None:
            return None
        found = self._local_definition(info, summary, name)
        if found is not None:
            return found
        value = summary.values.get(name)
        binding = self._bindings(info).get(MODULE_SCOPE, {}).get(name)
        if value is not None and (binding is None or value.line > binding.line):
            if value.value.plain and "[" not in value.value.code and value.value.code != name:
                aliased = self._dotted(info, MODULE_SCOPE, value.value.code)
                if aliased is not None:
                    return aliased
            return Symbol("value", info.name, name, info.path)
        if binding is not None:
            return self._import(info, binding)
        for star in (b for b in summary.imports if b.scope == MODULE_SCOPE and b.name == "*"):
            target = self._imported_module(info, star)
            if target is not None and target is not info:
                found = self._module_name(target.path, name)
                if found is not None:
                    return found
        return None

    def _dotted(self, info: ModuleInfo, scope: str, code: str) -> Symbol | None:
        head, *attributes = code.split(".")
        symbol = self._name(info, scope, head)
        for attribute in attributes:
            if symbol is None:
                return None
            symbol = self.member(symbol, attribute)
        return symbol

    def _imported_module(self, info: ModuleInfo, binding: ImportBinding) -> ModuleInfo | None:
        name = resolve_relative(info.name, info.is_package, binding.level, binding.module)
        return self.module(name, info)

    def _import(self, info: ModuleInfo, binding: ImportBinding) -> Symbol | None:
        absolute = resolve_relative(info.name, info.is_package, binding.level, binding.module)
        summary = self.summary(info)
        warp = summary.warp_aliases.get(binding.local) if summary is not None else None
        if warp is not None:
            return Symbol("external", warp)
        if binding.name is None:  # `import a.b` binds `a`; `import a.b as c` binds `a.b`
            target = absolute if binding.local != absolute.split(".")[0] else absolute.split(".")[0]
            module = self.module(target, info)
            return self.module_symbol(module) if module is not None else Symbol("external", target)
        submodule = self.module(f"{absolute}.{binding.name}" if absolute else binding.name, info)
        source = self.module(absolute, info)
        if source is not None and source is not info:
            found = self._module_name(source.path, binding.name)
            if found is not None:
                return found
        if submodule is not None:
            return self.module_symbol(submodule)
        if source is None:
            return Symbol("external", f"{absolute}.{binding.name}" if absolute else binding.name)
        return None

    def member(self, symbol: Symbol, attribute: str) -> Symbol | None:
        if symbol.kind == "external":
            return Symbol("external", f"{symbol.module}.{attribute}")
        if symbol.kind == "module":
            info = self.info_of(symbol)
            if info is None:
                return None
            found = self._module_name(info.path, attribute)
            if found is not None:
                return found
            submodule = self.module(f"{info.name}.{attribute}", info)
            return self.module_symbol(submodule) if submodule is not None else None
        if symbol.kind == "class":
            return self.class_member(symbol, attribute)
        return None

    # -- classes --------------------------------------------------------------------------
    def class_summary(self, symbol: Symbol) -> ClassSummary | None:
        info = self.info_of(symbol)
        summary = self.summary(info) if info is not None else None
        return summary.classes.get(symbol.qualname) if summary is not None else None

    @_memoized(maxsize=8192)
    def mro(self, symbol: Symbol) -> tuple[Symbol, ...]:
        """The class and its project bases, depth first (enough for the single inheritance of
        simulators and solvers; diamonds keep their first occurrence)."""
        order: list[Symbol] = []
        stack = [symbol]
        while stack and len(order) < 32:
            current = stack.pop(0)
            if current in order:
                continue
            order.append(current)
            summary = self.class_summary(current)
            if summary is None:
                continue
            scope = summary.qualname.rsplit(".", 1)[0] if "." in summary.qualname else MODULE_SCOPE
            bases = [self.resolve(current.path, scope if scope in self._functions(current) else MODULE_SCOPE, b)
                     for b in summary.bases if b and "[" not in b and "(" not in b]
            stack = [b for b in bases if b is not None and b.kind == "class"] + stack
        return tuple(order)

    def _functions(self, symbol: Symbol) -> dict[str, FunctionSummary]:
        info = self.info_of(symbol)
        summary = self.summary(info) if info is not None else None
        return summary.functions if summary is not None else {}

    def class_member(self, symbol: Symbol, attribute: str) -> Symbol | None:
        for cls in self.mro(symbol):
            summary = self.class_summary(cls)
            if summary is None:
                continue
            qualname = summary.methods.get(attribute)
            if qualname is not None:
                kind = "function" if qualname in self._functions(cls) else "warp"
                return Symbol(kind, cls.module, qualname, cls.path)
            nested = f"{summary.qualname}.{attribute}"
            info = self.info_of(cls)
            file_summary = self.summary(info) if info is not None else None
            if file_summary is not None and nested in file_summary.classes:
                return Symbol("class", cls.module, nested, cls.path)
        return None

    def method(self, class_symbol: Symbol, name: str) -> Symbol | None:
        member = self.class_member(class_symbol, name)
        return member if member is not None and member.kind == "function" else None

    @_memoized(maxsize=4096)
    def autograd_forward(self, class_symbol: Symbol) -> Symbol | None:
        """The ``forward`` that ``Cls.apply(...)`` runs where ``Cls`` derives from
        ``torch.autograd.Function`` (``apply`` is torch's: it calls ``forward(ctx, *args)`` and,
        when torch differentiates, ``backward``); None for any other class, or one that defines
        its own ``apply``."""
        if self.class_member(class_symbol, "apply") is not None:
            return None
        for cls in self.mro(class_symbol):
            summary = self.class_summary(cls)
            if summary is None:
                continue
            scope = summary.qualname.rsplit(".", 1)[0] if "." in summary.qualname else MODULE_SCOPE
            scope = scope if scope in self._functions(cls) else MODULE_SCOPE
            for base in summary.bases:
                found = self.resolve(cls.path, scope, base) if base and "[" not in base and "(" not in base else None
                if found is not None and found.kind == "external" and found.module in AUTOGRAD_FUNCTIONS:
                    return self.method(class_symbol, "forward")
        return None

    def function(self, symbol: Symbol) -> FunctionSummary | None:
        return self._functions(symbol).get(symbol.qualname)

    def product(self, callee: Symbol) -> Symbol | None:
        """The kernel a factory function returns: a Warp definition (its own or the module's), or
        one it makes. None when its returns name different ones."""
        if callee.kind == "warp":
            return callee
        if callee.kind != "function":
            return None
        function = self.function(callee)
        info = self.info_of(callee)
        if function is None or info is None:
            return None
        products = set()
        for code in function.returns_code:
            local = function.local_functions.get(code)
            if local is not None:
                products.add(Symbol("warp", info.name, local, info.path))
            elif code.isidentifier() and code not in function.local_names:
                found = self.resolve(info.path, function.qualname, code)
                if found is not None and found.kind == "warp":
                    products.add(found)
        if products:
            return products.pop() if len(products) == 1 else None
        for _, target, _ in function.applies_warp:
            local = function.local_functions.get(target)
            if local is not None:
                return Symbol("warp", info.name, local, info.path)
        return None

    def attribute_value(self, class_symbol: Symbol, attribute: str) -> list[tuple[Symbol, FunctionSummary, Any]]:
        """Where instances of the class get ``self.<attribute>``: (method, its summary, the value)
        for every assignment in a method of the class or its bases."""
        found = []
        for cls in self.mro(class_symbol):
            found += self._assigned_attributes(cls).get(attribute, [])
        return found

    def assigned_attributes(self, cls: Symbol) -> frozenset[str]:
        """The attributes the methods of this class (not its bases) assign on `self`."""
        return frozenset(self._assigned_attributes(cls))

    @_memoized(maxsize=8192)
    def _assigned_attributes(self, cls: Symbol) -> dict[str, list[tuple[Symbol, FunctionSummary, Any]]]:
        """Attribute -> its assignments `self.attribute = value` in the methods of this class."""
        found: dict[str, list] = {}
        summary = self.class_summary(cls)
        if summary is None:
            return found
        functions = self._functions(cls)
        for qualname in summary.methods.values():
            function = functions.get(qualname)
            if function is None or not function.params:
                continue
            prefix = function.params[0].name + "."
            method = Symbol("function", cls.module, qualname, cls.path)
            if not any(word == function.params[0].name for word in function.words):
                continue
            for op in function.ops:
                if op.__class__ is AssignOp and op.augmented is None:
                    for code, value in op.pairs:
                        if value is not None and code.startswith(prefix) and "." not in code[len(prefix):]:
                            found.setdefault(code[len(prefix):], []).append((method, function, value))
        return found

    @_memoized(maxsize=16384)
    def attribute_class(self, cls: Symbol, attribute: str) -> Symbol | None:
        """The class of `obj.attribute` for objects of class ``cls``, as far as the code says: the
        class's annotation of it, or a constructor call its methods assign to it."""
        for klass in self.mro(cls):
            summary = self.class_summary(klass)
            if summary is not None and attribute in summary.attributes:
                found = self.resolve(klass.path, MODULE_SCOPE, summary.attributes[attribute].strip("'\""))
                if found is not None and found.kind == "class":
                    return found
        for method, function, value in self.attribute_value(cls, attribute):
            found = self.constructed_class(method.path, function, value)
            if found is not None:
                return found
        return None

    @_memoized(maxsize=16384)
    def attribute_is_external(self, cls: Symbol, attribute: str) -> bool:
        """Whether `obj.attribute` of objects of class ``cls`` is a library's object, as far as the
        code says: the class annotates it with types from outside the project (``wp.HashGrid |
        None``), or every assignment to it in the class's methods is a call of a library's function
        (``None`` aside)."""
        for klass in self.mro(cls):
            summary = self.class_summary(klass)
            if summary is not None and attribute in summary.attributes:
                types = [t.strip() for t in ANNOTATION_PARTS.split(summary.attributes[attribute].strip("'\""))]
                types = [t for t in types if t and t not in ("None", "Optional", "typing.Optional")]
                return bool(types) and all(
                    (found := self.resolve(klass.path, MODULE_SCOPE, t)) is not None and found.kind == "external"
                    for t in types)
        calls = 0
        for method, function, value in self.attribute_value(cls, attribute):
            if value.literal is None:
                continue
            call = next((op for op in function.ops if op.__class__ is CallOp and op.index == value.call), None)
            callee = self.resolve(method.path, function.qualname, call.func) if call is not None and call.dotted \
                else None
            if call is None or not (call.qualified or (callee is not None and callee.kind == "external")):
                return False
            calls += 1
        return calls > 0

    def constructed_class(self, path: str, function: FunctionSummary, value) -> Symbol | None:
        """The class whose constructor makes ``value`` (a call in ``function``), else None."""
        if value is None or value.call is None:
            return None
        call = next((op for op in function.ops if op.__class__ is CallOp and op.index == value.call), None)
        if call is None or not call.dotted:
            return None
        callee = self.resolve(path, function.qualname, call.func)
        return callee if callee is not None and callee.kind == "class" else None

    # -- Warp definitions -----------------------------------------------------------------
    @_memoized(maxsize=65536)
    def warp_definition(self, symbol: Symbol) -> WarpDefinition | None:
        """The kernel, func or struct ``symbol`` names, judged by its decorators (Warp's own, or a
        project decorator that applies ``wp.kernel``/``wp.func``), else None."""
        info = self.info_of(symbol)
        summary = self.summary(info) if info is not None else None
        if summary is None:
            return None
        function = summary.warp_defs.get(symbol.qualname)
        if function is None:
            return self._made_definition(info, summary, symbol)
        for decorator in function.decorators:
            kind = WARP_DECORATOR_KINDS.get(decorator.qualified or "")
            options = dict(decorator.keywords)
            if kind is None:
                scope = _enclosing_scope(function.qualname)
                target = self.resolve(info.path, scope, decorator.code) if decorator.code else None
                applied = self._project_decorator(target) if target is not None else None
                if applied is None:
                    continue
                kind, applied_options = applied
                options = {**applied_options, **options}
            for name in decorator.star_kwargs:
                options.update(self._literal_dict(info, _enclosing_scope(function.qualname), name))
            return _definition(symbol, function, kind, options, summary, decorator.loc)
        return None

    def _made_definition(self, info: ModuleInfo, summary: FileSummary, symbol: Symbol) -> WarpDefinition | None:
        """A local function turned into a kernel by `wp.kernel(...)(f)` in its enclosing factory."""
        function = summary.functions.get(symbol.qualname)
        if function is None or ".<locals>." not in symbol.qualname:
            return None
        enclosing, _, name = symbol.qualname.rpartition(".<locals>.")
        factory = summary.functions.get(enclosing)
        if factory is None:
            return None
        for decorator, target, keywords in factory.applies_warp:
            if target == name:
                kind = WARP_DECORATOR_KINDS[decorator]
                options = {k: v for k, v in keywords if v is not NOT_LITERAL}
                return _definition(symbol, function, kind, options, summary, function.loc)
        return None

    def _project_decorator(self, target: Symbol) -> tuple[str, dict[str, Any]] | None:
        """(kind, options) when ``target`` is a project function that applies a Warp decorator to
        the function it decorates (directly, or through the wrapper it returns)."""
        if target.kind != "function":
            return None
        function = self.function(target)
        if function is None:
            return None
        candidates = [function]
        info = self.info_of(target)
        summary = self.summary(info) if info is not None else None
        for code in function.returns_code:
            nested = function.local_functions.get(code)
            if nested and summary is not None and nested in summary.functions:
                candidates.append(summary.functions[nested])
        for candidate in candidates:
            params = {p.name for p in candidate.params}
            for decorator, argument, keywords in candidate.applies_warp:
                if argument in params:
                    return WARP_DECORATOR_KINDS[decorator], {k: v for k, v in keywords if v is not NOT_LITERAL}
        return None

    def _literal_dict(self, info: ModuleInfo, scope: str, code: str) -> dict[str, Any]:
        symbol = self.resolve(info.path, scope, code)
        if symbol is None or symbol.kind != "value":
            return {}
        target = self.info_of(symbol)
        summary = self.summary(target) if target is not None else None
        value = summary.values.get(symbol.qualname) if summary is not None else None
        return value.literal if value is not None and isinstance(value.literal, dict) else {}

    def warp_definitions(self, info: ModuleInfo) -> list[WarpDefinition]:
        summary = self.summary(info)
        if summary is None:
            return []
        found = []
        for qualname in summary.warp_defs:
            definition = self.warp_definition(Symbol("warp", info.name, qualname, info.path))
            if definition is not None:
                found.append(definition)
        for function in summary.functions.values():
            for _, target, _ in function.applies_warp:
                qualname = function.local_functions.get(target)
                if qualname:
                    definition = self.warp_definition(Symbol("warp", info.name, qualname, info.path))
                    if definition is not None:
                        found.append(definition)
        return found


def _definition(symbol: Symbol, function: FunctionSummary, kind: str, options: dict[str, Any],
                summary: FileSummary, decorator: Loc) -> WarpDefinition:
    """A Warp definition, with whether (and where) its backward is switched off."""
    reason, where, by = None, None, ""
    module_options = options.get("module_options")
    if kind == "struct":
        pass
    elif options.get("enable_backward") is False:
        reason, where, by = "its decorator sets `enable_backward=False`", decorator, "decorator"
    elif isinstance(module_options, dict) and module_options.get("enable_backward") is False:
        reason, where, by = "its decorator's `module_options` set `enable_backward=False`", decorator, "decorator"
    else:
        # Warp reads module options when it builds the module, at the first launch: a setting
        # anywhere at module level applies to every kernel of it, `__main__` blocks included. A
        # kernel of a named module (`@wp.kernel(module="fwd")`) has that module's options
        # (`wp.get_module("fwd").options[...] = ...`); one of its own (`module="unique"`), none of them.
        # `wp.config` is global: every module reads it.
        named = options.get("module") if isinstance(options.get("module"), str) else None
        for setting in summary.settings:
            if setting.source == "module_options" and (setting.module != named or named == "unique"):
                continue
            if setting.key == "enable_backward" and setting.value is False:
                what = (f"`wp.get_module({named!r}).options`" if named else "`wp.set_module_options`") \
                    if setting.source == "module_options" else "`wp.config.enable_backward = False`"
                reason = f"{what} on line {setting.loc.line} disables backward for its module"
                where, by = setting.loc, setting.source
                break
    return WarpDefinition(symbol, function, kind, options, reason, _generic(function), where, by)


def _enclosing_scope(qualname: str) -> str:
    head, separator, _ = qualname.rpartition(".<locals>.")
    return head if separator else MODULE_SCOPE


def _generic(function: FunctionSummary) -> bool:
    return any(p.annotation in ("Any", "typing.Any") for p in function.params)
