"""Incremental analysis gives what a full analysis gives: random edits of real files (the bundled
example, the fixtures, a generated program), each step linted both ways.

An editor session is a ``Workspace`` kept across edits: what earlier analyses left
(``Workspace.memory``: last trees, statement summaries, kernel results by top-level statement) and
its project model, updated rather than rebuilt; the reference is a fresh workspace, or
``warp-lint check`` of the files on disk, and a whole-file analysis of the same text.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warp_lint.engine import FileSettings, analyse_bytes, analyse_source
from warp_lint.incremental import AnalysisMemory
from warp_lint.registry import all_rules
from warp_lint.source import SourceFile
from warp_lint.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
REAL_FILES = [
    ROOT / "examples" / "particles.py",
    ROOT / "tests" / "runtime" / "fixtures" / "hazards.py",
    ROOT / "tests" / "fixtures" / "host" / "sim_wl201_in_place_state.py",
    ROOT / "tests" / "fixtures" / "host" / "sim_wl204_no_zero.py",
    ROOT / "tests" / "fixtures" / "host_catalogue" / "sim_wl208_truncated.py",
    ROOT / "tests" / "trace" / "scripts" / "hazards.py",
]

GENERATED = textwrap.dedent('''\
    import warp as wp

    N = 4


    @wp.struct
    class State:
        q: wp.array(dtype=float)
        v: wp.array(dtype=float)


    @wp.func
    def twice(x: float):
        return 2.0 * x


    @wp.func
    def bump(a: wp.array(dtype=float), i: int):
        a[i] = a[i] + 1.0


    @wp.kernel
    def step(s: State, out: wp.array(dtype=float)):
        i = wp.tid()
        s.q[i] = s.q[i] + twice(s.v[i])
        for k in range(N):
            out[i] = out[i] * 0.5
        bump(out, i)


    @wp.kernel
    def scale(x: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        y[i].x = twice(x[i])
        x[i] = x[i] * x[i]


    @wp.func
    def count_above(count: int, value: float) -> int:
        if value > 0.5:
            return count + value
        return count


    @wp.kernel
    def strain(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
        c = float(0.0)
        count = int(0)
        for term in range(n):
            c = x[term] * x[term]
            out[term] = c * c + float(count) * x[term]
            count = count_above(count, x[term])


    class Sim:
        @wp.kernel
        def inner(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = a[i] * 2.0

        def run(self, a):
            wp.launch(self.inner, dim=4, inputs=[a])


    def train(x, y):
        tape = wp.Tape()
        with tape:
            wp.launch(scale, dim=4, inputs=[x, y])
        tape.backward()


    def main(s, out):
        wp.launch(step, dim=4, inputs=[s, out])
    ''')

SNIPPETS = [
    "@wp.kernel\ndef extra(a: wp.array(dtype=float)):\n    i = wp.tid()\n    a[i] = a[i] * a[i]\n",
    "@wp.func\ndef twice(x: float):\n    return x + x\n",
    "@wp.func\ndef bump(a: wp.array(dtype=float), i: int):\n    wp.atomic_add(a, i, 1.0)\n",
    'wp.set_module_options({"enable_backward": False})\n',
    "N = 16\n",
    "import warp as wp2\n",
    "def helper(x, y):\n    tape = wp.Tape()\n    with tape:\n        wp.launch(scale, dim=4, inputs=[x, y])\n",
    "x = 3.141592653589793  # a long number\n",
    "@wp.func\ndef count_above(count: int, value: float):\n    return count\n",  # an overload not returning int
]


def _top_level_starts(lines: list[str]) -> list[int]:
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return [0, len(lines)]
    starts = [min([d.lineno for d in getattr(s, "decorator_list", [])] + [s.lineno]) - 1 for s in tree.body]
    return starts + [len(lines)]


def edit(text: str, kind: str, where: int, pick: int) -> str:
    """One edit of the kind editors make, at a place chosen by ``where`` and ``pick``."""
    lines = text.splitlines(keepends=True) or ["\n"]
    at = where % len(lines)
    if kind == "blank line":
        lines.insert(at, "\n")
    elif kind == "comment":
        line = lines[at].rstrip("\r\n")
        if not line.rstrip().endswith("\\"):
            lines[at] = f"{line}  # edited\n"
    elif kind == "duplicate line":
        lines.insert(at, lines[at])
    elif kind == "delete line":
        del lines[at]
    elif kind == "rename":
        words = sorted(set(" ".join(lines).replace("(", " ").replace(")", " ").split()))
        names = [w for w in words if w.isidentifier()]
        line = lines[at]
        present = [n for n in names if n in line.split()]
        if present and names:
            lines[at] = line.replace(present[pick % len(present)], names[(pick // 7) % len(names)], 1)
    elif kind == "swap statements":
        starts = _top_level_starts(lines)
        if len(starts) > 2:
            first = pick % (len(starts) - 2)
            a, b, c = starts[first], starts[first + 1], starts[first + 2]
            lines[a:c] = lines[b:c] + lines[a:b]
    elif kind == "insert statement":
        starts = _top_level_starts(lines)
        lines.insert(starts[where % len(starts)], "\n" + SNIPPETS[pick % len(SNIPPETS)] + "\n")
    return "".join(lines)


EDITS = st.tuples(st.sampled_from(["blank line", "comment", "duplicate line", "delete line", "rename",
                                   "swap statements", "insert statement"]),
                  st.integers(0, 10_000), st.integers(0, 10_000))
SETTINGS = FileSettings(tuple(all_rules()), ">=1.10,<1.14", report_unused_noqa=True)


def _source(path: Path, text: str) -> SourceFile:
    return SourceFile(str(path), text.encode("utf-8"), text, "utf-8", False)


def _write_project(root: Path, texts: dict[str, str]) -> dict[str, Path]:
    """A marked project root holding ``texts`` (file name -> text); file name -> its path."""
    (root / "pyproject.toml").write_text("[tool.warp-lint]\n", encoding="utf-8")
    paths = {name: root / name for name in texts}
    for name, text in texts.items():
        paths[name].write_text(text, encoding="utf-8")
    return paths


def _summary(findings) -> list:
    return sorted((f.code, f.start, f.end, f.message, repr(f.fix), repr(f.related), repr(f.data)) for f in findings)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("incremental")
    (root / "pyproject.toml").write_text("[tool.warp-lint]\n", encoding="utf-8")
    return root


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.sampled_from([*REAL_FILES, None]), st.lists(EDITS, min_size=1, max_size=4))
def test_incremental_edits_lint_as_a_full_lint(project: Path, original, edits):
    text = GENERATED if original is None else original.read_text(encoding="utf-8")
    path = project / ("generated.py" if original is None else original.name)
    path.write_text(text, encoding="utf-8")  # on disk: the text before the edits, as in an editor
    session = Workspace.for_files([path])
    session.lint_source(_source(path, text), SETTINGS)
    for kind, where, pick in edits:
        text = edit(text, kind, where, pick)
        analysis = analyse_source(_source(path, text), SETTINGS, memory=session.memory)
        reference = analyse_source(_source(path, text), SETTINGS)
        assert _summary(analysis.findings) == _summary(reference.findings), (kind, where, pick)
        assert analysis.facts == reference.facts
        assert analysis.summary == reference.summary
        incremental = session.lint_source(_source(path, text), SETTINGS).findings
        path.write_text(text, encoding="utf-8")  # the command line reads it from disk
        # As the command line reads it: a file that never mentions `warp` is not parsed at all.
        on_disk = analyse_bytes(str(path), text.encode("utf-8"), SETTINGS)
        full = Workspace.for_files([path]).results([on_disk], lambda _: SETTINGS)[0].findings
        assert incremental == full, (kind, where, pick)


def test_an_edit_inside_one_kernel_analyses_that_kernel_alone(project: Path):
    path = project / "generated.py"
    memory = AnalysisMemory()
    units = memory.units
    analyse_source(_source(path, GENERATED), SETTINGS, memory=memory)
    assert units.whole == 0 and units.reused == 0
    before = units.analysed
    edited = GENERATED.replace("x[i] = x[i] * x[i]", "x[i] = x[i] * x[i] * 2.0")
    analysis = analyse_source(_source(path, "\n\n" + edited), SETTINGS, memory=memory)
    assert units.analysed - before == 1  # `scale`; the units above and below are reused, two lines down
    assert _summary(analysis.findings) == _summary(analyse_source(_source(path, "\n\n" + edited), SETTINGS).findings)
    wl102 = [f for f in analysis.findings if f.code == "WL102" and "x[i]" in f.message]
    assert wl102 and wl102[0].start.line == edited.splitlines().index("    x[i] = x[i] * x[i] * 2.0") + 3


def test_a_helper_edit_analyses_its_callers_again(project: Path):
    path = project / "generated.py"
    memory = AnalysisMemory()
    units = memory.units
    analyse_source(_source(path, GENERATED), SETTINGS, memory=memory)
    before = units.analysed
    # `bump` no longer reads `a` before writing it: `step` (its caller) changes too, `scale` does not.
    edited = GENERATED.replace("a[i] = a[i] + 1.0", "wp.atomic_add(a, i, 1.0)")
    analysis = analyse_source(_source(path, edited), SETTINGS, memory=memory)
    assert units.analysed - before == 2
    assert _summary(analysis.findings) == _summary(analyse_source(_source(path, edited), SETTINGS).findings)


def test_a_helper_no_longer_returning_an_integer_analyses_its_callers_again(project: Path):
    """Which helpers return integers is a fact of the whole file (`FunctionModel.integer_helpers`):
    `strain`'s counter carries no gradient while `count_above` is annotated `-> int`; an edit of
    that annotation, another top-level statement, changes `strain`'s findings."""
    path = project / "generated.py"
    memory = AnalysisMemory()
    first = analyse_source(_source(path, GENERATED), SETTINGS, memory=memory)
    assert not [f for f in first.findings if f.code == "WL104"]
    for edited in (GENERATED.replace(") -> int:", "):"),
                   GENERATED.replace(") -> int:", ") -> float:"),
                   GENERATED.replace("class Sim:", "@wp.func\ndef count_above(count: float, value: float):\n"
                                                   "    return count\n\n\nclass Sim:"),
                   GENERATED):
        analysis = analyse_source(_source(path, edited), SETTINGS, memory=memory)
        reference = analyse_source(_source(path, edited), SETTINGS)
        assert _summary(analysis.findings) == _summary(reference.findings)
        assert analysis.facts == reference.facts
        assert bool([f for f in analysis.findings if f.code == "WL104"]) == (edited != GENERATED)
    assert memory.units.whole == 0


