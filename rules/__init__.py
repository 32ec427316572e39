"""The warp-lint rule catalogue: one module per rule, discovered by ``warp_lint.registry``.

Installed as ``warp_lint.rules``. A rule module imports only from ``warp_lint``, never another rule.
"""
