"""Warp version ranges: does a rule's affected range overlap the range of Warp the user targets?

Both sides are PEP 440 specifier sets (``"<1.14"``, ``">=1.10,<2"``); the empty set means every
version. Overlap is decided on intervals, so ``"<1.14"`` and ``">=1.14"`` do not overlap while
``"<1.14"`` and ``">=1.10"`` do.
"""

from __future__ import annotations

import dataclasses
import functools

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

_LOWEST = Version("0.dev0")


@dataclasses.dataclass(frozen=True)
class _Interval:
    low: Version | None  # None: unbounded
    low_closed: bool
    high: Version | None
    high_closed: bool

    def intersect(self, other: _Interval) -> _Interval:
        low, low_closed = self.low, self.low_closed
        if other.low is not None and (low is None or other.low > low or (other.low == low and not other.low_closed)):
            low, low_closed = other.low, other.low_closed
        high, high_closed = self.high, self.high_closed
        if other.high is not None and (
            high is None or other.high < high or (other.high == high and not other.high_closed)
        ):
            high, high_closed = other.high, other.high_closed
        return _Interval(low, low_closed, high, high_closed)

    @property
    def empty(self) -> bool:
        if self.low is None or self.high is None:
            return False
        return self.low > self.high or (self.low == self.high and not (self.low_closed and self.high_closed))


_EVERYTHING = _Interval(None, False, None, False)


def _next_release(version: Version, depth: int) -> Version:
    parts = list(version.release[:depth]) or [0]
    parts[-1] += 1
    return Version(".".join(map(str, parts)) + ".dev0")


def _interval(operator: str, text: str) -> _Interval:
    if text.endswith(".*"):
        base = Version(text[:-2])
        upper = _next_release(base, len(base.release))
        if operator == "==":
            return _Interval(Version(text[:-2] + ".dev0"), True, upper, False)
        return _EVERYTHING  # "!=X.*" removes a hole; treat as no constraint for overlap
    version = Version(text)
    if operator == ">=":
        return _Interval(version, True, None, False)
    if operator == ">":
        return _Interval(version, False, None, False)
    if operator == "<=":
        return _Interval(None, False, version, True)
    if operator == "<":
        return _Interval(None, False, version, False)
    if operator in ("==", "==="):
        return _Interval(version, True, version, True)
    if operator == "~=":
        return _Interval(version, True, _next_release(version, len(version.release) - 1), False)
    return _EVERYTHING  # "!=" only removes a point


@functools.lru_cache(maxsize=None)
def _as_interval(spec: str) -> _Interval:
    result = _EVERYTHING
    for specifier in SpecifierSet(spec):
        result = result.intersect(_interval(specifier.operator, specifier.version))
    return result


def validate_specifier(spec: str) -> str | None:
    """Return an error message for a malformed specifier, else None. A bare version means ``==``."""
    try:
        SpecifierSet(normalize_specifier(spec))
    except (InvalidSpecifier, InvalidVersion) as error:
        return str(error)
    return None


def normalize_specifier(spec: str) -> str:
    spec = spec.strip()
    if spec and spec[0].isdigit():
        return f"=={spec}"
    return spec


def overlaps(affected: str, target: str) -> bool:
    """True when some Warp version is both affected and targeted."""
    if not affected or not target:
        return True
    return not _as_interval(normalize_specifier(affected)).intersect(_as_interval(normalize_specifier(target))).empty


def describe(spec: str) -> str:
    """Human words for a specifier, for messages: 'Warp <1.14'."""
    return f"Warp {spec}" if spec else "every Warp version"


def parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None