def test_the_model_is_kept_for_an_edit_that_leaves_summary_and_facts_alone(project: Path):
    path = project / "generated.py"
    path.write_text(GENERATED, encoding="utf-8")
    session = Workspace.for_files([path])
    session.lint_source(_source(path, GENERATED), SETTINGS)
    model = session.model
    assert model.scopes  # recorded: `train` records `scale` on a tape
    session.lint_source(_source(path, GENERATED.replace("out[i] * 0.5", "out[i] * 0.25")), SETTINGS)
    assert session.model is model
    session.lint_source(_source(path, GENERATED.replace("tape.backward()", "pass")), SETTINGS)
    assert session.model is not model


CHAR_EDITS = st.tuples(st.integers(0, 10_000), st.integers(0, 10_000),
                       st.sampled_from(["", "x", "(", ")", ":", " ", "    ", "#", "'", '"""', "=", "\\"]))


@settings(max_examples=60, deadline=None)
# Random edits write escapes Python warns of (`'\e'`) while it parses them: the trees still compare.
@pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning",
                            "ignore:invalid escape sequence:SyntaxWarning")
@given(st.sampled_from([*REAL_FILES, None]), st.lists(CHAR_EDITS, min_size=1, max_size=8))
def test_a_tree_parsed_in_part_is_the_tree_parsed_whole(original, edits):
    text = GENERATED if original is None else original.read_text(encoding="utf-8")
    memory = AnalysisMemory()
    memory.trees.parse("file.py", text)
    for where, column, typed in edits:
        lines = text.splitlines(keepends=True)
        row = where % len(lines)
        content = lines[row].rstrip("\r\n")  # typing inside a line: no line appears or disappears
        cut = column % (len(content) + 1)
        lines[row] = content[:cut] + typed + content[cut + (0 if typed else 1):] + lines[row][len(content):]
        text = "".join(lines)
        try:
            whole = ast.dump(ast.parse(text), include_attributes=True)
        except (SyntaxError, ValueError) as error:
            with pytest.raises(type(error)):
                memory.trees.parse("file.py", text)
            continue
        assert ast.dump(memory.trees.parse("file.py", text), include_attributes=True) == whole


