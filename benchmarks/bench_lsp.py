"""How long an editor waits for warp-lint's diagnostics, against the command line on the same file.

Generates a 2,000-line Warp module (kernels with and without hazards, host code with a tape),
then measures, each as the median over ``--repeats``:

- ``warp-lint check --no-cache FILE`` as a subprocess (what a save hook or a "lint on save" pays:
  interpreter start-up, imports, lint);
- the language server, already running: ``textDocument/didChange`` sent until the
  ``publishDiagnostics`` for that version arrives, once with the server's debounce set to 0 (the
  lint itself plus the protocol) and once with the default debounce (what a user sees);
- the lint alone, in this process (``warp_lint.lsp.lint_buffer``), for reference.

Run: ``python benchmarks/bench_lsp.py [--lines 2000] [--repeats 15]``. Prints a table; asserts
nothing (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

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


def median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:8.1f}"


def bench_cli(path: Path, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "warp_lint", "check", "--no-cache", "--quiet", str(path)],
                              capture_output=True, cwd=path.parent)
        samples.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"warp-lint check failed:\n{done.stderr.decode()}")
    return samples


async def bench_server(path: Path, text: str, repeats: int, debounce: float) -> tuple[list[float], list[float], int]:
    client = LanguageClient("bench-lsp", "1")
    arrived: dict[int, asyncio.Future] = {}
    counts: dict[int, int] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def publish(params: types.PublishDiagnosticsParams) -> None:
        counts[params.version] = len(params.diagnostics)
        future = arrived.get(params.version)
        if future is not None and not future.done():
            future.set_result(time.perf_counter())

    await client.start_io(sys.executable, "-m", "warp_lint", "server", "--debounce", str(debounce))
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=path.parent.as_uri(), process_id=None))
    client.initialized(types.InitializedParams())
    uri = path.as_uri()
    loop = asyncio.get_running_loop()

    arrived[1] = loop.create_future()
    start = time.perf_counter()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    open_samples = [await asyncio.wait_for(arrived[1], 120) - start]

    change_samples = []
    for version in range(2, repeats + 2):
        # A real edit: a different comment at the end of a kernel line each time.
        edited = text.replace("e = 10.0\n", f"e = 10.0  # edit {version}\n", 1)
        arrived[version] = loop.create_future()
        start = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=edited)]))
        change_samples.append(await asyncio.wait_for(arrived[version], 120) - start)
        await asyncio.sleep(0.05)

    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return open_samples, change_samples, counts[repeats + 1]


def bench_in_process(path: Path, text: str, repeats: int) -> list[float]:
    from pygls.workspace import PositionCodec

    from warp_lint.options import Options
    from warp_lint.lsp import _default_arguments, lint_buffer

    settings = Options(_default_arguments(), None).settings_for(path)
    lint_buffer(str(path), text, 0, settings, PositionCodec(), {})  # warm the imports and rule registry
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        lint_buffer(str(path), text, 0, settings, PositionCodec(), {})
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--debounce", type=float, default=0.3, help="the editor-facing debounce to measure (s)")
    arguments = parser.parse_args()

    text = generate(arguments.lines)
    with tempfile.TemporaryDirectory(prefix="bench-lsp-") as folder:
        path = Path(folder) / "simulation.py"
        path.write_text(text, encoding="utf-8")
        cli = bench_cli(path, arguments.repeats)
        open_0, change_0, findings = asyncio.run(bench_server(path, text, arguments.repeats, 0.0))
        _, change_d, _ = asyncio.run(bench_server(path, text, arguments.repeats, arguments.debounce))
        lint = bench_in_process(path, text, arguments.repeats)

    rows = [
        ("warp-lint check --no-cache FILE (subprocess)", cli),
        ("server: didOpen -> diagnostics (first lint)", open_0),
        ("server: didChange -> diagnostics, debounce 0", change_0),
        (f"server: didChange -> diagnostics, debounce {arguments.debounce:g} s", change_d),
        ("lint_buffer in process (the lint alone)", lint),
    ]
    print(f"file: {text.count(chr(10))} lines, {len(text.encode()) // 1024} KiB, {findings} findings;"
          f" median of {arguments.repeats} runs (didOpen: 1 run)")
    print(f"{'measurement':<52} {'median ms':>9} {'vs CLI':>7}")
    cli_median = statistics.median(cli)
    for label, samples in rows:
        ratio = statistics.median(samples) / cli_median
        print(f"{label:<52} {median_ms(samples):>9} {ratio:>6.2f}x")


if __name__ == "__main__":
    main()
