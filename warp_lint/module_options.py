"""Module-level Warp settings that change what a kernel means.

``wp.config.max_unroll = 4``, ``wp.config.enable_vector_component_overwrites = True``,
``wp.set_module_options({"enable_backward": False})`` and integer constants (``N = 4``,
``N = wp.constant(4)``) are read from the top-level statements, in order; a setting applies to the
kernels defined after it, as Warp reads it when it builds the module. A ``wp.config`` setting in a
test module's ``setUpModule()`` (or pytest's ``setup_module()``) applies to every kernel of the
module: the runner calls it before any test launches one.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from warp_lint.names import WarpNames
from warp_lint.triage import MODULE_SETUP_HOOKS


@dataclasses.dataclass
class Setting:
    key: str
    value: object
    index: int  # top-level statement index
    node: cst.CSTNode
    source: str  # "config" | "module_options"
    module: str | None = None  # `wp.get_module("name").options[KEY] = v`: that named module's; None: this file's


# Options Warp takes from `wp.config` whatever a module sets: its build options fold these in last
# (`context.py`, 1.17 and 1.19). Measured on 1.19: `wp.set_module_options({"enable_vector_component_
# overwrites": True})` leaves an overwritten component's gradient uncut; `wp.config.` cuts it.
CONFIG_ONLY = frozenset({"enable_vector_component_overwrites", "verify_fp", "line_directives",
                         "verify_autograd_array_access"})


class ModuleOptions:
    def __init__(self, settings: list[Setting], constants: dict[str, int]):
        self.settings = settings
        self.constants = constants

    def value(self, key: str, before_index: int, default: object, module: str | None = None) -> object:
        """The setting of ``key`` a kernel defined at ``before_index`` sees: `wp.config` (global),
        and the options of its module: this file's (``module`` None), a named one
        (`@wp.kernel(module="fwd")`), or for `module="unique"` none; for a key Warp takes from
        `wp.config` only (``CONFIG_ONLY``), `wp.config` alone."""
        found = default
        for setting in self.settings:
            if setting.key == key and setting.index < before_index and (setting.source == "config" or (
                    key not in CONFIG_ONLY and setting.module == module and module != "unique")):
                found = setting.value
        return found

    def setting(self, key: str, before_index: int) -> Setting | None:
        found = None
        for setting in self.settings:
            if setting.key == key and setting.index < before_index:
                found = setting
        return found

    def constant(self, node: cst.BaseExpression) -> int | None:
        """The integer value of a compile-time constant expression, else None."""
        if isinstance(node, cst.Integer):
            return int(node.value, 0)
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            inner = self.constant(node.expression)
            return -inner if inner is not None else None
        if isinstance(node, cst.Name):
            return self.constants.get(node.value)
        return None


def _literal(node: cst.BaseExpression) -> object:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    return None


def _config_setting(small: cst.BaseSmallStatement, names: WarpNames, index: int) -> Setting | None:
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        qualified = names.qualify(small.targets[0].target)
        if qualified and qualified.startswith("warp.config."):
            return Setting(qualified.rsplit(".", 1)[1], _literal(small.value), index, small, "config")
    return None


def build_module_options(module: cst.Module, names: WarpNames) -> ModuleOptions:
    settings: list[Setting] = []
    constants: dict[str, int] = {}
    for index, statement in enumerate(module.body):
        if isinstance(statement, cst.FunctionDef) and statement.name.value in MODULE_SETUP_HOOKS:
            # The test runner calls it before any test of the module launches (and so builds) a kernel.
            for line in statement.body.body:
                for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
                    setting = _config_setting(small, names, -1)
                    if setting is not None:
                        settings.append(setting)
            continue
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            setting = _config_setting(small, names, index)
            if setting is not None:
                settings.append(setting)
            elif isinstance(small, cst.Assign) and len(small.targets) == 1 and \
                    _named_module_option(small.targets[0].target, names) is not None:
                module, key = _named_module_option(small.targets[0].target, names)
                settings.append(Setting(key, _literal(small.value), index, small, "module_options", module))
            elif isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if isinstance(target, cst.Name):
                    value = small.value
                    if isinstance(value, cst.Call) and names.qualify(value.func) == "warp.constant" and value.args:
                        value = value.args[0].value
                    if isinstance(value, cst.Integer):
                        constants[target.value] = int(value.value, 0)
            elif (
                isinstance(small, cst.Expr)
                and isinstance(small.value, cst.Call)
                and names.qualify(small.value.func) == "warp.set_module_options"
                and small.value.args
                and isinstance(small.value.args[0].value, cst.Dict)
            ):
                for element in small.value.args[0].value.elements:
                    if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString):
                        settings.append(
                            Setting(element.key.evaluated_value, _literal(element.value), index, small, "module_options")
                        )
    return ModuleOptions(settings, constants)


def _named_module_option(target: cst.BaseExpression, names: WarpNames) -> tuple[str | None, str] | None:
    """`wp.get_module("name").options["KEY"]` as ("name", "KEY"); `wp.get_module(__name__)` is this
    file's module (None); anything else, None."""
    if not (isinstance(target, cst.Subscript) and len(target.slice) == 1
            and isinstance(target.slice[0].slice, cst.Index)
            and isinstance(target.slice[0].slice.value, cst.SimpleString)
            and isinstance(target.value, cst.Attribute) and target.value.attr.value == "options"
            and isinstance(target.value.value, cst.Call)):
        return None
    call = target.value.value
    if names.qualify(call.func) != "warp.get_module" or len(call.args) != 1:
        return None
    key = target.slice[0].slice.value.evaluated_value
    argument = call.args[0].value
    if isinstance(argument, cst.Name) and argument.value == "__name__":
        return None, key
    if isinstance(argument, cst.SimpleString):
        return argument.evaluated_value, key
    return None
