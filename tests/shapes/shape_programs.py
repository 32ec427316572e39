"""Host-rule hazards written the way users write them: one scenario per hazard, spread over shapes.

A *scenario* is one rule's hazard as a small program, written once as a statement tree:

- *state*: arrays and host values the program allocates (`Alloc`), named by `{placeholders}`;
- *blocks*: named pieces of computation with parameters (the simulation, the loss, a reset), called
  with `Call`;
- the *driver*: tapes (`NewTape`, `Record`, `TapeCall`), loops, calls of the blocks, and the
  `Return` of the loss and the gradient the program reports.

`Choice(hazard, twin)` holds what differs between the hazard and its near-miss twin, and
`Expect(statement)` marks the statement the rule reports (written `# expect: CODE` on its line in the
hazard program only). A *shape* renders a scenario as files: blocks inline, as helpers one or two
calls deep, as methods, or in another module of a package; state as locals or attributes made in
`__init__`; tapes as locals or `self.tape`; launches direct or through the project's own wrapper.

Every program is a folder (a project: it has a `pyproject.toml`) holding `kernels.py` (the same
kernels for every program, so the runtime compiles them once per module name) and an entry module
whose `main(values)` returns `(loss, gradient)`: the loss the program computed from `values` and the
gradient of that loss with respect to `values` that its tape reports. The runtime check compares that
gradient with central differences of `main(values)[0]` (``tests/measured/measure_programs.py``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

# -- the statement tree ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Launch:
    kernel: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    options: str = ""  # extra keywords, as written: "record_tape=False"


@dataclasses.dataclass(frozen=True)
class Line:
    text: str


@dataclasses.dataclass(frozen=True)
class Alloc:
    """`{name} = value`: state of the driver (a top-level `Alloc` is what shapes move to `__init__`)."""

    name: str
    value: str


@dataclasses.dataclass(frozen=True)
class NewTape:
    tape: str


@dataclasses.dataclass(frozen=True)
class Record:
    tape: str | None  # None: an anonymous `with wp.Tape():`
    body: tuple


@dataclasses.dataclass(frozen=True)
class TapeCall:
    tape: str
    method: str  # backward | zero | reset
    args: str = ""


@dataclasses.dataclass(frozen=True)
class Loop:
    var: str
    count: str
    body: tuple


@dataclasses.dataclass(frozen=True)
class Call:
    block: str
    args: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Choice:
    hazard: tuple
    twin: tuple


@dataclasses.dataclass(frozen=True)
class Expect:
    statement: object


@dataclasses.dataclass(frozen=True)
class Return:
    text: str


@dataclasses.dataclass(frozen=True)
class Block:
    params: tuple[str, ...]
    body: tuple


def launch(kernel: str, inputs, outputs, options: str = "") -> Launch:
    return Launch(kernel, tuple(inputs), tuple(outputs), options)


def grad_array(size: str = "N", extra: str = "") -> str:
    return f"wp.zeros({size}, dtype=float, requires_grad=True{extra}, device=DEVICE)"


INPUT = "wp.array(values, dtype=float, requires_grad=True, device=DEVICE)"
RETURN = Return("float({loss}.numpy()[0]), {x}.grad.numpy().copy()")

# -- the scenarios ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str  # "WL201", "WL202-nested"
    rule: str
    hazard: str  # the hazard in words
    twin: str  # the near-miss twin in words
    blocks: dict
    driver: tuple
    values: tuple[float, ...] = (0.5, 1.5, 2.0)
    loss: str = "loss"  # the loss array (zeroed before each pass when a shape repeats the driver)
    kernel_expect: str = ""  # a kernel whose decorator line carries the finding (in kernels.py)
    target: str = "==1.19.0"  # the Warp version the static check targets (one the rule affects)
    fails: str = "wrong"  # how the hazard shows at run time where the rule affects the installed Warp: FAILURES


# How a hazard's gradient fails, as its rule's documentation says.
FAILURES = {
    "wrong": "a finite gradient that disagrees with finite differences",
    "zero": "an all-zero gradient where finite differences are not zero",
    "doubled": "twice the finite differences: the second of PASSES = 2 passes added to the first",
    "raises": "a RuntimeError from Warp",
}


SIMULATE = Block(("x", "y", "loss"), (launch("square", ["{x}"], ["{y}"]), launch("total", ["{y}"], ["{loss}"])))
STATE = (Alloc("x", INPUT), Alloc("y", grad_array()), Alloc("loss", grad_array("1")))

SCENARIOS = [
    Scenario(
        "WL201", "WL201",
        "the simulation writes its next state into the array it read (`x`), while the tape records",
        "the next state goes into its own buffer (`x_next`)",
        {"simulate": Block(("x", "y", "z", "x_next", "loss"), (
            launch("square", ["{x}"], ["{y}"]),
            launch("scale", ["{y}", "2.0"], ["{z}"]),
            Choice((Expect(launch("scale", ["{z}", "0.5"], ["{x}"])),),
                   (launch("scale", ["{z}", "0.5"], ["{x_next}"]),)),
            launch("total", ["{z}"], ["{loss}"]),
        ))},
        (Alloc("x", INPUT), Alloc("y", grad_array()), Alloc("z", grad_array()), Alloc("x_next", grad_array()),
         Alloc("loss", grad_array("1")), NewTape("tape"),
         Record("tape", (Call("simulate", ("{x}", "{y}", "{z}", "{x_next}", "{loss}")),)),
         TapeCall("tape", "backward", "{loss}"), RETURN),
    ),
    Scenario(
        "WL201-reader", "WL201",
        "`y` is overwritten after `total_square` read it, and `total_square`'s adjoint needs `y` (it squares it)",
        "the kernel that read `y` only sums it (`total`): its adjoint never needs the overwritten values",
        {"simulate": Block(("x", "y", "loss"), (
            launch("square", ["{x}"], ["{y}"]),
            Choice((launch("total_square", ["{y}"], ["{loss}"]),), (launch("total", ["{y}"], ["{loss}"]),)),
            Expect(launch("scale", ["{x}", "2.0"], ["{y}"])),
        ))},
        STATE + (NewTape("tape"), Record("tape", (Call("simulate", ("{x}", "{y}", "{loss}")),)),
                 TapeCall("tape", "backward", "{loss}"), RETURN),
    ),
    Scenario(
        "WL202-cross", "WL202",
        "the simulation is recorded on `tape`, the loss on `loss_tape`, and only `loss_tape.backward()` runs",
        "`tape.backward()` follows `loss_tape.backward()` and carries the gradient on",
        {"simulate": Block(("x", "y"), (launch("square", ["{x}"], ["{y}"]),)),
         "compute_loss": Block(("y", "loss"), (launch("total", ["{y}"], ["{loss}"]),))},
        STATE + (NewTape("tape"), Record("tape", (Call("simulate", ("{x}", "{y}")),)),
                 NewTape("loss_tape"), Record("loss_tape", (Call("compute_loss", ("{y}", "{loss}")),)),
                 Expect(TapeCall("loss_tape", "backward", "{loss}")),
                 Choice((), (TapeCall("tape", "backward"),)), RETURN),
        fails="zero",
    ),
    Scenario(
        "WL202-nested", "WL202",
        "the loss helper opens its own `with wp.Tape():` inside the caller's recording",
        "the loss helper launches on the caller's tape",
        {"simulate": Block(("x", "y", "loss"), (
            launch("square", ["{x}"], ["{y}"]),
            Choice((Expect(Record(None, (launch("total", ["{y}"], ["{loss}"]),))),),
                   (launch("total", ["{y}"], ["{loss}"]),)),
        ))},
        STATE + (NewTape("tape"), Record("tape", (Call("simulate", ("{x}", "{y}", "{loss}")),)),
                 TapeCall("tape", "backward", "{loss}"), RETURN),
        fails="raises",
    ),
    Scenario(
        "WL203", "WL203",
        "`y` goes through the host (`y_copy.assign(y.numpy())`) and back into a recorded launch",
        "`wp.copy(y_copy, y)`, which the tape records",
        {"simulate": Block(("x", "y", "y_copy", "loss"), (
            launch("square", ["{x}"], ["{y}"]),
            Choice((Expect(Line("{y_copy}.assign({y}.numpy())")),), (Line("wp.copy({y_copy}, {y})"),)),
            launch("total", ["{y_copy}"], ["{loss}"]),
        ))},
        STATE + (Alloc("y_copy", grad_array()), NewTape("tape"),
                 Record("tape", (Call("simulate", ("{x}", "{y}", "{y_copy}", "{loss}")),)),
                 TapeCall("tape", "backward", "{loss}"), RETURN),
        fails="zero",
    ),
    Scenario(
        "WL204", "WL204",
        "a fresh tape every pass, `backward()` every pass, the gradients never zeroed: they add up",
        "`tape.zero()` once the pass has read the gradient",
        {"simulate": SIMULATE},
        STATE + (Alloc("gradient", "None"), Loop("_", "PASSES", (
            Line("{loss}.zero_()"), NewTape("tape"), Record("tape", (Call("simulate", ("{x}", "{y}", "{loss}")),)),
            Expect(TapeCall("tape", "backward", "{loss}")),
            Line("{gradient} = {x}.grad.numpy().copy()"),
            Choice((), (TapeCall("tape", "zero"),)),
        )), Return("float({loss}.numpy()[0]), {gradient}")),
        fails="doubled",
    ),
    Scenario(
        "WL205-record", "WL205",
        "the first launch of the simulation has `record_tape=False` and feeds the loss",
        "`record_tape=False` only on a preview launch whose output never reaches the loss",
        {"simulate": Block(("x", "y", "preview", "loss"), (
            Choice((Expect(launch("square", ["{x}"], ["{y}"], "record_tape=False")),),
                   (launch("square", ["{x}"], ["{y}"]), launch("square", ["{x}"], ["{preview}"], "record_tape=False"))),
            launch("total", ["{y}"], ["{loss}"]),
        ))},
        STATE + (Alloc("preview", grad_array()), NewTape("tape"),
                 Record("tape", (Call("simulate", ("{x}", "{y}", "{preview}", "{loss}")),)),
                 TapeCall("tape", "backward", "{loss}"), RETURN),
        fails="zero",
    ),
    Scenario(
        "WL205-frozen", "WL205",
        "the simulation launches `square_frozen` (`@wp.kernel(enable_backward=False)`) on the gradient path",
        "`square_frozen` only renders a preview; the gradient path launches `square`",
        {"simulate": Block(("x", "y", "preview", "loss"), (
            Choice((launch("square_frozen", ["{x}"], ["{y}"]),),
                   (launch("square", ["{x}"], ["{y}"]), launch("square_frozen", ["{x}"], ["{preview}"]))),
            launch("total", ["{y}"], ["{loss}"]),
        ))},
        STATE + (Alloc("preview", grad_array()), NewTape("tape"),
                 Record("tape", (Call("simulate", ("{x}", "{y}", "{preview}", "{loss}")),)),
                 TapeCall("tape", "backward", "{loss}"), RETURN),
        kernel_expect="square_frozen",
        fails="zero",
    ),
    Scenario(
        "WL206", "WL206",
        "the intermediate state `y` is allocated without `requires_grad=True`",
        "`y` is allocated with `requires_grad=True`",
        {"simulate": SIMULATE},
        (Alloc("x", INPUT),
         Choice((Expect(Alloc("y", "wp.zeros(N, dtype=float, device=DEVICE)")),), (Alloc("y", grad_array()),)),
         Alloc("loss", grad_array("1")), NewTape("tape"),
         Record("tape", (Call("simulate", ("{x}", "{y}", "{loss}")),)),
         TapeCall("tape", "backward", "{loss}"), RETURN),
        fails="zero",
    ),
    Scenario(
        "WL206-temporary", "WL206",
        "the simulation allocates its temporary `y` itself, without `requires_grad=True`",
        "the temporary is allocated with `requires_grad=True`",
        {"simulate": Block(("x", "loss"), (
            Choice((Expect(Line("y = wp.zeros(N, dtype=float, device=DEVICE)")),),
                   (Line("y = wp.zeros(N, dtype=float, requires_grad=True, device=DEVICE)"),)),
            launch("square", ["{x}"], ["y"]),
            launch("total", ["y"], ["{loss}"]),
        ))},
        (Alloc("x", INPUT), Alloc("loss", grad_array("1")), NewTape("tape"),
         Record("tape", (Call("simulate", ("{x}", "{loss}")),)),
         TapeCall("tape", "backward", "{loss}"), RETURN),
        fails="zero",
    ),
    Scenario(
        "WL207", "WL207",
        "one tape made before the loop, re-entered every pass, `tape.zero()` but no `tape.reset()`",
        "`tape.reset()` instead of `tape.zero()`",
        {"simulate": SIMULATE},
        STATE + (Alloc("gradient", "None"), NewTape("tape"), Loop("_", "PASSES", (
            Line("{loss}.zero_()"),
            Expect(Record("tape", (Call("simulate", ("{x}", "{y}", "{loss}")),))),
            TapeCall("tape", "backward", "{loss}"),
            Line("{gradient} = {x}.grad.numpy().copy()"),
            Choice((TapeCall("tape", "zero"),), (TapeCall("tape", "reset"),)),
        )), Return("float({loss}.numpy()[0]), {gradient}")),
        fails="doubled",
    ),
    Scenario(
        "WL208", "WL208",
        "a fresh tape per step, the state carried to the next step (`x, x_next = x_next, x`) and the per-step"
        " gradients summed",
        "one tape over the episode, a state buffer per step, one `backward()` after the loop",
        {"simulate_step": Block(("x", "p", "x_next", "loss"), (
            launch("advance", ["{x}", "{p}"], ["{x_next}"]),
            launch("total_square", ["{x_next}"], ["{loss}"]),
        ))},
        (Alloc("p", INPUT), Choice(
            (Alloc("x", "wp.ones(N, dtype=float, requires_grad=True, device=DEVICE)"), Alloc("x_next", grad_array()),
             Alloc("loss", grad_array("1")), Alloc("total_loss", "0.0"), Alloc("gradient", "np.zeros(1)"),
             Loop("t", "STEPS", (
                 Line("{loss}.zero_()"), NewTape("tape"),
                 Record("tape", (Call("simulate_step", ("{x}", "{p}", "{x_next}", "{loss}")),)),
                 Expect(TapeCall("tape", "backward", "{loss}")),
                 Line("{total_loss} += float({loss}.numpy()[0])"),
                 Line("{gradient} += {p}.grad.numpy()"),
                 TapeCall("tape", "zero"),
                 Line("{x}, {x_next} = {x_next}, {x}"),
             )), Return("{total_loss}, {gradient}")),
            (Alloc("states", "[wp.ones(N, dtype=float, requires_grad=True, device=DEVICE)] + ["
                             "wp.zeros(N, dtype=float, requires_grad=True, device=DEVICE) for _ in range(STEPS)]"),
             Alloc("loss", grad_array("1")), NewTape("tape"),
             Record("tape", (Loop("t", "STEPS", (
                 Call("simulate_step", ("{states}[t]", "{p}", "{states}[t + 1]", "{loss}")),)),)),
             TapeCall("tape", "backward", "{loss}"), Return("float({loss}.numpy()[0]), {p}.grad.numpy().copy()")),
        )),
        values=(0.9,), loss="loss",
    ),
    Scenario(
        "WL209", "WL209",
        "the loss is computed with `wp.utils.array_sum(y, out=loss)` inside the tape block",
        "`wp.utils.array_sum` only fills a statistic; a recorded kernel computes the loss",
        {"simulate": Block(("x", "y", "stats", "loss"), (
            launch("square", ["{x}"], ["{y}"]),
            Choice((Expect(Line("wp.utils.array_sum({y}, out={loss})")),),
                   (Line("wp.utils.array_sum({y}, out={stats})"), launch("total", ["{y}"], ["{loss}"]))),
        ))},
        STATE + (Alloc("stats", grad_array("1")), NewTape("tape"),
                 Record("tape", (Call("simulate", ("{x}", "{y}", "{stats}", "{loss}")),)),
                 TapeCall("tape", "backward", "{loss}"), RETURN),
        fails="zero",
    ),
    Scenario(
        "WL210", "WL210",
        "the loss is computed after the `with tape:` block, then `tape.backward(loss)`",
        "the loss is computed inside the block; after it, a launch only reads the loss into a log",
        {"simulate": Block(("x", "y"), (launch("square", ["{x}"], ["{y}"]),)),
         "compute_loss": Block(("y", "loss"), (Expect(launch("total", ["{y}"], ["{loss}"])),))},
        STATE + (Alloc("log", grad_array("1")), NewTape("tape"),
                 Record("tape", (Call("simulate", ("{x}", "{y}")),
                                 Choice((), (Call("compute_loss", ("{y}", "{loss}")),)))),
                 Choice((Call("compute_loss", ("{y}", "{loss}")),), (launch("total", ["{loss}"], ["{log}"]),)),
                 TapeCall("tape", "backward", "{loss}"), RETURN),
        fails="zero",
    ),
    Scenario(
        "WL211", "WL211",
        "between the tape block and `backward()`, a reset overwrites the input `x` the block read (`x.fill_(1.0)`)",
        "the reset zeroes `x.grad` instead",
        {"simulate": SIMULATE,
         "reset_state": Block(("x",), (Choice((Expect(Line("{x}.fill_(1.0)")),), (Line("{x}.grad.zero_()"),)),))},
        STATE + (NewTape("tape"), Record("tape", (Call("simulate", ("{x}", "{y}", "{loss}")),)),
                 Call("reset_state", ("{x}",)), TapeCall("tape", "backward", "{loss}"), RETURN),
    ),
    Scenario(
        "WL212", "WL212",
        "`y` is allocated with `retain_grad=True` and two recorded launches store into it",
        "the same two stores into `y` without `retain_grad=True`",
        {"simulate": Block(("x", "y", "loss"), (
            launch("scale", ["{x}", "1.0"], ["{y}"]),
            launch("square", ["{x}"], ["{y}"]),
            launch("total", ["{y}"], ["{loss}"]),
        ))},
        (Alloc("x", INPUT),
         Choice((Expect(Alloc("y", grad_array(extra=", retain_grad=True"))),), (Alloc("y", grad_array()),)),
         Alloc("loss", grad_array("1")), NewTape("tape"),
         Record("tape", (Call("simulate", ("{x}", "{y}", "{loss}")),)),
         TapeCall("tape", "backward", "{loss}"), RETURN),
    ),
    Scenario(
        "WL213", "WL213",
        "`wp.copy(c, y)` on the tape, and a later recorded launch reads `y` too",
        "`wp.copy(c, y)` on the tape, and nothing recorded reads `y` afterwards",
        {"simulate": Block(("x", "y", "c", "loss"), (
            launch("square", ["{x}"], ["{y}"]),
            Choice((Expect(Line("wp.copy({c}, {y})")), launch("total", ["{c}"], ["{loss}"]),
                    launch("total", ["{y}"], ["{loss}"])),
                   (Line("wp.copy({c}, {y})"), launch("total", ["{c}"], ["{loss}"]))),
        ))},
        STATE + (Alloc("c", grad_array()), NewTape("tape"),
                 Record("tape", (Call("simulate", ("{x}", "{y}", "{c}", "{loss}")),)),
                 TapeCall("tape", "backward", "{loss}"), RETURN),
        target="==1.16.0",
    ),
    Scenario(
        "WL214", "WL214",
        "the program chains the loss's gradient with respect to the intermediate `y` by hand: `y.grad`, read"
        " after `backward()`, times dy/dx",
        "the same, with `y` allocated with `retain_grad=True`",
        {"simulate": SIMULATE,
         "chain_rule": Block(("x", "y", "dx"), (Expect(Line("{dx}.assign({y}.grad.numpy() * 2.0 * {x}.numpy())")),))},
        (Alloc("x", INPUT),
         Choice((Alloc("y", grad_array()),), (Alloc("y", grad_array(extra=", retain_grad=True")),)),
         Alloc("loss", grad_array("1")), Alloc("dx", "wp.zeros(N, dtype=float, device=DEVICE)"), NewTape("tape"),
         Record("tape", (Call("simulate", ("{x}", "{y}", "{loss}")),)),
         TapeCall("tape", "backward", "{loss}"), Call("chain_rule", ("{x}", "{y}", "{dx}")),
         Return("float({loss}.numpy()[0]), {dx}.numpy().copy()")),
        fails="zero",
    ),
    Scenario(
        "WL215", "WL215",
        "`wp.copy(c, y, src_offset=1, count=2)` on the tape: two different offsets (the destination's is 0)",
        "`wp.copy(c, y, dest_offset=1, src_offset=1, count=2)` on the tape: the same offset on both sides",
        {"simulate": Block(("x", "y", "c", "loss"), (
            launch("square", ["{x}"], ["{y}"]),
            Choice((Expect(Line("wp.copy({c}, {y}, src_offset=1, count=2)")),),
                   (Line("wp.copy({c}, {y}, dest_offset=1, src_offset=1, count=2)"),)),
            launch("total", ["{c}"], ["{loss}"]),
        ))},
        STATE + (Alloc("c", grad_array()), NewTape("tape"),
                 Record("tape", (Call("simulate", ("{x}", "{y}", "{c}", "{loss}")),)),
                 TapeCall("tape", "backward", "{loss}"), RETURN),
        target="==1.14.0",
    ),
]
SCENARIO_BY_NAME = {s.name: s for s in SCENARIOS}

KERNELS = '''\
import warp as wp


@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


@wp.kernel
def scale(x: wp.array(dtype=float), s: float, y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * s


@wp.kernel
def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i])


@wp.kernel
def total_square(x: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, x[i] * x[i])


@wp.kernel
def advance(x: wp.array(dtype=float), p: wp.array(dtype=float), x_next: wp.array(dtype=float)):
    i = wp.tid()
    x_next[i] = x[i] * p[0] + 1.0


@wp.kernel(enable_backward=False)
def square_frozen(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]
'''
KERNEL_NAMES = re.findall(r"^def (\w+)", KERNELS, re.M)
CONSTANTS = 'DEVICE = "cpu"\nN = 3\nPASSES = 2\nSTEPS = 3\n'
PLACEHOLDER = re.compile(r"\{(\w+)\}")


# -- resolving a variant ------------------------------------------------------------------------------

def resolve(statements, variant: str) -> tuple:
    """The statements of one variant: choices made, `Expect` kept (hazard) or dropped (twin)."""
    out = []
    for statement in statements:
        if isinstance(statement, Choice):
            out += resolve(statement.hazard if variant == "hazard" else statement.twin, variant)
        elif isinstance(statement, Expect):
            inner = resolve((statement.statement,), variant)
            out += [Expect(inner[0])] if variant == "hazard" else inner
        elif isinstance(statement, Record):
            out.append(dataclasses.replace(statement, body=resolve(statement.body, variant)))
        elif isinstance(statement, Loop):
            out.append(dataclasses.replace(statement, body=resolve(statement.body, variant)))
        else:
            out.append(statement)
    return tuple(out)


def core(statement):
    return statement.statement if isinstance(statement, Expect) else statement


def walk(statements):
    for statement in statements:
        yield statement
        inner = core(statement)
        if isinstance(inner, (Record, Loop)):
            yield from walk(inner.body)


def texts(statements) -> list[str]:
    found = []
    for statement in walk(statements):
        inner = core(statement)
        if isinstance(inner, Launch):
            found += [*inner.inputs, *inner.outputs]
        elif isinstance(inner, (Line, Return)):
            found.append(inner.text)
        elif isinstance(inner, Alloc):
            found.append(inner.value)
        elif isinstance(inner, Call):
            found += list(inner.args)
    return found


# -- rendering ------------------------------------------------------------------------------------------

class Writer:
    """Renders statements as lines of code. Shapes differ in how they name state and tapes, render
    launches and calls, and where allocations and tape creations go."""

    def __init__(self, shape: Shape, scenario: Scenario, variant: str):
        self.shape = shape
        self.blocks = {name: Block(b.params, resolve(b.body, variant)) for name, b in scenario.blocks.items()}
        self.rule = scenario.rule
        self.states: set[str] = set()  # the driver's state names, where a shape needs them
        self.kernels: set[str] = set()  # kernels this file launches
        self.called: set[str] = set()  # blocks this file calls
        self.receiver = "self"  # what a method call's receiver is written as, where blocks are methods
        self.call_args: dict[str, tuple[str, ...]] = {}  # block -> the arguments of its call, as written

    def render(self, statements, names: dict[str, str], indent: int) -> list[str]:
        lines: list[str] = []
        for statement in statements:
            lines += self.statement(statement, names, indent)
        return lines

    def statement(self, statement, names, indent) -> list[str]:
        pad = "    " * indent
        if isinstance(statement, Expect):
            lines = self.statement(statement.statement, names, indent)
            if lines:
                lines[0] += f"  # expect: {self.rule}"
            return lines
        sub = lambda text: PLACEHOLDER.sub(lambda m: names.get(m.group(1), m.group(0)), text)  # noqa: E731
        if isinstance(statement, Launch):
            self.kernels.add(statement.kernel)
            inputs = ", ".join(sub(a) for a in statement.inputs)
            outputs = ", ".join(sub(a) for a in statement.outputs)
            return [pad + self.shape.launch(statement.kernel, inputs, outputs, statement.options)]
        if isinstance(statement, Line):
            return [pad + sub(statement.text)]
        if isinstance(statement, Alloc):
            return [pad + f"{names.get(statement.name, statement.name)} = {sub(statement.value)}"]
        if isinstance(statement, NewTape):
            return [pad + f"{names[statement.tape]} = wp.Tape()"]
        if isinstance(statement, Record):
            header = f"with {names[statement.tape]}:" if statement.tape else "with wp.Tape():"
            return [pad + header] + (self.render(statement.body, names, indent + 1) or [pad + "    pass"])
        if isinstance(statement, TapeCall):
            return [pad + f"{names[statement.tape]}.{statement.method}({sub(statement.args)})"]
        if isinstance(statement, Loop):
            return [pad + f"for {statement.var} in range({statement.count}):"] + (
                self.render(statement.body, names, indent + 1) or [pad + "    pass"])
        if isinstance(statement, Call):
            self.call_args[statement.block] = statement.args
            args = [sub(a) for a in statement.args]
            return self.shape.call(self, statement.block, args, indent)
        if isinstance(statement, Return):
            return [pad + f"return {sub(statement.text)}"]
        raise TypeError(statement)

    def inline(self, block: str, args: list[str], indent: int) -> list[str]:
        definition = self.blocks[block]
        return self.render(definition.body, dict(zip(definition.params, args)), indent)

    def function(self, name: str, block: str, indent: int = 0, receiver: str = "", body_name: str = "",
                 attributes: dict[str, str] | None = None) -> list[str]:
        """`def name(params):` holding the block's body (or a call of ``body_name`` with the same arguments).
        ``attributes``: parameters read from the object instead (`param` -> `self.state`)."""
        definition = self.blocks[block]
        attributes = attributes or {}
        kept = [p for p in definition.params if p not in attributes]
        params = ", ".join(([receiver] if receiver else []) + kept)
        pad = "    " * (indent + 1)
        if body_name:
            body = [pad + f"{body_name}({', '.join(kept)})"]
        else:
            names = {p: attributes.get(p, p) for p in definition.params}
            body = self.render(definition.body, names, indent + 1) or [pad + "pass"]
        return ["    " * indent + f"def {name}({params}):"] + body


class Shape:
    """A way users write programs. ``files`` returns {relative path: text} and the entry module."""

    name = ""
    summary = ""
    entry = "main"

    def launch(self, kernel: str, inputs: str, outputs: str, options: str) -> str:
        extra = f", {options}" if options else ""
        return f"wp.launch({kernel}, dim=N, inputs=[{inputs}], outputs=[{outputs}], device=DEVICE{extra})"

    def call(self, writer: Writer, block: str, args: list[str], indent: int) -> list[str]:
        return writer.inline(block, args, indent)

    def files(self, scenario: Scenario, variant: str) -> dict[str, str]:
        raise NotImplementedError

    # helpers
    @staticmethod
    def header(writer: Writer, imports: list[str], body: list[str], kernels_module: str = "kernels",
               whole: bool = False) -> str:
        """The module's imports and constants, then ``body``. ``whole``: import the kernels module itself
        (`from simpkg import kernels`), not its kernels by name."""
        lines = ["import numpy as np", "import warp as wp", ""]
        if writer.kernels and whole:
            package, _, module = kernels_module.rpartition(".")
            lines += [f"from {package or '.'} import {module}"]
        elif writer.kernels:
            lines += [f"from {kernels_module} import {', '.join(sorted(writer.kernels))}"]
        lines += imports
        lines += ["", CONSTANTS.rstrip()]
        return "\n".join(lines + body).rstrip() + "\n"


def state_names(statements) -> list[str]:
    return list(dict.fromkeys(core(s).name for s in walk(statements) if isinstance(core(s), Alloc)))


def tape_names(statements) -> list[str]:
    found = []
    for statement in walk(statements):
        inner = core(statement)
        if isinstance(inner, (NewTape, TapeCall)) or (isinstance(inner, Record) and inner.tape):
            found.append(inner.tape)
    return list(dict.fromkeys(found))


def local_names(statements) -> dict[str, str]:
    return {name: name for name in state_names(statements) + tape_names(statements)}


class Flat(Shape):
    name = "flat"
    summary = "the rule's own form: one function holds the state, the tape, the launches and backward()"

    def files(self, scenario, variant):
        writer = Writer(self, scenario, variant)
        driver = resolve(scenario.driver, variant)
        body = ["", "", "def main(values):"] + writer.render(driver, local_names(driver), 1)
        return {"main.py": self.header(writer, [], self.extra(writer) + body)}

    def extra(self, writer: Writer) -> list[str]:
        """Module-level definitions the rendered main() needs (helpers, a launch wrapper)."""
        return []


class Helper(Flat):
    name = "helper"
    summary = "the tape block (or the code between it and backward()) calls a helper function holding the launches"
    depth = 1

    def call(self, writer, block, args, indent):
        writer.called.add(block)
        return ["    " * indent + f"{block}({', '.join(args)})"]

    def extra(self, writer):
        lines = []
        for block in sorted(writer.called):
            if self.depth == 2:
                lines += ["", ""] + writer.function(block, block, body_name=f"{block}_launches")
                lines += ["", ""] + writer.function(f"{block}_launches", block)
            else:
                lines += ["", ""] + writer.function(block, block)
        return lines


class HelperTwoDeep(Helper):
    name = "helper2"
    summary = "the same, two calls deep: the helper calls another helper that launches"
    depth = 2


class Wrapper(Flat):
    name = "wrapper"
    summary = "every launch goes through the project's own `launch(kernel, inputs, outputs, ...)` around wp.launch"

    def launch(self, kernel, inputs, outputs, options):
        extra = f", {options}" if options else ""
        return f"launch({kernel}, [{inputs}], [{outputs}]{extra})"

    def extra(self, writer):
        return ["", "", "def launch(kernel, inputs, outputs, record_tape=True):",
                "    wp.launch(kernel, dim=N, inputs=inputs, outputs=outputs, device=DEVICE, record_tape=record_tape)"]


class SelfTape(Shape):
    name = "self_tape"
    summary = ("a class holds the tape as `self.tape` (made in `__init__`; a tape made afresh in a loop is"
               " assigned to `self.tape` there); a method runs the program")

    def files(self, scenario, variant):
        writer = Writer(self, scenario, variant)
        driver = resolve(scenario.driver, variant)
        names = local_names(driver)
        names.update({tape: f"self.{tape}" for tape in tape_names(driver)})
        made = [s for s in driver if isinstance(core(s), NewTape)]
        init = writer.render(made, names, 2) or ["        pass"]
        run = writer.render([s for s in driver if not isinstance(core(s), NewTape)], names, 2)
        body = ["", "", "class Trainer:", "    def __init__(self):"] + init
        body += ["", "    def gradient(self, values):"] + run
        body += ["", "", "def main(values):", "    trainer = Trainer()", "    return trainer.gradient(values)"]
        return {"main.py": self.header(writer, [], body)}


class InitState(Shape):
    name = "init_state"
    summary = "the state arrays are allocated in `__init__` and used as `self.x` by the method that records"

    def files(self, scenario, variant):
        writer = Writer(self, scenario, variant)
        driver = resolve(scenario.driver, variant)
        names = local_names(driver)
        allocs = [s for s in driver if isinstance(core(s), Alloc)]
        names.update({name: f"self.{name}" for name in state_names(allocs)})
        init = writer.render(allocs, names, 2)
        run = writer.render([s for s in driver if not isinstance(core(s), Alloc)], names, 2)
        body = ["", "", "class Simulation:", "    def __init__(self, values):"] + init
        body += ["", "    def run(self):"] + run
        body += ["", "", "def main(values):", "    sim = Simulation(values)", "    return sim.run()"]
        return {"main.py": self.header(writer, [], body)}


def first_loop(statements) -> tuple[tuple, int, Loop | None]:
    """The first loop in program order at the top level or directly in a top-level tape block:
    (the statement list holding it, its index there, the loop)."""
    for index, statement in enumerate(statements):
        inner = core(statement)
        if isinstance(inner, Loop):
            return statements, index, inner
        if isinstance(inner, Record):
            for position, nested in enumerate(inner.body):
                if isinstance(core(nested), Loop):
                    return inner.body, position, core(nested)
    return statements, -1, None


def uses(statements, name: str) -> bool:
    return name != "_" and any(re.search(rf"\b{re.escape(name)}\b", text) for text in texts(statements))


class StepLoop(Shape):
    name = "step_loop"
    summary = ("an `Example` class in the style of Warp's examples: state made in `__init__`, blocks as methods,"
               " a `step()` method called from the main loop (the scenario's own loop, or PASSES passes)")
    obj = "example"

    def call(self, writer, block, args, indent):
        # As in Warp's examples, a method reads the object's own state (`self.x`): only the arguments
        # that are not plain state (`states[t]`) stay parameters.
        writer.called.add(block)
        attributes = self.attributes(writer, block)
        params = writer.blocks[block].params
        passed = [arg for param, arg in zip(params, args) if param not in attributes]
        return ["    " * indent + f"{writer.receiver}.{block}({', '.join(passed)})"]

    def attributes(self, writer: Writer, block: str) -> dict[str, str]:
        found = {}
        for param, arg in zip(writer.blocks[block].params, writer.call_args.get(block, ())):
            match = PLACEHOLDER.fullmatch(arg)
            if match and match.group(1) in writer.states:
                found[param] = f"self.{match.group(1)}"
        return found

    def files(self, scenario, variant):
        writer = Writer(self, scenario, variant)
        driver = resolve(scenario.driver, variant)
        allocs = [s for s in driver if isinstance(core(s), Alloc)]
        writer.states = set(state_names(allocs))
        rest = tuple(s for s in driver if not isinstance(core(s), Alloc))
        inside = local_names(driver)
        inside.update({name: f"self.{name}" for name in state_names(allocs) + tape_names(driver)})
        outside = {name: f"{self.obj}.{name}" for name in inside}
        holder, index, loop = first_loop(rest)
        init_made: list = []
        if loop is None:
            # No loop of its own: step() is one pass of the whole program, repeated from the main loop.
            ret = next(s for s in rest if isinstance(s, Return))
            tapes = [core(s).tape for s in rest if isinstance(core(s), NewTape)]
            step_body = [Line(f"{{{scenario.loss}}}.zero_()")] + [s for s in rest if s is not ret]
            step_body += [Line(f"result = {ret.text}")] + [TapeCall(t, "zero") for t in tapes] + [Line("return result")]
            params = ""
            main_body = ["    for _ in range(PASSES):", f"        result = {self.obj}.step()", "    return result"]
            writer.receiver = "self"
            step = writer.render(step_body, inside, 2)
        else:
            params = f", {loop.var}" if uses(loop.body, loop.var) else ""
            writer.receiver = "self"
            step = writer.render(loop.body, inside, 2)
            # the program around the loop body runs in main(); tapes made outside it go to __init__
            init_made = [s for s in rest if isinstance(core(s), NewTape)]
            replaced = Line(f"{self.obj}.step({loop.var if params else ''})")
            new_loop = dataclasses.replace(loop, body=(replaced,))
            around = []
            for statement in rest:
                if statement in init_made:
                    continue
                if holder is rest and statement is rest[index]:
                    around.append(new_loop)
                elif isinstance(core(statement), Record) and core(statement).body is holder:
                    body = list(holder)
                    body[index] = new_loop
                    around.append(dataclasses.replace(core(statement), body=tuple(body)))
                else:
                    around.append(statement)
            writer.receiver = self.obj
            main_body = writer.render(around, outside, 1)
        writer.receiver = "self"
        init = writer.render(allocs + init_made, inside, 2)
        methods = []
        for block in sorted(writer.called):
            methods += [""] + writer.function(block, block, indent=1, receiver="self",
                                              attributes=self.attributes(writer, block))
        body = ["", "", "class Example:", "    def __init__(self, values):"] + init + methods
        body += ["", f"    def step(self{params}):"] + step
        body += ["", "", "def main(values):", f"    {self.obj} = Example(values)"] + main_body
        return {"main.py": self.header(writer, [], body)}


def split_at_backward(statements) -> tuple[tuple, int, Loop | None]:
    """Where the recording ends and backward() starts: (the statement list, the index of the first
    `backward()` there, the top-level loop holding it or None)."""
    for index, statement in enumerate(statements):
        inner = core(statement)
        if isinstance(inner, TapeCall) and inner.method == "backward":
            return statements, index, None
        if isinstance(inner, Loop):
            for position, nested in enumerate(inner.body):
                if isinstance(core(nested), TapeCall) and core(nested).method == "backward":
                    return inner.body, position, inner
    raise ValueError("the driver never calls backward()")


class BackwardElsewhere(Shape):
    name = "backward_method"
    summary = ("a `Trainer` holds the state and `self.tape`; `record()` runs the tape block, `backward()` (another"
               " method) runs `self.tape.backward(...)`; main() calls them in turn")
    obj = "trainer"

    def files(self, scenario, variant):
        writer = Writer(self, scenario, variant)
        driver = resolve(scenario.driver, variant)
        allocs = [s for s in driver if isinstance(core(s), Alloc)]
        made = [s for s in driver if isinstance(core(s), NewTape)]
        rest = tuple(s for s in driver if s not in allocs and s not in made)
        inside = local_names(driver)
        inside.update({name: f"self.{name}" for name in state_names(allocs) + tape_names(driver)})
        outside = {name: f"{self.obj}.{name}" for name in inside}
        holder, index, loop = split_at_backward(rest)
        ret = [s for s in rest if isinstance(s, Return)]
        calls = [Line(f"{self.obj}.record()"), Line(f"{self.obj}.backward()")]
        if loop is None:
            record, backward = holder[:index], [s for s in holder[index:] if s not in ret]
            main_statements = calls + ret
        else:
            record, backward = holder[:index], holder[index:]
            main_statements = [dataclasses.replace(loop, body=tuple(calls)) if s is loop else s for s in rest]
        init = writer.render(allocs + made, inside, 2)
        body = ["", "", "class Trainer:", "    def __init__(self, values):"] + init
        body += ["", "    def record(self):"] + (writer.render(record, inside, 2) or ["        pass"])
        body += ["", "    def backward(self):"] + (writer.render(backward, inside, 2) or ["        pass"])
        body += ["", "", "def main(values):", f"    {self.obj} = Trainer(values)"]
        body += writer.render(main_statements, outside, 1)
        return {"main.py": self.header(writer, [], body)}


class Package(Helper):
    name = "package"
    summary = ("a package `simpkg/`: kernels in `kernels.py`, the blocks as functions in `sim.py` (relative"
               " imports), tapes and backward() in `train.py` (absolute imports)")
    entry = "simpkg.train"

    def files(self, scenario, variant):
        train = Writer(self, scenario, variant)
        driver = resolve(scenario.driver, variant)
        main = ["", "", "def main(values):"] + train.render(driver, local_names(driver), 1)
        sim = Writer(self, scenario, variant)
        functions = []
        for block in sorted(train.called):
            functions += ["", ""] + sim.function(block, block)
        files = {
            "simpkg/__init__.py": '"""A differentiable simulation in three modules."""\n',
            "simpkg/train.py": self.header(train, self.imports(train), main, "simpkg.kernels", self.whole),
        }
        if train.called:
            files["simpkg/sim.py"] = self.header(sim, [], functions, ".kernels", self.whole)
        return files

    whole = False  # import modules whole (`kernels.square`, `sim.simulate`)

    def imports(self, train: Writer) -> list[str]:
        return [f"from simpkg.sim import {', '.join(sorted(train.called))}"] if train.called else []


class PackageModules(Package):
    name = "package_modules"
    summary = ("the same package with modules imported whole: `from . import kernels` and"
               " `wp.launch(kernels.square, ...)` in `sim.py`, `from simpkg import sim` and `sim.simulate(...)`"
               " in `train.py`")
    whole = True

    def launch(self, kernel, inputs, outputs, options):
        return super().launch(f"kernels.{kernel}", inputs, outputs, options)

    def call(self, writer, block, args, indent):
        writer.called.add(block)
        return ["    " * indent + f"sim.{block}({', '.join(args)})"]

    def imports(self, train: Writer) -> list[str]:
        return ["from simpkg import sim"] if train.called else []


SHAPES = [Flat(), Helper(), HelperTwoDeep(), SelfTape(), InitState(), StepLoop(), BackwardElsewhere(), Package(),
          PackageModules(), Wrapper()]
SHAPE_BY_NAME = {s.name: s for s in SHAPES}


# -- programs on disk ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Program:
    scenario: Scenario
    shape: Shape
    variant: str  # hazard | twin
    folder: Path
    files: dict

    @property
    def id(self) -> str:
        return f"{self.scenario.name}-{self.shape.name}-{self.variant}"

    def expected(self) -> list[tuple[str, int, str]]:
        """(file, line, code) of every `# expect:` marker in the program."""
        from expect_markers import expected

        return sorted((path, line, code) for path, text in self.files.items() for line, code in expected(text))

    def manifest(self) -> dict:
        return {"id": self.id, "folder": str(self.folder), "entry": self.shape.entry,
                "values": list(self.scenario.values)}


def kernels_text(scenario: Scenario, variant: str) -> str:
    if variant != "hazard" or not scenario.kernel_expect:
        return KERNELS
    marked = f"@wp.kernel(enable_backward=False)\ndef {scenario.kernel_expect}("
    assert marked in KERNELS, scenario.kernel_expect
    return KERNELS.replace(marked, marked.replace("\n", f"  # expect: {scenario.rule}\n", 1))


def program_files(scenario: Scenario, shape: Shape, variant: str) -> dict[str, str]:
    files = dict(shape.files(scenario, variant))
    kernels = "simpkg/kernels.py" if shape.entry.startswith("simpkg.") else "kernels.py"
    files[kernels] = kernels_text(scenario, variant)
    files["pyproject.toml"] = f'[project]\nname = "{scenario.name.lower()}-{shape.name.replace("_", "-")}"\n' \
                              f'version = "0"\n'
    return files


def write_program(scenario: Scenario, shape: Shape, variant: str, root: Path) -> Program:
    folder = root / f"{scenario.name}-{shape.name}-{variant}"
    files = program_files(scenario, shape, variant)
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Program(scenario, shape, variant, folder, files)


def write_manifest(programs: list[Program], path: Path) -> Path:
    path.write_text(json.dumps([p.manifest() for p in programs], indent=1))
    return path
