"""warp-lint: find silent gradient hazards in NVIDIA Warp code, and confirm them at run time.

Importing this package never imports ``warp``: only the runtime checker does, in a child process.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `warp_lint.gradcheck` is the runtime checker's public API; importing it lazily keeps
    # `import warp_lint` free of warp and numpy.
    if name in ("gradcheck", "GradcheckError", "GradcheckResult"):
        import warp_lint.runtime as runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'warp_lint' has no attribute {name!r}")