def test_an_edit_inside_a_line_parses_one_statement():
    memory = AnalysisMemory()
    memory.trees.parse("file.py", GENERATED)
    edited = GENERATED.replace("out[i] * 0.5", "out[i] * 0.25")
    tree = memory.trees.parse("file.py", edited)
    assert memory.trees.reparsed == 1
    assert ast.dump(tree, include_attributes=True) == ast.dump(ast.parse(edited), include_attributes=True)
    assert tree.body[0] is memory.trees.parse("file.py", GENERATED).body[0]  # the other statements' nodes are kept


PROJECT_FILES = {
    "kernels.py": textwrap.dedent("""\
        import warp as wp


        @wp.kernel
        def square(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = a[i] * a[i]


        @wp.kernel
        def fill(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = a[i] + 1.0
        """),
    "train.py": textwrap.dedent("""\
        import warp as wp

        from kernels import fill, square
        from model import Model


        def train(n: int):
            a = wp.zeros(n, dtype=float, requires_grad=True)
            wp.launch(fill, dim=n, inputs=[a])
            tape = wp.Tape()
            with tape:
                wp.launch(square, dim=n, inputs=[a])
            tape.backward(grads={a: wp.ones(n, dtype=float)})
            return a.grad


        def run(model: Model):
            tape = wp.Tape()
            with tape:
                model.step()
            tape.backward()
        """),
    "model.py": textwrap.dedent("""\
        import warp as wp

        from kernels import fill, square


        class Model:
            def __init__(self, n):
                self.x = wp.zeros(n, dtype=float, requires_grad=True)

            def step(self):
                wp.launch(square, dim=1, inputs=[self.x])
                wp.launch(fill, dim=1, inputs=[self.x])
        """),
    # A kernel following a helper of another file (`Workspace.imported_helper`): an edit of the
    # helper's file changes the kernel's findings.
    "funcs.py": textwrap.dedent("""\
        import warp as wp


        @wp.func
        def store(a: wp.array(dtype=float), i: int, v: float):
            wp.atomic_add(a, i, v)


        @wp.func
        def put(a: wp.array(dtype=float), i: int, v: float):
            a[i] = v
        """),
    "through.py": textwrap.dedent("""\
        import warp as wp

        from funcs import put, store


        @wp.kernel
        def through_helper(a: wp.array(dtype=float), b: wp.array(dtype=float)):
            i = wp.tid()
            b[i] = a[i] * a[i]
            store(a, i, 1.0)


        @wp.kernel
        def through_put(a: wp.array(dtype=float), b: wp.array(dtype=float)):
            i = wp.tid()
            b[i] = a[i] * a[i]
            put(a, i, 1.0)


        def train(a, b):
            tape = wp.Tape()
            with tape:
                wp.launch(through_helper, dim=1, inputs=[a, b])
                wp.launch(through_put, dim=1, inputs=[a, b])
            tape.backward()
        """),
    **{path.name: path.read_text(encoding="utf-8") for path in REAL_FILES[2:5]},
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(sorted(PROJECT_FILES)), EDITS), min_size=1, max_size=4))
def test_edits_of_one_file_lint_the_project_as_the_command_line(tmp_path_factory, edits):
    """A session keeps one model for the project, updated from each edit (the recordings that did
    not read the edited file are kept); the reference is `warp-lint check` of every file on disk."""
    from warp_lint.runner import lint_project

    root = tmp_path_factory.mktemp("project")
    texts = dict(PROJECT_FILES)
    paths = list(_write_project(root, dict(sorted(texts.items()))).values())
    session = Workspace.for_files(paths)
    for path in paths:
        session.lint_source(_source(path, texts[path.name]), SETTINGS)
    for name, (kind, where, pick) in edits:
        texts[name] = edit(texts[name], kind, where, pick)
        session.lint_source(_source(root / name, texts[name]), SETTINGS)
        (root / name).write_text(texts[name], encoding="utf-8")
        reference, errors, _ = lint_project(paths, lambda _: SETTINGS)
        assert errors == []
        for path, expected in zip(paths, reference):
            found = session.result_of(str(path), SETTINGS).findings
            assert found == expected.findings, (name, kind, where, pick, path.name)


