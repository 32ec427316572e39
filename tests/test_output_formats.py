"""The CI output formats (github, sarif, gitlab, junit), each compared with a committed expected file
rendered from one shared set of findings, plus the format's own contract (escaping, the SARIF
schema and GitHub code scanning's extra needs, unique GitLab fingerprints, well-formed JUnit).

Regenerate the expected files after an intended change with
``WARP_LINT_UPDATE_EXPECTED=1 pytest tests/test_output_formats.py`` and review the diff.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import warp_lint
from warp_lint import cli
from warp_lint.finding import Applicability, Confirmation, Edit, Finding, Fix, Position
from warp_lint.output import RunReport, renderers
from warp_lint.registry import all_rules
from warp_lint.rule import Example, Rule

HERE = Path(__file__).parent
EXPECTED = HERE / "expected"
SARIF_SCHEMA = HERE / "schemas" / "sarif-schema-2.1.0.json"
UPDATE = bool(os.environ.get("WARP_LINT_UPDATE_EXPECTED"))
ROOT = "/repo"  # the report's root; no file is read, so it need not exist
FORMATS = {"github": "txt", "sarif": "json", "gitlab": "json", "junit": "xml"}
DOCS = "https://docs.example.org/warp-lint/"  # declared by the tests that need links, never by the package
HOME = "https://example.org/warp-lint"

KERNELS = textwrap.dedent("""\
    import warp as wp

    @wp.kernel
    def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        y[i].x = 2.0 * x[i]
        y[i].y = x[i]
        y[i].z = 0.0


    @wp.kernel
    def square(a: wp.array(dtype=float)):
        i = wp.tid()
        a[i] = a[i] * a[i]  # noqa: WL101
    """)
# A file name with the characters workflow-command properties and URIs must escape.
LEGACY_PATH = "/repo/legacy/v1:step 2,old.py"
LEGACY = textwrap.dedent("""\
    import warp as wp

    @wp.kernel
    def relax(x: wp.array(dtype=float), n: int):
        s = x[0]
        for k in range(n):
            s = s * 0.5
        x[1] = s
    """)


def p(line: int, column: int) -> Position:
    return Position(line, column)


def shared_findings() -> list[Finding]:
    """The one set of findings every format renders: what `warp-lint check --target-warp-version
    '<1.14' --report-unused-noqa --confirm` reports on the two files above (WL101 with a safe fix,
    WL102 with a runtime verdict, a WL900 warning with a deletion fix), plus a hand-made message
    holding `%`, `:` and a newline, in a file whose absolute path holds `:`, `,` and a space."""
    whole_element = Fix("Store `y[i]` once", (Edit(p(6, 5), p(8, 17), "y[i] = wp.vec3(2.0 * x[i], x[i], 0.0)"),))
    wl101 = [
        Finding(code="WL101", name="array-component-write", path="sim/kernels.py", start=p(line, 5),
                end=p(line, end), fix=whole_element, affected_versions="<1.14", noqa_row=line,
                message=f"Component `{component}` of `y[i]` is written in place (`=`): its gradient is dropped;"
                        " build the value in a local and store `y[i]` once [Warp <1.14]")
        for line, end, component in ((6, 24, "x"), (7, 18, "y"), (8, 17, "z"))
    ]
    verdict = Confirmation(
        status="confirmed", reason="AD gradient disagrees with finite differences (max error 100%)",
        warp_version="1.4.2", device="cpu", config={"eps": 1e-3, "seed": 0},
        evidence={"max_abs_error": 2.0, "table": "input  AD    FD\na[0]   0.0   2.0"},
    )
    wl102 = Finding(
        code="WL102", name="array-read-then-write", path="sim/kernels.py", start=p(14, 5), end=p(14, 23),
        noqa_row=14, data={"kernel": "square", "strategy": "gradcheck"}, confirmation=verdict,
        message="`a[i]` is overwritten with a value read from `a` itself: the backward pass replays that read"
                " from overwritten memory; write the result to a separate array",
    )
    wl900 = Finding(
        code="WL900", name="unused-noqa", path="sim/kernels.py", start=p(14, 25), end=p(14, 38), severity="warning",
        noqa_row=14, fix=Fix("Remove the unused suppression", (Edit(p(14, 23), p(14, 38), ""),)),
        message="Unused `# noqa` for WL101: nothing is reported here",
    )
    wl104 = Finding(
        code="WL104", name="dynamic-loop-mutation", path=LEGACY_PATH, start=p(7, 9), end=p(7, 20), noqa_row=7,
        message="`s` is rescaled inside `for k in range(n)`: 100% of its gradient flows through the last"
                " iteration only,\nearlier ones are lost (50%% per step)\r",
        fix=Fix("Accumulate instead", (Edit(p(7, 9), p(7, 20), "s *= 0.5"),), Applicability.UNSAFE),
    )
    findings = [*wl101, wl102, wl900, wl104]
    return sorted(findings, key=lambda f: f.sort_key())


def stub_rule(code: str, name: str, affected: str = "") -> type[Rule]:
    """A rule with fixed docs, so the expected SARIF does not change whenever a real rule's docs do
    (the tests below check that the real docs are what SARIF carries)."""
    doc = f"""Summary of {code}: `a[i]` and 100% of its gradient.

    ## What it does
    Flags `a[i] = a[i] * a[i]`
    in a kernel.

    ## Why is this bad?
    The gradient is wrong.

    ## Fix safety
    Safe.

    ## Warp versions
    {affected or "All"}.

    ## Confirmation
    gradcheck.
    """
    return type(f"Stub{code}", (Rule,), {
        "__doc__": doc, "code": code, "name": name, "affected_versions": affected,
        "runtime_strategy": ("gradcheck",), "VALID": [Example("out[i] = a[i] * a[i]")],
        "INVALID": [Example("a[i] = a[i] * a[i]", fixed="out[i] = a[i] * a[i]")],
    })


STUB_RULES = {rule.code: rule for rule in (stub_rule("WL101", "array-component-write", "<1.14"),
                                           stub_rule("WL102", "array-read-then-write"),
                                           stub_rule("WL104", "dynamic-loop-mutation"))}


def shared_report(**changes) -> RunReport:
    report = RunReport(findings=shared_findings(), sources={"sim/kernels.py": KERNELS, LEGACY_PATH: LEGACY},
                       files_checked=2, root=ROOT, rules=all_rules())
    return dataclasses.replace(report, **changes)


def render(name: str, report: RunReport) -> str:
    stream = io.StringIO()
    renderers()[name](report, stream)
    return stream.getvalue()


@pytest.fixture(autouse=True)
def fixed_environment(monkeypatch):
    """Expected files name no real version and no CI project."""
    monkeypatch.setattr(warp_lint, "__version__", "0.0.0+test")
    monkeypatch.delenv("CI_PROJECT_DIR", raising=False)


@pytest.mark.parametrize("name", FORMATS)
def test_format_matches_expected_file(name, declare_project_urls):
    declare_project_urls()  # the expected files link nothing, whatever the installed metadata names
    assert name in renderers(), f"renderer {name} was not discovered"
    output = render(name, shared_report(rules=STUB_RULES))
    expected = EXPECTED / f"findings.{name}.{FORMATS[name]}"
    if UPDATE:
        expected.write_bytes(output.encode("utf-8"))
    assert expected.exists(), f"run with WARP_LINT_UPDATE_EXPECTED=1 to create {expected.name}"
    assert output == expected.read_bytes().decode("utf-8")


@pytest.mark.parametrize("name", FORMATS)
def test_a_clean_run_renders(name):
    output = render(name, shared_report(findings=[], sources={}))
    if name == "github":
        assert output == ""
    elif name == "gitlab":
        assert json.loads(output) == []
    elif name == "junit":
        root = ET.fromstring(output)
        assert [c.get("name") for c in root.iter("testcase")] == ["No errors found"]
        assert root.find(".//failure") is None
    else:
        document = json.loads(output)
        _validate_sarif(document)
        assert document["runs"][0]["results"] == []


# --- github -------------------------------------------------------------------------------------

def _unescape_data(text: str) -> str:
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def _unescape_property(text: str) -> str:
    return _unescape_data(text.replace("%3A", ":").replace("%2C", ","))


def _parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """Parse a workflow command as the runner does: ``::name k=v,k=v::message``."""
    match = re.fullmatch(r"::(\w+) ([^:]*)::(.*)", line)
    assert match, line
    properties = dict(part.split("=", 1) for part in match.group(2).split(","))
    return match.group(1), {k: _unescape_property(v) for k, v in properties.items()}, _unescape_data(match.group(3))


def test_github_commands_round_trip_through_the_runners_escaping():
    report = shared_report()
    lines = render("github", report).splitlines()
    assert len(lines) == len(report.findings)
    for line, finding in zip(lines, report.findings):
        command, properties, message = _parse_command(line)
        assert command == {"error": "error", "warning": "warning"}[finding.severity]
        assert properties["title"] == f"{finding.code} ({finding.name})"
        assert (int(properties["line"]), int(properties["col"])) == (finding.start.line, finding.start.column)
        assert (int(properties["endLine"]), int(properties["endColumn"])) == (finding.end.line, finding.end.column)
        assert message.startswith(finding.message)
    command, properties, message = _parse_command(lines[0])
    assert properties["file"] == "legacy/v1:step 2,old.py"  # relative to the root, escaped and restored
    assert "file=legacy/v1%3Astep 2%2Cold.py," in lines[0]
    assert lines[0].endswith("::`s` is rescaled inside `for k in range(n)`: 100%25 of its gradient flows through"
                             " the last iteration only,%0Aearlier ones are lost (50%25%25 per step)%0D")


def test_github_annotation_carries_the_runtime_verdict():
    line = next(x for x in render("github", shared_report()).splitlines() if "WL102" in x)
    _, _, message = _parse_command(line)
    assert message.endswith("\nRuntime check: confirmed: AD gradient disagrees with finite differences"
                            " (max error 100%) (Warp 1.4.2, cpu)")


# --- sarif --------------------------------------------------------------------------------------

def _validate_sarif(document: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])


def test_sarif_validates_against_the_official_schema():
    _validate_sarif(json.loads(render("sarif", shared_report())))


def test_sarif_meets_github_code_scanning_needs():
    report = shared_report()
    run = json.loads(render("sarif", report))["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "warp-lint" and driver["version"]
    rules = driver["rules"]
    assert [r["id"] for r in rules] == sorted({f.code for f in report.findings})  # only the rules that appear
    for rule in rules:
        for field in ("shortDescription", "fullDescription"):
            assert rule[field]["text"].strip(), (rule["id"], field)
        assert rule["help"]["text"].strip() and rule["help"]["markdown"].strip(), rule["id"]
    wl101 = next(r for r in rules if r["id"] == "WL101")
    assert wl101["help"]["markdown"] == all_rules()["WL101"].docs()
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == "file:///repo/"
    results = run["results"]
    assert len(results) == len(report.findings)
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert not location["artifactLocation"]["uri"].startswith(("/", "file:", ".."))
        assert result["partialFingerprints"]["warpLint/v1"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert uris == {"sim/kernels.py", "legacy/v1%3Astep%202%2Cold.py"}  # a leading "v1:" would read as a scheme
    fingerprints = [r["partialFingerprints"]["warpLint/v1"] for r in results]
    assert len(set(fingerprints)) == len(fingerprints)
    confirmed = next(r for r in results if r["ruleId"] == "WL102")
    assert confirmed["properties"]["confirmation"]["status"] == "confirmed"
    assert confirmed["properties"]["confirmation"]["evidence"]["max_abs_error"] == 2.0


def test_the_installed_metadata_names_no_page_so_no_output_links_one():
    """pyproject.toml has no [project.urls]: no finding links a page (ruff's ``"url": null`` in
    JSON) and SARIF leaves both URIs out, where the schema would want a real one."""
    report = shared_report()
    assert [f["url"] for f in json.loads(render("json", report))] == [None] * len(report.findings)
    document = json.loads(render("sarif", report))
    _validate_sarif(document)
    driver = document["runs"][0]["tool"]["driver"]
    assert "informationUri" not in driver
    assert not [rule["id"] for rule in driver["rules"] if "helpUri" in rule]


def test_declared_project_urls_link_the_rule_pages(declare_project_urls):
    declare_project_urls(f"Documentation, {DOCS}", f"Homepage, {HOME}")
    report = shared_report()
    urls = {f["code"]: f["url"] for f in json.loads(render("json", report))}
    assert urls["WL101"] == "https://docs.example.org/warp-lint/rules/WL101.md"
    assert urls["WL900"] == "https://docs.example.org/warp-lint/rules/WL900.md"  # engine codes have pages too
    document = json.loads(render("sarif", report))
    _validate_sarif(document)
    driver = document["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == HOME
    assert {rule["id"]: rule["helpUri"] for rule in driver["rules"]} == {
        code: f"https://docs.example.org/warp-lint/rules/{code}.md" for code in ("WL101", "WL102", "WL104", "WL900")}


def test_sarif_fingerprints_survive_moving_the_code():
    """Two blank lines inserted above every finding: new line numbers, the same fingerprints."""
    report = shared_report()
    moved = [dataclasses.replace(f, start=p(f.start.line + 2, f.start.column), end=p(f.end.line + 2, f.end.column))
             for f in report.findings]
    shifted = shared_report(findings=moved, sources={k: "\n\n" + v for k, v in report.sources.items()})

    def fingerprints(r):
        return [x["partialFingerprints"] for x in json.loads(render("sarif", r))["runs"][0]["results"]]

    assert fingerprints(shifted) == fingerprints(report)


def test_sarif_names_files_outside_the_root_by_absolute_uri():
    report = shared_report(root="/repo/sim")
    document = json.loads(render("sarif", report))
    _validate_sarif(document)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in document["runs"][0]["results"]]
    assert {"uri": "file:///repo/legacy/v1%3Astep%202%2Cold.py"} in uris


# --- gitlab -------------------------------------------------------------------------------------

def test_gitlab_issues_are_code_quality_shaped():
    report = shared_report()
    issues = json.loads(render("gitlab", report))
    assert len(issues) == len(report.findings)
    for issue, finding in zip(issues, report.findings):
        assert issue["check_name"] == finding.code
        assert issue["description"].startswith(f"{finding.code}: ")
        assert issue["severity"] in {"info", "minor", "major", "critical", "blocker"}
        assert issue["location"]["lines"]["begin"] == finding.start.line
        assert not issue["location"]["path"].startswith("/")
    assert len({i["fingerprint"] for i in issues}) == len(issues)


def test_gitlab_paths_follow_ci_project_dir(monkeypatch):
    monkeypatch.setenv("CI_PROJECT_DIR", "/repo/legacy")
    issues = json.loads(render("gitlab", shared_report()))
    assert issues[0]["location"]["path"] == "v1:step 2,old.py"


# --- junit --------------------------------------------------------------------------------------

def test_junit_has_a_suite_per_file_and_a_failing_case_per_finding():
    report = shared_report()
    root = ET.fromstring(render("junit", report))
    assert root.tag == "testsuites" and root.get("failures") == str(len(report.findings))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"legacy/v1:step 2,old.py", "sim/kernels.py"}
    assert suites["sim/kernels.py"].get("tests") == "5"
    failures = [case.find("failure") for case in root.iter("testcase")]
    assert all(f is not None for f in failures)
    messages = [f.get("message") for f in failures]
    assert messages == [f.message for f in report.findings]  # newlines survive as &#10; in attributes


# --- the command line ---------------------------------------------------------------------------

@pytest.fixture
def hazard_dir(tmp_path, monkeypatch):
    (tmp_path / "k.py").write_text(textwrap.dedent("""\
        import warp as wp

        @wp.kernel
        def square(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = a[i] * a[i]
        """))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_output_format_from_the_environment(hazard_dir, monkeypatch, capsys):
    monkeypatch.setenv("WARP_LINT_OUTPUT_FORMAT", "github")
    assert cli.main(["check", "--no-cache", "k.py"]) == cli.EXIT_FINDINGS
    out = capsys.readouterr().out
    assert out.startswith("::error file=k.py,line=6,col=5,endLine=6,endColumn=23,title=WL102 (array-read-then-write)::")
    # The flag wins over the environment.
    assert cli.main(["check", "--no-cache", "--output-format", "gitlab", "k.py"]) == cli.EXIT_FINDINGS
    assert json.loads(capsys.readouterr().out)[0]["check_name"] == "WL102"


@pytest.mark.parametrize("where", ["flag", "environment"])
def test_unknown_output_format_is_a_usage_error(hazard_dir, monkeypatch, capsys, where):
    arguments = ["check", "--no-cache", "k.py"]
    if where == "flag":
        arguments[1:1] = ["--output-format", "sarif2"]
    else:
        monkeypatch.setenv("WARP_LINT_OUTPUT_FORMAT", "sarif2")
    assert cli.main(arguments) == cli.EXIT_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "unknown output format 'sarif2'" in captured.err
    for name in ("text", "json", *FORMATS):
        assert name in captured.err


def test_cli_sarif_describes_the_rules_and_validates(hazard_dir, capsys):
    assert cli.main(["check", "--no-cache", "--output-format", "sarif", "k.py"]) == cli.EXIT_FINDINGS
    document = json.loads(capsys.readouterr().out)
    _validate_sarif(document)
    run = document["runs"][0]
    assert run["tool"]["driver"]["rules"][0]["help"]["markdown"] == all_rules()["WL102"].docs()
    location = run["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "k.py", "uriBaseId": "%SRCROOT%"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == hazard_dir.resolve().as_uri() + "/"
