"""The child process of ``warp-lint check --confirm``: the only place the user's module is imported.

Run as ``python -m warp_lint.runtime.child REQUEST.json RESULTS.jsonl``. One child handles the
findings of one user file, so the user's module compiles once. Results go to RESULTS.jsonl, one
JSON object per line, appended and flushed as they happen (never parsed from stdout, which the
user's code may fill): ``{"event": "start", "id": ...}`` before a finding and
``{"event": "result", "id": ..., "confirmation": {...}}`` after it. If the process dies in
between, the parent knows which finding killed it and restarts a child for the rest.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from typing import Any

from warp_lint.runtime.verdicts import Reason



class ResultWriter:
    """Appends one JSON line per event and flushes it at once: a crash loses nothing written."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def write(self, record: dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(record, default=_json_default) + "\n").encode())


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if hasattr(value, "item"):
        return value.item()
    return repr(value)


def _clean(value: Any) -> Any:
    """Replace non-finite floats (not valid JSON) with their repr, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def warp_settings(wp: Any) -> dict[str, Any]:
    """The configuration flags that change gradients or their diagnosis, as this process has them."""
    config = wp.config
    return {
        "enable_vector_component_overwrites": getattr(config, "enable_vector_component_overwrites", None),
        "verify_autograd_array_access": getattr(config, "verify_autograd_array_access", None),
        "mode": getattr(config, "mode", None),
    }


def main(argv: list[str]) -> int:
    request_path, results_path = argv[1], argv[2]
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    results = ResultWriter(results_path)

    import warp as wp

    # Before wp.init(): warp-lint's own kernel cache, never the user's. Overwrite tracking stays
    # off (with it on, Warp rebuilds every module it loads): the experiments run it themselves, as
    # code generation only, where it adds evidence.
    wp.config.kernel_cache_dir = request["cache_dir"]
    wp.config.quiet = True

    from warp_lint.runtime.locate import import_user_module
    from warp_lint.runtime.tracking import MessageCapture

    capture = MessageCapture()
    capture.install()
    wp.init()

    started = time.perf_counter()
    try:
        module, imported_as = import_user_module(request["path"], request["module_name"])
    except BaseException as error:  # noqa: BLE001 - SystemExit and anything else the user's code raises
        results.write({"event": "import-failed", "detail": _describe_exception(error)})
        return 0
    import_seconds = time.perf_counter() - started

    device = request.get("device") or ("cuda:0" if wp.get_cuda_device_count() > 0 else "cpu")
    results.write({"event": "imported", "seconds": import_seconds, "device": device, "how": imported_as})

    from warp_lint.runtime.experiments import FileSession

    current = {"id": None}
    session = FileSession(
        module,
        request,
        device=device,
        capture=capture,
        imported_as=imported_as,
        report=lambda phase: results.write({"event": "phase", "id": current["id"], "phase": phase}),
    )
    for finding in request["findings"]:
        current["id"] = finding["id"]
        results.write({"event": "start", "id": finding["id"]})
        try:
            if finding.get("replay_plan"):
                from warp_lint.runtime.replay import replay

                confirmation = replay(finding["replay_plan"], base_path=request["path"],
                                      module_name=request["module_name"], device=device,
                                      cache_dir=request["cache_dir"], seed=int(request.get("seed", 0)))
            else:
                confirmation = session.confirm(finding)
        except BaseException as error:  # noqa: BLE001 - a verdict, never a dead child, for Python errors
            confirmation = {
                "status": "inconclusive",
                "reason": Reason.CRASH,
                "detail": f"the experiment raised {_describe_exception(error)}",
                "evidence": {"traceback": traceback.format_exc(limit=8)[-4000:]},
            }
        confirmation.setdefault("warp_version", wp.__version__)
        confirmation.setdefault("device", device)
        confirmation["config"] = warp_settings(wp) | confirmation.get("config", {})
        results.write({"event": "result", "id": finding["id"], "confirmation": _clean(confirmation)})
        if not _device_usable(wp, device):
            # A CUDA fault (an illegal address, say) is sticky: every later call on this context
            # fails. The parent gives the remaining findings to a fresh child.
            return 0
    return 0


def _device_usable(wp, device: str) -> bool:
    try:
        wp.synchronize_device(device)
    except RuntimeError:
        return False
    return True


def _describe_exception(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r}) (the module calls sys.exit at import)"
    return f"{type(error).__name__}: {error}"[:2000]


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: user code may have left non-daemon threads or atexit hooks that would hang or
    # print after the results are complete.
    os._exit(code)