def test_a_helper_edited_in_another_file_changes_its_callers_results(tmp_path):
    """The session's result of `through.py` follows `funcs.py`'s buffer: `store` accumulating is
    fine, storing after the kernel's read is WL102; a file only read (not linted) follows it too."""
    from warp_lint.runner import lint_project

    texts = {name: PROJECT_FILES[name] for name in ("funcs.py", "through.py")}
    paths = _write_project(tmp_path, texts)
    session = Workspace.for_files([paths["through.py"]])
    session.lint_source(_source(paths["funcs.py"], texts["funcs.py"]), SETTINGS)
    session.lint_source(_source(paths["through.py"], texts["through.py"]), SETTINGS)

    def wl102() -> list[int]:
        return [f.start.line for f in session.result_of(str(paths["through.py"]), SETTINGS).findings
                if f.code == "WL102"]

    assert len(wl102()) == 1  # through_put
    storing = texts["funcs.py"].replace("wp.atomic_add(a, i, v)", "a[i] = v")
    session.lint_source(_source(paths["funcs.py"], storing), SETTINGS)
    assert len(wl102()) == 2
    paths["funcs.py"].write_text(storing, encoding="utf-8")
    reference, _, _ = lint_project(list(paths.values()), lambda _: SETTINGS)
    assert session.result_of(str(paths["through.py"]), SETTINGS).findings == reference[1].findings
    session.lint_source(_source(paths["funcs.py"], texts["funcs.py"]), SETTINGS)
    assert len(wl102()) == 1


