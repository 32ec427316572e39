"""Installed at interpreter start in the traced process (by the session's ``sitecustomize``).

Importing ``warp`` costs up to a second, and most processes a command starts (pip, git hooks,
helper scripts) never use it, so nothing is loaded here: a finder on ``sys.meta_path`` waits for
the first ``import warp`` and, right after Warp's own ``__init__`` ran and before any user module
can load a kernel, hands the module to :func:`warp_lint.trace.instrument.install`. Any failure is
written to the events file; the user's program runs on, uninstrumented, whatever happens here.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import traceback

from warp_lint.trace.events import CONFIG_FILE, ENVIRONMENT_VARIABLE, EVENTS_FILE, EventWriter


def _load_config() -> dict | None:
    directory = os.environ.get(ENVIRONMENT_VARIABLE)
    if not directory:
        return None
    try:
        with open(os.path.join(directory, CONFIG_FILE), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return None
    config["session_dir"] = directory
    config["events"] = os.path.join(directory, EVENTS_FILE)
    return config


def _instrument(module, config: dict) -> None:
    try:
        from warp_lint.trace import instrument

        instrument.install(module, config)
    except Exception as error:  # noqa: BLE001 - never break the user's program
        try:
            EventWriter(config["events"]).write(
                "instrument-error", detail=f"{type(error).__name__}: {error}", traceback=traceback.format_exc()[-3000:])
        except OSError:
            pass


class _WarpImportHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of ``warp`` so instrumentation follows its import."""

    def __init__(self, config: dict):
        self.config = config

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "warp":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once is enough; and no recursion through find_spec below
        spec = importlib.util.find_spec("warp")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module
        config = self.config

        def exec_module(module):
            original(module)
            _instrument(module, config)

        loader.exec_module = exec_module  # this loader instance serves only the `warp` package
        return spec


def install() -> None:
    config = _load_config()
    if config is None:
        return
    if "warp" in sys.modules:
        _instrument(sys.modules["warp"], config)
    else:
        sys.meta_path.insert(0, _WarpImportHook(config))


SITECUSTOMIZE = '''\
# Written by `warp-lint trace` for one run; deleted afterwards.
def _warp_lint_trace():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from warp_lint.trace import bootstrap

        bootstrap.install()
    except Exception as error:  # noqa: BLE001 - the program runs on without instrumentation
        sys.stderr.write("warp-lint trace: instrumentation not installed: %s\\n" % (error,))
    # Chain to the sitecustomize this one shadows (a venv's, a distribution's), as Python would
    # have run it.
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_warp_lint_trace()
del _warp_lint_trace
'''
