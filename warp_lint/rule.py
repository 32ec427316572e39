"""The rule API: one class per rule, its docs and examples beside its logic.

A rule declares its code, name, the Warp versions its hazard exists in (a PEP 440 specifier), how
the runtime checker confirms it, and its examples. The examples are the tests (every ``INVALID``
example must produce the rule's code, every ``VALID`` one must not, every ``fixed`` must be what
``--fix`` produces) and the docs (the first of each becomes "Example" / "Use instead"). A rule is
fixable exactly when one of its examples has a ``fixed`` form, and a test checks that a rule that
claims no fix never emits one.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from warp_lint.context import FileContext
    from warp_lint.project_context import ProjectContext

REQUIRED_SECTIONS = ("What it does", "Why is this bad?", "Fix safety", "Warp versions", "Confirmation")


@dataclasses.dataclass(frozen=True)
class Example:
    code: str
    fixed: str | None = None  # what --fix (or --unsafe-fixes, for unsafe fixes) turns ``code`` into
    target: str | None = None  # a target Warp version specifier the example assumes


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    affected_versions: ClassVar[str] = ""  # "" means every Warp version
    runtime_strategy: ClassVar[tuple[str, ...]] = ()  # "gradcheck", "overwrite-tracking", "replay"
    # How the runtime checker rewrites the flagged statement into its safe form, the counterfactual
    # a disagreement must vanish in before a finding is confirmed (a name in
    # warp_lint.runtime.rewrite.SAFE_FORMS); None: findings can be cleared, never confirmed.
    safe_form: ClassVar[str | None] = None
    # Value-dependent rules: the singular point the checker drives the guarded operand to
    # ("sqrt-zero", "unselected-nonfinite"); a finding is only cleared once it was reached.
    singular: ClassVar[str | None] = None
    severity: ClassVar[str] = "error"
    # In the default selection: the rule's findings are wrong gradients. False for advice (a check
    # that may be weak, a habit worth having): a user opts in by code, by prefix or with ALL, as
    # with ruff's default selection.
    default: ClassVar[bool] = True
    # "file": a kernel rule, run on one file's kernel model (``FileContext``); "project": a host
    # rule, run once per run on the project model's recordings (``ProjectContext``).
    level: ClassVar[str] = "file"
    # A project rule that reads the model as a whole (``context.torch_functions``), not the
    # recordings: run once per model instead of once per recording.
    reads_recordings: ClassVar[bool] = True
    VALID: ClassVar[list[Example]] = []
    INVALID: ClassVar[list[Example]] = []

    def check(self, context: FileContext | ProjectContext) -> None:
        raise NotImplementedError

    @classmethod
    def fixable(cls) -> bool:
        return any(example.fixed is not None for example in cls.INVALID)

    @classmethod
    def summary(cls) -> str:
        """The first line of the docstring: the one-line description."""
        return inspect.getdoc(cls).strip().splitlines()[0]

    @classmethod
    def sections(cls) -> dict[str, str]:
        text = inspect.getdoc(cls) or ""
        found: dict[str, str] = {}
        for match in re.finditer(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, re.S | re.M):
            found[match.group(1).strip()] = match.group(2).strip()
        return found

    @classmethod
    def docs(cls) -> str:
        """The rule's page, in ruff's shape, assembled from the docstring and the examples."""
        sections = cls.sections()
        parts = [f"# {cls.name} ({cls.code})", "", cls.summary(), ""]
        derived = {
            "Example": _code_block(cls.INVALID[0].code) if cls.INVALID else "",
            "Use instead": _code_block(cls.VALID[0].code) if cls.VALID else "",
        }
        order = ["What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "Warp versions",
                 "Confirmation", "Options"]
        for title in order:
            body = sections.get(title) or derived.get(title)
            if body:
                parts += [f"## {title}", body, ""]
        facts = [
            f"- Affected Warp versions: `{cls.affected_versions or 'all'}`",
            f"- Fixable: {'yes' if cls.fixable() else 'no'}",
            "- Selected by default: " + ("yes" if cls.default else f"no, advice: opt in with `--extend-select {cls.code}`"),
            f"- Runtime confirmation: {', '.join(cls.runtime_strategy) or 'none'}",
            *([f"- Safe form (the counterfactual of a confirmation): `{cls.safe_form}`"] if cls.safe_form else []),
            *([f"- Value-dependent: confirmed or cleared at inputs where {cls.singular}"] if cls.singular else []),
        ]
        parts += ["## Facts", *facts, ""]
        return "\n".join(parts)


def _code_block(code: str) -> str:
    return "```python\n" + textwrap.dedent(code).strip() + "\n```"
