"""What host code needs to know about a kernel, digested from the kernel model.

A launch reads and writes the arrays it is given according to its kernel: which parameters the
kernel reads, stores into or accumulates into (through its ``@wp.func`` helpers too), which fields
of struct parameters it touches, whether it stores an element twice. These facts are plain data,
so they travel between processes and into the cache with the file's summary, and host rules in
any file can read the facts of a kernel defined in another.
"""

from __future__ import annotations

import dataclasses

from warp_lint.kernels import FunctionModel, KernelIndex, mutually_exclusive, struct_field_effects


@dataclasses.dataclass(frozen=True)
class ParamFacts:
    name: str
    kind: str  # array | scalar | composite | struct | generic | unknown
    dtype: str | None
    differentiable: bool
    ndim: int = 0  # arrays: their number of dimensions

    @property
    def is_array(self) -> bool:
        return self.kind == "array"


@dataclasses.dataclass(frozen=True)
class KernelFacts:
    name: str
    kind: str  # kernel | func | ...
    params: tuple[ParamFacts, ...]
    effects: dict[str, frozenset[str]]  # array parameter -> read / write / accumulate
    struct_effects: dict[str, frozenset[str]]  # "param.field" -> read / write / accumulate
    stores_twice: frozenset[str]  # array parameters stored into twice in one pass, unconditionally
    options: dict  # the decorator's literal keywords
    runtime: dict  # what the runtime checker needs to run it (``FunctionModel.runtime_data``)

    def param(self, name: str) -> ParamFacts | None:
        return next((p for p in self.params if p.name == name), None)


def kernel_facts(function: FunctionModel, index: KernelIndex) -> KernelFacts:
    params = tuple(ParamFacts(p.name, p.type.kind, p.type.dtype, p.type.differentiable, p.type.ndim)
                   for p in function.params)
    effects = {array: frozenset(kinds) for array, kinds in function.effects().items()}
    structs = {field: frozenset(kinds) for field, kinds in struct_field_effects(function, index).items()}
    options = {k: v for k, v in function.options.items() if isinstance(v, (bool, int, float, str))}
    return KernelFacts(function.name, function.kind, params, effects, structs, _stored_twice(function), options,
                       function.runtime_data())


def _stored_twice(function: FunctionModel) -> frozenset[str]:
    """Array parameters with two plain stores that can both run in one pass, outside loops."""
    found = set()
    for param in function.arrays:
        stores = [a for a in function.accesses if a.array == param and a.kind == "write" and a.operator is None
                  and a.via is None and not a.loops]
        if any(not mutually_exclusive(first.branches, second.branches)
               for position, second in enumerate(stores) for first in stores[:position]):
            found.add(param)
    return frozenset(found)
