"""The rule catalogue, discovered from the ``warp_lint.rules`` package: no hand-kept list."""

from __future__ import annotations

import functools
import importlib
import pkgutil

from warp_lint.rule import Rule


class RulesNotInstalled(RuntimeError):
    """``warp_lint.rules`` cannot be imported: the package runs from a source checkout without an install."""


NOT_INSTALLED = ("the rule catalogue `warp_lint.rules` cannot be imported: install warp-lint (`pip install -e .` in"
                 " a source checkout), because only the install maps the top-level `rules/` folder to"
                 " `warp_lint.rules`")


@functools.lru_cache(maxsize=1)
def all_rules() -> dict[str, type[Rule]]:
    try:
        import warp_lint.rules as package
    except ModuleNotFoundError as error:
        if error.name != "warp_lint.rules":
            raise
        raise RulesNotInstalled(NOT_INSTALLED) from None

    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        rules = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Rule) and v is not Rule
                 and v.__module__ == module.__name__]
        if len(rules) != 1:
            raise RuntimeError(f"{module.__name__} must define exactly one rule, found {len(rules)}")
        rule = rules[0]
        if rule.code in found:
            raise RuntimeError(f"rule code {rule.code} defined twice")
        found[rule.code] = rule
    return dict(sorted(found.items()))


def select_rules(select: list[str] | None, ignore: list[str], extend_select: list[str] = ()) -> list[type[Rule]]:
    """ruff's selection: codes or prefixes ("WL1"), "ALL"; the longest matching prefix wins.

    Without ``select`` the default set is selected, as broadly as "ALL" (so any ignore prefix beats
    it): every rule but the opt-in advice rules, which only a code, prefix or "ALL" selects.
    """
    chosen = []
    for code, rule in all_rules().items():
        selected = _best_match(code, list(extend_select) + (select if select is not None else []))
        if select is None and rule.default:
            selected = max(selected, 0)
        ignored = _best_match(code, ignore)
        if selected >= 0 and selected > ignored:
            chosen.append(rule)
    return chosen


def _best_match(code: str, patterns) -> int:
    best = -1
    for pattern in patterns:
        if pattern == "ALL":
            best = max(best, 0)
        elif code.startswith(pattern):
            best = max(best, len(pattern))
    return best


def known_selector(pattern: str) -> bool:
    return pattern == "ALL" or any(code.startswith(pattern) for code in all_rules()) or pattern in EXTRA_CODES


# Codes the engine itself emits (input errors, unused suppressions): selectable, not rules.
EXTRA_CODES = {"E902": "io-error", "E999": "syntax-error", "WL900": "unused-noqa"}
