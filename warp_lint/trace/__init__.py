"""``warp-lint trace``: run the user's own command with instrumentation on, then give every static
finding of the files it ran a verdict from what actually happened.

Layers (each imports only from those below it):

* :mod:`.events` - the wire format between the traced process and warp-lint (plain Python).
* :mod:`.bootstrap` - loaded at interpreter start in the traced process by the ``sitecustomize``
  the session writes; waits for ``import warp`` and then loads :mod:`.instrument`. No warp import.
* :mod:`.instrument` - the only module here that imports ``warp``: wraps ``wp.launch``, the
  ``wp.Tape`` methods, ``wp.copy`` and the array writers, captures Warp's overwrite-tracking
  messages, and gradchecks flagged kernels on copies of their real launch inputs.
* :mod:`.session` - parent side: the per-run directory, the child's environment, the command.
* :mod:`.matching` - parent side: events + static findings -> confirmations and runtime-only
  problems (``WR2xx``).
* :mod:`.command` - the ``warp-lint trace`` face: options, static pass, session, report.
"""