def test_a_helper_file_that_parses_again_is_followed_by_the_callers_linted_meanwhile(tmp_path):
    """Found by the edit test above: `funcs.py` loses `store`'s `def` line (no longer parses), and
    `through.py` is linted then, when no helper can be resolved; then `store`'s body goes too and
    the file parses again with `put` alone. `through.py` read `funcs.py` while it did not parse, so
    its kernels must follow `put` again (WL102) and not keep the helper-less facts."""
    texts = {name: PROJECT_FILES[name] for name in ("funcs.py", "through.py")}
    paths = _write_project(tmp_path, texts)
    session = Workspace.for_files(list(paths.values()))
    for name, path in paths.items():
        session.lint_source(_source(path, texts[name]), SETTINGS)
    unparsable = texts["funcs.py"].replace("def store(a: wp.array(dtype=float), i: int, v: float):\n", "")
    session.lint_source(_source(paths["funcs.py"], unparsable), SETTINGS)
    assert session.result_of(str(paths["through.py"]), SETTINGS).findings == []
    parses = unparsable.replace("    wp.atomic_add(a, i, v)\n", "")
    session.lint_source(_source(paths["funcs.py"], parses), SETTINGS)
    codes = [f.code for f in session.result_of(str(paths["through.py"]), SETTINGS).findings]
    assert codes.count("WL102") == 1


