"""Region mode (the default) finds exactly what a whole-file analysis finds, at the same positions.

The engine LibCST-parses only the regions the ``ast`` triage keeps (see ``warp_lint.triage``) and
maps positions back to the file. ``FileSettings(whole_file=True)`` parses the whole file instead.
Every finding (code, positions, message, fix, data) must be the same in both modes, on every rule
example, every fixture under ``tests/`` and a sample of the Warp code shipped with warp-lang.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

from warp_lint.engine import FileSettings
from warp_lint.finding import finding_to_dict
from warp_lint.registry import all_rules
from warp_lint.source import SourceError, decode_source
from warp_lint.testing import example_cases, lint_code
from warp_lint.workspace import lint_source

TESTS = Path(__file__).resolve().parent
# Every fifth Warp file keeps this test near 20 s on two cores; WARP_LINT_EQUIVALENCE_ALL=1 in the
# environment checks every file (about 2 minutes).
WARP_SAMPLE_STEP = 5


def _warp_root() -> Path | None:
    """The installed warp-lang package folder, found without importing warp."""
    spec = importlib.util.find_spec("warp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _warp_sample() -> list[Path]:
    import os

    root = _warp_root()
    if root is None:
        return []
    files = sorted(p for folder in ("examples", "tests") for p in (root / folder).rglob("*.py"))
    step = 1 if os.environ.get("WARP_LINT_EQUIVALENCE_ALL") else WARP_SAMPLE_STEP
    return files[::step]


def _fixtures() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "fixtures" in p.relative_to(TESTS).parts)


def _comparable(findings) -> list[dict]:
    return [finding_to_dict(f) for f in findings]


def _both_modes(path: str, raw: bytes, codes: tuple[str, ...], target: str = "") -> tuple[list, list]:
    source = decode_source(path, raw)
    regions = lint_source(source, FileSettings(codes, target, report_unused_noqa=True))
    whole = lint_source(source, FileSettings(codes, target, report_unused_noqa=True, whole_file=True))
    return _comparable(regions.findings), _comparable(whole.findings)


@pytest.mark.parametrize("case", example_cases(), ids=lambda case: case.id)
def test_rule_examples_match_whole_file_analysis(case):
    example = getattr(case.rule, case.kind)[case.index]
    target = example.target or ""
    for select in ([case.rule.code], None):  # the rule alone, and beside every other rule
        regions = lint_code(example.code, select=select, target=target, report_unused_noqa=True)
        whole = lint_code(example.code, select=select, target=target, report_unused_noqa=True, whole_file=True)
        assert _comparable(regions) == _comparable(whole)


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: str(p.relative_to(TESTS)))
def test_fixtures_match_whole_file_analysis(path):
    regions, whole = _both_modes(str(path), path.read_bytes(), tuple(all_rules()))
    assert regions == whole


@pytest.mark.skipif(_warp_root() is None, reason="warp-lang is not installed")
def test_warp_sources_match_whole_file_analysis():
    """One test over the sample, so a failure lists every differing file at once."""
    root = _warp_root()
    codes = tuple(all_rules())
    differing = []
    checked = 0
    for path in _warp_sample():
        raw = path.read_bytes()
        try:
            decode_source(str(path), raw)
        except SourceError:
            continue
        regions, whole = _both_modes(str(path.relative_to(root)), raw, codes)
        checked += 1
        if regions != whole:
            only_regions = [f for f in regions if f not in whole]
            only_whole = [f for f in whole if f not in regions]
            differing.append(f"{path.relative_to(root)}: regions only {only_regions}, whole file only {only_whole}")
    assert checked, "no Warp files found to compare"
    assert not differing, "\n".join(differing)


# Layouts that stress the region synthesis: nested and adjacent regions, a file without a final
# newline, CRLF line endings, form feeds and other characters str.splitlines() treats as line breaks.
LAYOUTS = {
    "nested_kernels_and_tape": """\
        import warp as wp

        # a comment that is not kept
        class Model:
            @wp.func
            def helper(a: wp.array(dtype=float), i: int):
                a[i] = a[i] * 2.0
            @wp.kernel
            def k(a: wp.array(dtype=float)):
                i = wp.tid()
                v = a[i]
                a[i] = v + 1.0

            def step(self, a):
                tape = wp.Tape()
                with tape:
                    wp.launch(self.k, dim=1, inputs=[a])
                tape.backward()


        if True:
            @wp.kernel
            def k2(x: wp.array(dtype=wp.vec3)):
                x[0][1] = 2.0
        """,
    "no_final_newline": "import warp as wp\n@wp.kernel\ndef k(a: wp.array(dtype=float)):\n    a[0] = a[0] + 1.0",
    "crlf": "import warp as wp\r\n\r\n@wp.kernel\r\ndef k(a: wp.array(dtype=float)):\r\n    v = a[0]\r\n"
            "    a[0] = v * 2.0\r\n",
    "form_feed_and_line_separator": "import warp as wp\n\x0c\ns = 'a\u2028b\x0bc'\n\n@wp.kernel\n"
                                    "def k(a: wp.array(dtype=float)):\n    v = a[0]\n    a[0] = v * 2.0\n",
    "semicolons_and_noqa": "import warp as wp; N = 4\n@wp.kernel\ndef k(a: wp.array(dtype=float)):\n"
                           "    v = a[0]  # noqa: WL102\n    a[0] = v * 2.0  # noqa: WL102\n",
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layouts_match_whole_file_analysis(name):
    text = LAYOUTS[name]
    text = textwrap.dedent(text) if name == "nested_kernels_and_tape" else text
    regions, whole = _both_modes("layout.py", text.encode("utf-8"), tuple(all_rules()))
    assert regions == whole
