"""How long an editor waits for warp-lint's diagnostics after a keystroke, against the command line.

    python benchmarks/bench_lsp.py                 # the generated file and three real files
    python benchmarks/bench_lsp.py --no-realcode   # the generated file only (no scratch venv needed)
    python benchmarks/bench_lsp.py --repeats 5

Files: a generated Warp module of about ``--lines`` lines (kernels with and without hazards, host
code recording them on tapes), and, from the real-code corpus (``benchmarks/realcode.py``: a
scratch venv with warp-lang, newton and mujoco-warp; nothing of them is copied into this
repository), the Warp file of 1,800 to 2,600 lines with the most kernels in each of warp-lang's
tests, newton and mujoco-warp, picked at run time. Each real file is linted in its own project:
the package's Python files copied to a temporary folder with a ``pyproject.toml`` (a checkout, as a
user opens it), so the project model holds the whole package.

For each file, in one run:

- ``warp-lint check FILE``, a subprocess, with no cache and with a warm one (median of ``--repeats``);
- the language server, started once, with its default settings: ``didOpen`` to diagnostics, then
  edits a user makes inside a kernel in the middle of the file, each sent when the previous one's
  diagnostics arrived: typing a comment at the end of a line (a character at a time), Enter, and
  typing a statement on the new line (a character at a time, through the half-typed texts that do
  not parse). p50 and p95 of ``didChange`` to the ``publishDiagnostics`` of that version;
- hover, every 20 ms while an edit that makes every kernel be analysed again (an import added) is
  linted: how long a hover takes, answered from the last lint while the new one runs;
- one edit's lint in this process (``Workspace.lint_text``, the server's lint without the
  protocol), the same edits: p50 and p95, and how many kernels were analysed again.

Goals (issue 16): p50 of didChange to diagnostics at most 150 ms with the default settings, one
edit's lint at most 50 ms on a 2,000-line file. Asserts nothing: timings depend on the machine
(medians on a shared machine are noisy; compare figures of one run).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

HERE = Path(__file__).resolve().parent

KERNEL = textwrap.dedent("""\
    @wp.kernel
    def step_{n}(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3),
                 m: wp.array(dtype=float), out: wp.array(dtype=float), dt: float):
        i = wp.tid()
        inv_m = 1.0 / m[i]
        a = f[i] * inv_m
        v_new = v[i] + a * dt
        x_new = x[i] + v_new * dt
        e = 0.5 * m[i] * wp.dot(v_new, v_new)
        for k in range(3):
            e = e + 0.1 * float(k) * x_new[k]
        if e > 10.0:
            e = 10.0
        out[i] = e
        {hazard}


    """)
HAZARDS = ["x[i] = x[i] + v[i] * dt", "m[i] = m[i] * m[i]", "out[i] = out[i] * 2.0", "pass"]
HOST = textwrap.dedent("""\
    def simulate_{n}(state, steps: int):
        tape = wp.Tape()
        with tape:
            for _ in range(steps):
                wp.launch(step_{n}, dim=state.n, inputs=[state.x, state.v, state.f, state.m, state.out, 0.01])
        tape.backward(loss=state.out)
        return tape


    """)


def generate(lines: int) -> str:
    parts = ["import warp as wp\n\n\n"]
    n = 0
    while sum(part.count("\n") for part in parts) < lines:
        parts.append(KERNEL.format(n=n, hazard=HAZARDS[n % len(HAZARDS)]))
        parts.append(HOST.format(n=n))
        n += 1
    return "".join(parts)


# -- the files -------------------------------------------------------------------------------------

def _kernels(text: str) -> list[ast.FunctionDef]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and any(
        "kernel" in ast.unparse(d) for d in node.decorator_list)]


def pick_real_files(folder: Path, progress) -> list[tuple[str, Path, Path]]:
    """(name, staged project root, file) for each real-code project, staged under ``folder``."""
    sys.path.insert(0, str(HERE))
    import realcode

    progress("setting up the real-code corpus (scratch venv)")
    python = realcode.ensure_env()
    site = realcode.site_packages(python)
    chosen = []
    for name, package, sub in (("warp-lang tests", "warp", "tests"), ("newton", "newton", ""),
                               ("mujoco-warp", "mujoco_warp", "")):
        source = site / package
        best = None
        for path in sorted((source / sub).rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            lines = text.count("\n")
            if 1800 <= lines <= 2600:
                count = len(_kernels(text))
                if count >= 5 and (best is None or count > best[0]):
                    best = (count, path)
        if best is None:
            continue
        root = folder / package.replace("_", "-")
        shutil.copytree(source, root / package, ignore=lambda _, names: [
            n for n in names if not n.endswith(".py") and "." in n])
        (root / "pyproject.toml").write_text("[project]\nname = 'staged'\n", encoding="utf-8")
        chosen.append((f"{name}: {best[1].relative_to(site)}", root, root / package / best[1].relative_to(source)))
    return chosen


# -- the edits -------------------------------------------------------------------------------------

def edits(text: str) -> list[tuple[str, str]]:
    """(kind, text after the edit) for the keystrokes a user makes in a kernel in the middle of the file."""
    kernels = _kernels(text)
    kernel = kernels[len(kernels) // 2]
    statement = next(s for s in reversed(kernel.body) if isinstance(s, (ast.Assign, ast.AugAssign, ast.Expr)))
    lines = text.splitlines(keepends=True)
    row = statement.end_lineno - 1
    line = lines[row].rstrip("\r\n")
    indent = line[:len(line) - len(line.lstrip())]
    found = []
    typed = ""
    for char in "  # tuned":
        typed += char
        found.append(("type a comment", "".join(lines[:row] + [line + typed + "\n"] + lines[row + 1:])))
    base = lines[:row] + [line + typed + "\n"]
    found.append(("Enter", "".join(base + [indent + "\n"] + lines[row + 1:])))
    statement = ""
    for char in "s = x[i] * 2.0":
        statement += char
        found.append(("type a statement", "".join(base + [indent + statement + "\n"] + lines[row + 1:])))
    return found


# -- measurements ----------------------------------------------------------------------------------

def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def bench_cli(path: Path, repeats: int, cache: Path | None) -> list[float]:
    env = dict(os.environ)
    # Run in the file's folder, as a user would, but without it on sys.path: mujoco-warp's
    # `_src/math.py` would shadow the standard library's `math` (-P: Python 3.11+).
    isolated = ["-P"] if sys.version_info >= (3, 11) else []
    arguments = [sys.executable, *isolated, "-m", "warp_lint", "check", "--quiet", str(path)]
    if cache is None:
        arguments.insert(len(arguments) - 2, "--no-cache")
    else:
        env["WARP_LINT_CACHE_DIR"] = str(cache)
        subprocess.run(arguments, capture_output=True, cwd=path.parent, env=env)  # fill it
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(arguments, capture_output=True, cwd=path.parent, env=env)
        samples.append(time.perf_counter() - start)
        if done.returncode not in (0, 1) or b"Traceback" in done.stderr:
            raise SystemExit(f"warp-lint check failed:\n{done.stderr.decode()}")
    return samples


async def bench_server(path: Path, root: Path, text: str, changes: list[tuple[str, str]], cache: Path
                       ) -> dict[str, object]:
    client = LanguageClient("bench-lsp", "1")
    arrived: dict[int, asyncio.Future] = {}
    published: dict[int, list[types.Diagnostic]] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def publish(params: types.PublishDiagnosticsParams) -> None:
        published[params.version] = params.diagnostics
        future = arrived.get(params.version)
        if future is not None and not future.done():
            future.set_result(time.perf_counter())

    await client.start_io(sys.executable, "-m", "warp_lint", "server",
                          env={**os.environ, "WARP_LINT_CACHE_DIR": str(cache)})
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=root.as_uri(), process_id=None))
    client.initialized(types.InitializedParams())
    uri = path.as_uri()
    loop = asyncio.get_running_loop()

    arrived[1] = loop.create_future()
    start = time.perf_counter()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    opened = await asyncio.wait_for(arrived[1], 300) - start
    findings = len(published[1])

    version = 1
    by_kind: dict[str, list[float]] = {}
    for kind, changed in changes:
        version += 1
        arrived[version] = loop.create_future()
        start = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=changed)]))
        by_kind.setdefault(kind, []).append(await asyncio.wait_for(arrived[version], 120) - start)
        await asyncio.sleep(0.03)

    # Hover on a finding while every kernel is analysed again (an import added above it).
    last = changes[-1][1]
    shown = published[version]
    where = shown[len(shown) // 2].range.start if shown else types.Position(line=0, character=0)
    hovers: list[float] = []
    whole_lints: list[float] = []
    for repeat in range(3):
        version += 1
        arrived[version] = loop.create_future()
        imported = last.replace("import warp as wp\n", f"import warp as wp\nimport math as m{repeat}\n", 1)
        sent = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=imported)]))
        while not arrived[version].done():  # a hover every 20 ms until the new diagnostics arrive
            start = time.perf_counter()
            await client.text_document_hover_async(types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=where.line + 1, character=where.character + 1)))
            if not arrived[version].done():
                hovers.append(time.perf_counter() - start)
            await asyncio.sleep(0.02)
        whole_lints.append(arrived[version].result() - sent)
        version += 1  # back to the text without the import, linted before the next round
        arrived[version] = loop.create_future()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=last)]))
        await asyncio.wait_for(arrived[version], 300)

    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return {"open": opened, "findings": findings, "changes": by_kind, "hovers": hovers, "whole": whole_lints}


def bench_in_process(path: Path, text: str, changes: list[tuple[str, str]]) -> tuple[list[float], int, int]:
    from warp_lint.lsp import _default_arguments
    from warp_lint.options import Options
    from warp_lint.runner import tune_garbage_collection
    from warp_lint.source import SourceFile
    from warp_lint.workspace import Workspace

    settings = Options(_default_arguments(), None).settings_for(path)
    thresholds = gc.get_threshold()
    tune_garbage_collection()  # as the server does
    workspace = Workspace.for_files([path])

    def lint(new: str) -> None:
        source = SourceFile(str(path), new.encode("utf-8"), new, "utf-8", False)
        workspace.lint_text(source, settings)

    lint(text)
    before = workspace.memory.units.analysed, workspace.memory.units.reused
    samples = []
    for _, changed in changes:
        start = time.perf_counter()
        lint(changed)
        samples.append(time.perf_counter() - start)
    gc.set_threshold(*thresholds)
    return samples, workspace.memory.units.analysed - before[0], workspace.memory.units.reused - before[1]


def ms(value: float) -> str:
    return f"{value * 1000:7.0f}"


def report(name: str, text: str, cli_cold, cli_warm, server, in_process) -> None:
    changes = [sample for samples in server["changes"].values() for sample in samples]
    lint, analysed, reused = in_process
    print(f"\n{name}: {text.count(chr(10))} lines, {len(_kernels(text))} kernels, {server['findings']} findings")
    print(f"  {'warp-lint check FILE, no cache (subprocess)':<58}{ms(statistics.median(cli_cold))} ms")
    print(f"  {'warp-lint check FILE, warm cache (subprocess)':<58}{ms(statistics.median(cli_warm))} ms")
    print(f"  {'server: didOpen -> diagnostics (first lint, project read)':<58}{ms(server['open'])} ms")
    print(f"  {'server: didChange -> diagnostics, default settings':<58}{ms(statistics.median(changes))} ms p50"
          f"  {ms(percentile(changes, 0.95))} ms p95  ({len(changes)} edits)")
    for kind, samples in server["changes"].items():
        print(f"    {kind:<54}{ms(statistics.median(samples))} ms p50  {ms(max(samples))} ms max")
    hover = server["hovers"] or [float("nan")]
    print(f"  {'server: hover while every kernel is analysed again':<58}{ms(statistics.median(hover))} ms p50"
          f"  {ms(max(hover))} ms max  ({len(server['hovers'])} hovers; that lint:"
          f" {ms(statistics.median(server['whole'])).strip()} ms)")
    print(f"  {'one edit lint in process (Workspace.lint_text)':<58}{ms(statistics.median(lint))} ms p50"
          f"  {ms(percentile(lint, 0.95))} ms p95  ({analysed} kernels analysed again, {reused} reused)")
    print(f"  ratio: p50 didChange -> diagnostics / CLI no cache = "
          f"{statistics.median(changes) / statistics.median(cli_cold):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5, help="runs of the command line per file")
    parser.add_argument("--no-realcode", action="store_true", help="only the generated file")
    arguments = parser.parse_args()
    progress = (lambda message: sys.stderr.write(f"\r\x1b[2K{message}")) if sys.stderr.isatty() else (lambda _: None)

    with tempfile.TemporaryDirectory(prefix="bench-lsp-") as scratch:
        folder = Path(scratch)
        generated_root = folder / "generated"
        generated_root.mkdir()
        (generated_root / "pyproject.toml").write_text("[project]\nname = 'generated'\n", encoding="utf-8")
        generated = generated_root / "simulation.py"
        generated.write_text(generate(arguments.lines), encoding="utf-8")
        files = [("generated", generated_root, generated)]
        if not arguments.no_realcode:
            files += pick_real_files(folder, progress)
        for name, root, path in files:
            text = path.read_text(encoding="utf-8")
            changes = edits(text)
            cache = folder / f"cache-{len(name)}-{path.stem}"
            progress(f"{name}: command line")
            cli_cold = bench_cli(path, arguments.repeats, None)
            cli_warm = bench_cli(path, arguments.repeats, cache)
            progress(f"{name}: server")
            server = asyncio.run(bench_server(path, root, text, changes, cache))
            progress(f"{name}: in process")
            in_process = bench_in_process(path, text, changes)
            progress("")
            report(name, text, cli_cold, cli_warm, server, in_process)


if __name__ == "__main__":
    main()
