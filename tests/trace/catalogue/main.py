"""Run every program of this folder, hazard then near-miss twin (`warp-lint trace -- python main.py`)."""

import importlib
import pathlib
import sys
import traceback

import warp as wp

wp.config.quiet = True

failed = 0
for path in sorted(pathlib.Path(__file__).parent.glob("wl2*.py")):
    program = importlib.import_module(path.stem)
    for name in ("hazard", "twin"):
        try:
            getattr(program, name)()
        except Exception:  # a program that raises is reported, the others still run
            failed += 1
            traceback.print_exc()
sys.exit(1 if failed else 0)