def test_a_function_that_starts_recording_is_followed_by_the_recordings_that_call_it(tmp_path):
    """`main` calls `setup` before its tape opens; `setup` calls `prepare` in another file. Once an
    edit gives `prepare` a tape, `main`'s recording follows `setup` (no longer skipped as leading
    nowhere) though it never read the edited file before: the model must record it again."""
    kernels = PROJECT_FILES["kernels.py"]
    helpers = "import warp as wp\n\nfrom kernels import square\n\n\ndef prepare(x):\n    return x\n"
    taped = helpers.replace("    return x\n", "    tape = wp.Tape()\n    with tape:\n"
                                             "        wp.launch(square, dim=1, inputs=[x])\n    tape.backward()\n")
    files = {
        "kernels.py": kernels,
        "helpers.py": helpers,
        "setup.py": "from helpers import prepare\n\n\ndef setup(x):\n    prepare(x)\n",
        "main.py": textwrap.dedent("""\
            import warp as wp

            from kernels import fill
            from setup import setup


            def main():
                x = wp.zeros(4, dtype=float, requires_grad=True)
                setup(x)
                tape = wp.Tape()
                with tape:
                    wp.launch(fill, dim=4, inputs=[x])
                tape.backward()
            """),
    }
    paths = list(_write_project(tmp_path, files).values())
    session = Workspace.for_files(paths)
    for path in paths:
        session.lint_source(_source(path, files[path.name]), SETTINGS)
    before = session.model.scopes  # recorded, with `setup` not followed

    def recorded(model) -> list:
        return sorted((scope.entry, [(e.kind, e.location) for e in scope.events]) for scope in model.scopes)

    session.lint_source(_source(tmp_path / "helpers.py", taped), SETTINGS)
    (tmp_path / "helpers.py").write_text(taped, encoding="utf-8")
    fresh = Workspace.for_files(paths)
    fresh.results([analyse_source(_source(p, p.read_text(encoding="utf-8")), SETTINGS) for p in paths],
                  lambda _: SETTINGS)
    assert before and recorded(session.model) == recorded(fresh.model)


def test_a_buffer_that_stops_mentioning_warp_reports_what_the_command_line_does(project: Path):
    """Deleting `import warp as wp` leaves a file the command line skips (no host findings either),
    though its functions still read as a tape's recording: an editor must show the same nothing."""
    original = Path(__file__).parent / "trace" / "scripts" / "hazards.py"
    text = original.read_text(encoding="utf-8")
    path = project / "no_warp.py"
    path.write_text(text, encoding="utf-8")
    session = Workspace.for_files([path])
    assert any(f.code == "WL204" for f in session.lint_source(_source(path, text), SETTINGS).findings)
    edited = text.replace("import warp as wp\n", "").replace("Warp", "W")
    assert "warp" not in edited
    incremental = session.lint_source(_source(path, edited), SETTINGS).findings
    path.write_text(edited, encoding="utf-8")
    on_disk = analyse_bytes(str(path), edited.encode("utf-8"), SETTINGS)
    assert incremental == Workspace.for_files([path]).results([on_disk], lambda _: SETTINGS)[0].findings == []


