"""Measure whole programs: the gradient a program's tape reports against central differences of its loss.

A program is a folder holding an entry module whose ``main(values)`` returns ``(loss, gradient)``:
the loss it computed from ``values`` and the gradient of that loss with respect to ``values`` as its
tape reports it (``tests/shapes/shape_programs.py`` writes such programs). AD is that gradient; FD is
central differences of ``main(values)[0]`` (``measure_kernel_hazards.central_difference``), and the
verdict is ``measure_kernel_hazards.compare``'s (``match``, ``wrong``, ``nonfinite``), or:

- ``raises``: ``main`` raised (the message says what);
- ``no-gradient``: the gradient is None.

All programs run in this one process on the CPU, one after the other: Warp compiles each kernel module
once per module name and content (the programs share their kernels) and loads it from the kernel
cache (``WARP_CACHE_PATH``) after that. Each program's modules are dropped before the next one runs.

Usage: ``python measure_programs.py MANIFEST.json`` where the manifest lists
``{"id", "folder", "entry", "values"}``; prints ``{"warp": VERSION}``, then one JSON object per program.
Any interpreter with ``warp`` and ``numpy`` runs it (a scratch virtual environment with another release).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import time

import numpy as np

from measure_kernel_hazards import central_difference, compare


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def _drop_modules(folder: str) -> None:
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if path.startswith(folder + os.sep):
            del sys.modules[name]


def measure_program(program: dict) -> dict:
    folder = os.path.abspath(program["folder"])
    values = np.asarray(program["values"], dtype=np.float32)
    result: dict = {"id": program["id"]}
    started = time.perf_counter()
    sys.path.insert(0, folder)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Warp's own messages stay out of the JSON lines
            main = importlib.import_module(program["entry"]).main
            try:
                loss, gradient = main(values.copy())
            except Exception as error:
                result.update(verdict="raises", error=_first_line(error))
                return result
            result["loss"] = float(loss)
            if gradient is None:
                result["verdict"] = "no-gradient"
                return result
            fd = central_difference(lambda v: float(main(v)[0]), values)
        result.update(compare(np.asarray(gradient), fd))
    except Exception as error:  # the program itself is broken: not a verdict on the hazard
        result.update(verdict="error", error=_first_line(error))
    finally:
        sys.path.remove(folder)
        _drop_modules(folder)
        result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def main(argv: list[str]) -> int:
    import warp as wp

    wp.config.quiet = True
    wp.init()
    with open(argv[0]) as handle:
        programs = json.load(handle)
    print(json.dumps({"warp": wp.config.version}), flush=True)
    for program in programs:
        print(json.dumps(measure_program(program)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
