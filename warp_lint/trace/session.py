"""Parent side of ``warp-lint trace``: one temporary directory per run, and the command in it.

Plain Python (no warp). The directory holds:

* ``sitecustomize.py`` (:data:`warp_lint.trace.bootstrap.SITECUSTOMIZE`): Python imports it at
  start-up from the first ``PYTHONPATH`` entry, so every Python process the command starts is
  instrumented without a change to the user's code; it chains to the ``sitecustomize`` it shadows;
* ``warp_lint``: a link to this very package, so the traced interpreter (which may be another
  virtual environment) imports the same warp-lint; nothing else of warp-lint's checkout is put on
  its path (its ``tests`` folder would shadow the user's);
* ``config.json``: what the static pass found (flagged kernels and the lines to watch) and the
  limits; ``events.jsonl``: what the processes saw (:mod:`.events`); ``generated/``: coverage
  copies of flagged kernels.

The command inherits stdin, stdout and stderr: its output reaches the terminal as it is, and its
exit status is returned as it is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import tempfile
from typing import Any

from warp_lint.trace.bootstrap import SITECUSTOMIZE
from warp_lint.trace.events import CONFIG_FILE, ENVIRONMENT_VARIABLE, EVENTS_FILE, read_events

EXIT_COMMAND_NOT_FOUND = 127


@dataclasses.dataclass
class TraceLimits:
    max_checks_per_kernel: int = 3  # gradchecks of real launches per flagged kernel (per process)
    full_jacobian_limit: int = 256  # above this many scalars in an array: directional test only
    fast_mode: bool = False  # directional test only, whatever the sizes
    gradcheck: bool = True
    overwrite_tracking: bool = True
    seed: int = 0


class Session:
    def __init__(self, kernels: dict[str, dict[str, Any]], files: list[str], limits: TraceLimits,
                 keep: bool = False):
        self.directory = tempfile.mkdtemp(prefix="warp-lint-trace-")
        self.keep = keep
        self.events_path = os.path.join(self.directory, EVENTS_FILE)
        with open(os.path.join(self.directory, "sitecustomize.py"), "w", encoding="utf-8") as handle:
            handle.write(SITECUSTOMIZE)
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        link = os.path.join(self.directory, "warp_lint")
        try:
            os.symlink(package, link, target_is_directory=True)
        except (OSError, NotImplementedError):  # no symlinks (some Windows setups): copy the sources
            shutil.copytree(package, link, ignore=shutil.ignore_patterns("__pycache__"))
        config = {"kernels": kernels, "files": files, **dataclasses.asdict(limits)}
        with open(os.path.join(self.directory, CONFIG_FILE), "w", encoding="utf-8") as handle:
            json.dump(config, handle)
        open(self.events_path, "w").close()

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        existing = env.get("PYTHONPATH")
        env["PYTHONPATH"] = self.directory + (os.pathsep + existing if existing else "")
        env[ENVIRONMENT_VARIABLE] = self.directory
        return env

    def run(self, command: list[str], cwd: str | None = None) -> int:
        """Run the command with inherited streams; its exit status (128+N when killed by signal N)."""
        try:
            process = subprocess.Popen(command, env=self.environment(), cwd=cwd)
        except FileNotFoundError:
            raise CommandNotFound(command[0]) from None
        except PermissionError as error:
            raise CommandNotFound(f"{command[0]} ({error.strerror})") from None
        while True:
            try:
                code = process.wait()
                break
            except KeyboardInterrupt:  # the command got the same Ctrl-C: let it decide and finish
                continue
        if code < 0:
            try:
                signal.Signals(-code)
            except ValueError:
                pass
            return 128 - code
        return code

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_path)

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.directory, ignore_errors=True)


class CommandNotFound(Exception):
    pass
