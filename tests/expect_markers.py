"""`# expect: CODE` markers: the findings a fixture or generated program plants, next to their lines.

Imported by name (``from expect_markers import expected``): the tests folder is on ``sys.path``.
"""

from __future__ import annotations

import re

EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")


def expected(text: str) -> list[tuple[int, str]]:
    """(line, code) of every planted finding in ``text``, sorted."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = EXPECT.search(line)
        if match:
            found += [(number, c.strip()) for c in match.group(1).split(",") if c.strip()]
    return sorted(found)
