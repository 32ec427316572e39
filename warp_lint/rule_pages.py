"""The rule pages under ``docs/rules/``, generated from the rules themselves (and the engine's own
codes), so the documentation a finding links to can never drift from the code."""

from __future__ import annotations

from pathlib import Path

from warp_lint.registry import EXTRA_CODES, all_rules

ENGINE_CODE_PAGES = {
    "E902": "The file could not be read or decoded: a missing file, a permission error, bytes that are not"
            " valid in the declared encoding, an unknown encoding cookie, or a file over the size limit."
            " The rest of the run goes on. Fix the encoding (or add a `# -*- coding: ... -*-` line) and lint again.",
    "E999": "The file is not valid Python for the interpreter warp-lint runs on (or is nested too deeply to"
            " analyse). The position is the parser's. The rest of the run goes on.",
    "WL900": "A `# noqa` comment suppresses nothing on its line (reported with `--report-unused-noqa` or"
             " `report-unused-noqa = true`). The safe fix removes the unused warp-lint codes, or the whole comment"
             " with the spaces before it. A bare `# noqa` silences every linter on its line, so warp-lint reports"
             " it but removes it only as an unsafe fix (`--unsafe-fixes`).",
}


def pages() -> dict[str, str]:
    result = {f"{code}.md": rule.docs() for code, rule in all_rules().items()}
    for code, name in EXTRA_CODES.items():
        result[f"{code}.md"] = f"# {name} ({code})\n\n{ENGINE_CODE_PAGES[code]}\n"
    index = ["# warp-lint rules", "",
             ("The default selection holds every rule whose findings are wrong gradients; the rules marked"
              " *opt-in* are advice (a gradient check that may be too weak) or hazards that only the data decide"
              " (an index loaded from memory), and run only when selected by code, prefix or `ALL`"
              " (`--extend-select WL115`, `extend-select = [\"WL115\"]`), as in ruff."), "",
             "| code | name | affected Warp versions | fix | default | summary |", "|---|---|---|---|---|---|"]
    for code, rule in all_rules().items():
        index.append(f"| [{code}]({code}.md) | {rule.name} | `{rule.affected_versions or 'all'}` |"
                     f" {'yes' if rule.fixable() else ''} | {'yes' if rule.default else 'opt-in'} | {rule.summary()} |")
    for code, name in EXTRA_CODES.items():
        index.append(f"| [{code}]({code}.md) | {name} | | | yes | {ENGINE_CODE_PAGES[code].split('.')[0]}. |")
    result["README.md"] = "\n".join(index) + "\n"
    return result


def write(folder: Path) -> list[str]:
    """Write every page; returns the names that changed."""
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in pages().items():
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(name)
    return changed


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/rules")
    print("\n".join(write(target)) or "up to date")
