from __future__ import annotations

import re

from warp_lint.host import WRITING_METHODS, HostEvent, HostScope, Location
from warp_lint.project_context import ProjectContext
from warp_lint.rule import Example, Rule

RETAIN = re.compile(r"\bretain_grad\s*=")
RETAIN_OFF = re.compile(r"\bretain_grad\s*=\s*False\b")
# `states@1[t@5 + 1].q`: an element of a list picked by an index
ELEMENT = re.compile(r"^(?P<list>[^\[]+)\[(?P<index>[^\[\]]+)\](?P<rest>.*)$")
# a loop target, plus a literal offset
FROM_TARGET = re.compile(r"^(?P<target>[\w@]+)(?:\s*\+\s*(?P<offset>\d+))?$")


class IntermediateGradAfterBackward(Rule):
    """The gradient of an intermediate array (one the tape stored into) is read after `backward()`: it is zero.

    ## What it does
    After a `tape.backward(...)`, flags a read of `y.grad` (or `tape.gradients[y]`): `.numpy()`,
    `wp.to_torch(...)`, an argument of a launch or of a later `backward(grads=...)`, where `y` is an
    intermediate of that tape: a launch recorded on it before the `backward()` stores a value that
    carries a gradient into `y` (`y[i] = ...`, in a kernel whose backward is on) before anything
    recorded reads `y`. An element of a list of states that a loop stores into (`states[t + 1]`)
    is matched by a read of `states[-1]` or `states[steps]`, not of `states[0]`. Fine: arrays
    allocated with `retain_grad=True` (or made by a call passing `retain_grad=` something other than
    `False`), arrays the tape only accumulates into (`wp.atomic_add`, `y[i] += ...`), arrays read
    before they are stored (an input updated in place), identity tests (`y.grad is None`,
    `assertIs`), writes of the gradient (`y.grad.zero_()`, `y.grad = g`, `wp.copy(y.grad, g)`) and
    reads after such a write or after a later recorded launch writes `y`.

    ## Why is this bad?
    From 1.13, the adjoint of a store reads the stored elements' gradient and then zeroes it, so
    that a value overwritten later on the tape gets no gradient of the value that replaced it.
    After `backward()`, an array's `.grad` holds the gradient with respect to the value it had
    before the tape ran; for an intermediate that value was never read, so the gradient is zero:
    the sensitivity of the loss to the last state of a rollout, a rendered image or a network's
    input handed to another framework reads as zeros, without an error. (An input updated in place
    keeps the gradient with respect to its incoming value: the adjoints of its reads run after the
    store's.) Up to 1.12 the gradient of the stored values was kept.

    ## Fix safety
    No automatic fix: allocate the array with `retain_grad=True` (1.13 and later) where one launch
    stores into it once (where several do, store each value in an array of its own first: WL212).

    ## Warp versions
    1.13 and later. Measured on the CPU, `y = x*x` stored, `loss = sum sin(y)` accumulated,
    `tape.backward(loss)`, `y.grad` read: on 1.19.0 and 1.13.0 [0, 0, 0] (right: cos(y) = [0.996,
    0.882, 0.353]); with `retain_grad=True`, or with `y` accumulated by `wp.atomic_add`, the right
    values; on 1.12.1 the right values. `x.grad` is right on every version. A stored loss
    (`loss[0] = ...`) has its own `.grad` zeroed the same way (1.0 before 1.13).

    ## Confirmation
    None at run time: read from the host code.
    """

    code = "WL214"
    name = "intermediate-grad-after-backward"
    affected_versions = ">=1.13"
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            @wp.kernel
            def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, wp.sin(y[i]))

            def run(x, n):
                y = wp.zeros(n, dtype=float, requires_grad=True, retain_grad=True)
                loss = wp.zeros(1, dtype=float, requires_grad=True)
                tape = wp.Tape()
                with tape:
                    wp.launch(square, n, inputs=[x], outputs=[y])
                    wp.launch(total, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
                return x.grad.numpy(), y.grad.numpy(), loss.grad.numpy()
            """),
        # Only accumulated into: its gradient is kept. A gradient written before it is read is new.
        Example("""
            import warp as wp

            @wp.kernel
            def add_square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(y, i, x[i] * x[i])

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, z, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(add_square, n, inputs=[x], outputs=[y])
                    wp.launch(square, n, inputs=[y], outputs=[z])
                tape.backward(grads={z: wp.ones(n, dtype=float)})
                seen = y.grad.numpy()
                z.grad.fill_(1.0)
                return seen, z.grad.numpy()
            """),
        # The initial state is a leaf: the rollout stores into every state but the first.
        Example("""
            import warp as wp

            @wp.kernel
            def step(x: wp.array(dtype=float), v: wp.array(dtype=float), x_next: wp.array(dtype=float)):
                i = wp.tid()
                x_next[i] = x[i] + 0.1 * v[i]

            def rollout(states, v, loss_fn, steps):
                tape = wp.Tape()
                with tape:
                    for t in range(steps):
                        wp.launch(step, 3, inputs=[states[t], v], outputs=[states[t + 1]])
                    loss = loss_fn(states[steps])
                tape.backward(loss)
                return states[0].grad.numpy(), v.grad.numpy()
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            @wp.kernel
            def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(loss, 0, wp.sin(y[i]))

            def run(x, n):
                y = wp.zeros(n, dtype=float, requires_grad=True)
                loss = wp.zeros(1, dtype=float, requires_grad=True)
                tape = wp.Tape()
                with tape:
                    wp.launch(square, n, inputs=[x], outputs=[y])
                    wp.launch(total, n, inputs=[y], outputs=[loss])
                tape.backward(loss)
                return x.grad.numpy(), y.grad.numpy()
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def splat(points: wp.array(dtype=wp.vec2), image: wp.array(dtype=float)):
                i = wp.tid()
                image[i] = wp.exp(-wp.length_sq(points[i]))

            def image_sensitivity(points, image, photometric_loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(splat, points.shape[0], inputs=[points], outputs=[image])
                    loss = photometric_loss(image)
                tape.backward(loss)
                return wp.to_torch(image.grad)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def step(x: wp.array(dtype=float), v: wp.array(dtype=float), x_next: wp.array(dtype=float)):
                i = wp.tid()
                x_next[i] = x[i] + 0.1 * v[i]

            def rollout(states, v, loss_fn, steps):
                tape = wp.Tape()
                with tape:
                    for t in range(steps):
                        wp.launch(step, 3, inputs=[states[t], v], outputs=[states[t + 1]])
                    loss = loss_fn(states[steps])
                tape.backward(loss)
                return states[-1].grad.numpy()
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            backwards = scope.backwards()
            for backward in backwards:
                stores = _stored_on_tape(scope, backward)
                if not stores:
                    continue
                later = next((b.order for b in backwards if b.order > backward.order and b.key == backward.key),
                             None)
                elements = _elements_stored(scope, stores)
                for read in _gradient_reads_after(scope, backward, later):
                    store = stores.get(read.key) or _stored_element(read.key, elements)
                    if store is None:
                        continue
                    event, param, again = store
                    kernel = event.launch.kernel_code
                    array = read.receiver
                    fix = (f"allocate `{array}` with `retain_grad=True` to keep it" if not again else
                           f"have `{kernel}` store into an array of its own, allocated with `retain_grad=True`,"
                           f" and read that one's gradient (with `retain_grad=True` on `{array}` itself, stored more"
                           f" than once, the overwritten values' gradient would double count: WL212)")
                    since = context.where(backward.location, read.location)
                    context.report(self, read, (
                        f"`{array}.grad` is read after `backward()` ({since}),"
                        f" which zeroed it: kernel `{kernel}` ({context.where(event.location, read.location)})"
                        f" stores into `{array}` (parameter `{param}`) on that tape before anything"
                        f" recorded reads it, and the adjoint of a store zeroes the gradient it has read, so this"
                        f" reads zeros, not the loss's gradient with respect to the values `{kernel}` left in"
                        f" `{array}`; {fix}"),
                        related=[("`backward()` zeroes it here", backward.location),
                                 (f"`{kernel}` stores into `{read.receiver}` here", event.location)],
                        data={"array": read.receiver})


def _stored_on_tape(scope: HostScope, backward: HostEvent) -> dict[str, tuple[HostEvent, str, bool]]:
    """Key of each array that a launch recorded on ``backward``'s tape (since its last reset) stores a
    gradient-carrying value into, in a kernel with backward on, before anything recorded reads it
    -> (the last such launch, its parameter, whether the tape stores into it more than once);
    arrays allocated with `retain_grad=True` left out. An array read
    first (an input updated in place) is left out too: the reads' adjoints run after the store's
    and leave in its `.grad` the gradient with respect to the value it came in with."""
    stores: dict[str, tuple[HostEvent, str, bool]] = {}
    read: set[str] = set()
    for event in scope.events:
        if event.order >= backward.order:
            break
        if event.kind == "method" and event.name == "reset" and event.key == backward.key:
            stores.clear()
            read.clear()
        launch = event.launch
        if launch is None or not launch.recorded or event.region.key != backward.key:
            continue
        read.update(ref.key for ref in launch.reads())
        if not launch.differentiable:
            continue
        for ref in launch.stores():
            if ref.key and ref.key not in read and launch.writes_gradient(ref) and not _retains(scope, ref.key):
                earlier = stores.get(ref.key)
                again = earlier is not None or ref.param in (launch.kernel.stores_twice if launch.kernel else ())
                stores[ref.key] = (event, ref.param or ref.code, again)
    return stores


def _elements_stored(scope: HostScope, stores: dict[str, tuple[HostEvent, str, bool]]) -> list[tuple]:
    """The stored arrays that are elements of a list picked by a loop's counter (`states[t + 1]`):
    (the list, what follows the index, the store)."""
    elements = []
    for key, store in stores.items():
        element = ELEMENT.match(key)
        index = FROM_TARGET.match(element["index"].strip()) if element else None
        if index is None:
            continue
        targets = set().union(*(scope.loop(loop).target_keys | scope.loop(loop).targets for loop in store[0].loops))
        if index["target"] in targets:
            elements.append((element["list"], element["rest"], store))
    return elements


def _stored_element(key: str, elements: list[tuple]) -> tuple[HostEvent, str, bool] | None:
    """The store into an element of a list that ``key`` (`states[-1]`, `states[steps]`) may name: a
    counter stores `states[t + c]` up to the last index, so a negative literal or a computed index
    may be one of them; a literal index from the front (`states[0]`, the initial state, or the first
    of a segment whose counter starts later) is not taken for one, the counter's start unknown."""
    element = ELEMENT.match(key)
    if element is None:
        return None
    for name, rest, store in elements:
        if element["list"] == name and element["rest"] == rest:
            index = element["index"].strip()
            if not index.lstrip("-").isdigit() or int(index) < 0:
                return store
    return None


def _retains(scope: HostScope, key: str) -> bool:
    """Whether the array may keep its gradient: allocated with `retain_grad=True`, or made by a call
    that passes `retain_grad=` something other than `False`."""
    for event in scope.events:
        if event.kind == "assign" and event.key == key:
            if event.allocation is not None and event.allocation.retain_grad:
                return True
            code = event.value.code if event.value is not None else ""
            if RETAIN.search(code) and not RETAIN_OFF.search(code):
                return True
    return False


def _gradient_reads_after(scope: HostScope, backward: HostEvent, until: int | None) -> list[HostEvent]:
    """The `.grad` reads after ``backward`` (and before ``until``) of arrays whose gradient nothing
    wrote or recorded into in between."""
    reads = []
    renewed: set[str] = set()
    by_statement: dict[Location, list[HostEvent]] = {}
    for event in scope.events:
        by_statement.setdefault(event.statement, []).append(event)
    for event in scope.events:
        if event.order <= backward.order:
            continue
        if until is not None and event.order >= until:
            break
        if event.kind == "grad" and event.key not in renewed and \
                not _only_written(by_statement[event.statement], event):
            reads.append(event)
        if event.launch is not None and event.launch.recorded:
            renewed.update(ref.key for ref in event.launch.writes())
        renewed.update(_gradient_written(event))
    return reads


def _gradient_written(event: HostEvent) -> set[str]:
    """Keys of the arrays whose `.grad` this event writes (`y.grad = g`, `y.grad.zero_()`, `wp.copy(y.grad, g)`)."""
    written = {ref.key.removesuffix(".grad") for ref in event.writes if ref.key.endswith(".grad")}
    if event.kind == "assign" and event.name.endswith(".grad") and event.owner:
        written.add(event.owner)
    if event.kind == "method" and event.name in WRITING_METHODS and event.key.endswith(".grad"):
        written.add(event.key.removesuffix(".grad"))
    return written


def _only_written(statement: list[HostEvent], read: HostEvent) -> bool:
    """Whether the statement holding this `.grad` mention (``statement``: its events) only writes the
    gradient (`y.grad.zero_()`)."""
    code = f"{read.receiver}.grad"
    together = [e for e in statement if e is not read]
    return any((e.kind == "method" and e.receiver == code and e.name in WRITING_METHODS) or
               any(ref.code == code for ref in e.writes) for e in together) and not any(
        any(ref.code == code for ref in e.reads) for e in together)
