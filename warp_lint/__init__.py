"""warp-lint: find silent gradient hazards in NVIDIA Warp code, and confirm them at run time.

Importing this package never imports ``warp``: only the runtime checker does, in a child process.
"""

__version__ = "0.1.0"