def test_a_dropped_project_is_freed_and_leaves_the_other_projects_caches_alone(tmp_path):
    """An editor drops a project when its files change on disk. Nothing may keep its index (every
    summary it read) alive, and filling another project's index may not empty this one's memos
    (a class-wide ``lru_cache`` on the index's methods did both)."""
    import gc
    import weakref

    texts = {name: PROJECT_FILES[name] for name in ("funcs.py", "through.py")}
    paths = _write_project(tmp_path, texts)
    kept = Workspace.for_files([paths["through.py"]])
    kept.lint_source(_source(paths["through.py"], texts["through.py"]), SETTINGS)
    memos = {name: dict(memo) for name, memo in kept.index._memos.items()}
    assert memos

    dropped = Workspace.for_files([paths["through.py"]])
    dropped.lint_source(_source(paths["funcs.py"], texts["funcs.py"]), SETTINGS)
    assert {name: dict(memo) for name, memo in kept.index._memos.items()} == memos
    index = weakref.ref(dropped.index)
    del dropped
    gc.collect()
    assert index() is None


def test_a_refusal_added_in_a_file_no_recording_reads_records_again(tmp_path):
    """`guard.py` (read by no recording) starts refusing gradients with wind: the recording of
    `train`, which never read it, must stop following `if self.wind:` as a fresh model does."""
    files = {
        "cloth.py": textwrap.dedent("""\
            import warp as wp


            @wp.kernel
            def gust(y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = y[i] * y[i]


            class Cloth:
                def __init__(self, wind):
                    self.wind = wind

                def step(self, y):
                    if self.wind:
                        wp.launch(gust, y.shape[0], inputs=[y])
            """),
        "train.py": textwrap.dedent("""\
            import warp as wp

            from cloth import Cloth


            def train(y):
                cloth = Cloth(True)
                tape = wp.Tape()
                with tape:
                    cloth.step(y)
                tape.backward()
            """),
        "guard.py": "def check(wind, requires_grad):\n    return wind\n",
    }
    refusing = ("def check(wind, requires_grad):\n    if wind and requires_grad:\n"
                "        raise NotImplementedError('wind is not differentiable')\n    return wind\n")
    paths = list(_write_project(tmp_path, files).values())
    session = Workspace.for_files(paths)
    for path in paths:
        session.lint_source(_source(path, files[path.name]), SETTINGS)

    def launches(model) -> list:
        return sorted(str(e.location) for scope in model.scopes for e in scope.events if e.kind == "launch")

    assert launches(session.model)  # `gust` is recorded
    session.lint_source(_source(tmp_path / "guard.py", refusing), SETTINGS)
    (tmp_path / "guard.py").write_text(refusing, encoding="utf-8")
    fresh = Workspace.for_files(paths)
    fresh.results([analyse_source(_source(p, p.read_text(encoding="utf-8")), SETTINGS) for p in paths],
                  lambda _: SETTINGS)
    assert launches(fresh.model) == [] and launches(session.model) == launches(fresh.model)


FACTORY_CALLS = '''import warp as wp


def make_power(n):
    @wp.kernel
    def power(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        t = wp.tid()
        v = float(1.0)
        for i in range(n):
            v *= x[t]
        out[t] = v

    return power


POWER = make_power(6)
'''


def test_a_new_value_passed_to_a_kernel_factory_analyses_the_kernel_again(project: Path):
    """What a kernel captures from its factory is read from the whole file (``closure_constants``):
    the call `make_power(17)`, another top-level statement, makes the loop in `power` dynamic."""
    path = project / "factory_calls.py"
    memory = AnalysisMemory()
    for text, dynamic in ((FACTORY_CALLS, False), (FACTORY_CALLS.replace("make_power(6)", "make_power(17)"), True),
                          (FACTORY_CALLS, False)):
        analysis = analyse_source(_source(path, text), SETTINGS, memory=memory)
        reference = analyse_source(_source(path, text), SETTINGS)
        assert _summary(analysis.findings) == _summary(reference.findings)
        assert bool([f for f in analysis.findings if f.code == "WL104"]) == dynamic
