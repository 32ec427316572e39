from __future__ import annotations

from warp_lint.host import ArrayRef, HostEvent, HostScope, Location, TapeRegion
from warp_lint.project_context import ProjectContext
from warp_lint.replay_plan import host_confirmation_data
from warp_lint.rule import Example, Rule

TAPE_CHECKS = {"warp.autograd.gradcheck_tape"}


class TapeOverwrite(Rule):
    """An array read by a launch recorded on a tape is overwritten while the tape records.

    ## What it does
    While a tape records, flags a write to an array that an earlier recorded launch read: a
    launch whose kernel writes (or accumulates into) the parameter the array is passed to,
    `wp.copy(dest=...)`, `arr.assign(...)`, `arr.zero_()` or `arr.fill_(...)`. Also flags one
    launch that passes the same array to a parameter it reads and to one it writes, and, in a loop
    inside the recording, a write that overwrites what the previous iteration's launch read.
    The recording is followed through calls, across files: a `with tape:` block that calls
    `model.step(state_in, state_out)` records the launches `step` makes, with `step`'s parameters
    bound to the caller's arrays, and a tape kept as `self.tape` records across the methods that
    a caller runs in turn. The write is reported where it is written, with the read and the calls
    that lead there as related locations. Aliases (`q = state.q`, `a, b = b, a`) are followed; a
    rebinding (`x = wp.zeros(...)`) is a new array, and so is each access to a `@property` that
    picks an element by a counter (`return self.states[self.sim_tick]`). While a tape records, gradients are taken to be
    required: an arm that runs only without them (`else` of `if state.requires_grad:`, `if not
    requires_grad:`) is not followed. Arrays held in the fields of a `@wp.struct`
    count as arrays: a kernel reading `s.q[i]` of a struct argument `state` reads `state.q`, and a
    later kernel writing `s.q`, `state.q.zero_()` or a launch given `state.q` directly overwrites
    it. `wp.utils` reductions, scans and sorts write their output arrays. A write after the
    recording and before `backward()` is WL211's.

    ## Why is this bad?
    `tape.backward()` replays each recorded kernel's forward reads from the arrays as they are at
    backward time. Once a later launch has overwritten an array an earlier kernel read, that
    kernel's adjoint is computed from the new values: the gradient is wrong, without an error.
    A reader whose kernel uses what it read only linearly (copies it, adds it, scales it by
    something that carries no gradient: `z[i] = 3.0 * y[i]`) is not reported: its adjoint never
    reads the values again, so overwriting them changes no gradient (measured right on 1.19, also
    with the new values used on the way to the loss, and for a ping-pong `x_out[i] = 0.5 * x[i]`
    between two buffers; the same ping-pong with `x[i] * x[i]` is wrong). Nor is one that uses it
    only as a factor (`z[i] = x[i] * w[i]`) when every other factor comes from arrays allocated
    without `requires_grad`: the adjoint reads `x` only for `w`'s gradient (measured on 1.19:
    after the overwrite `x`'s gradient is right and `w`'s is wrong). Nor is a reader whose every
    gradient-carrying output is an array allocated without `requires_grad` (a diagnostic written
    beside the simulation): no gradient enters its adjoint, so what it reads is multiplied by zero
    (measured right on 1.19, and wrong for the same program with the diagnostic in the loss). One
    overwrite is reported once: a second write before anything reads the array again (`w.zero_()`,
    then a kernel that accumulates the new values into it) clobbers nothing more. This is the static twin
    of Warp's "is being written to but has already been read from in a
    previous launch" warning, which is only printed with `wp.config.verify_autograd_array_access`
    switched on before the module loads, and which `zero_()`, `fill_()`, `assign()` and arrays
    inside structs never trigger. Where the tape is then passed to `wp.autograd.gradcheck_tape`,
    the message says that check passes: it compares each recorded launch alone with finite
    differences of that launch, on the arrays as they are at check time, so an overwrite between
    launches is invisible to it.

    ## Fix safety
    No automatic fix: write into a fresh array (one buffer per step, `wp.empty_like(x)`), or move
    the write after `tape.backward()`.

    ## Warp versions
    All versions. Measured on 1.19.0 (CPU): `y = x*x; z = 2y; loss = sum z`, then a recorded
    write to `x` inside the tape block: dL/dx should be [4, 8, 12]; after `x.zero_()` it is
    [0, 0, 0], after `x.fill_(5)`, `x.assign(...)` or `wp.copy(x, ...)` it is [20, 20, 20], after a
    launch writing `x` it is [16, 256, 1296]. No warning in any case. With `x` held in a struct
    field (`y = s.q*s.q` read through the struct, then a recorded kernel storing `s.q[i] = 5`):
    [20, 20, 20], and no warning even with `verify_autograd_array_access` on. `gradcheck_tape` of
    a tape whose `y = x*x` is read by `loss = sum y*y` and then overwritten by `y = 3x` returns
    True on 1.19.0 and 1.12.1 while the tape's dL/dx is [1.08, 5.88, 14.52] against finite
    differences [0.108, 1.372, 5.324] (float64).

    ## Confirmation
    replay: `check --confirm` replays the recorded launch sequence (the kernels the tape block
    launches, in order, with synthesized arrays of the sizes the program allocates where it writes
    them as literals): confirmed when the tape's gradient disagrees with finite differences of the
    whole sequence and the same sequence with the overwrite writing a fresh buffer agrees. Where
    the sequence cannot be replayed the verdict says why; `warp-lint trace -- COMMAND` observes the
    real run (Warp's overwrite tracking and the writes it misses).
    """

    code = "WL201"
    name = "tape-overwrite"
    runtime_strategy = ("replay",)
    level = "project"

    VALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, z, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    wp.launch(square, 3, inputs=[y], outputs=[z])
                tape.backward(loss)
                x.zero_()
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, n):
                tape = wp.Tape()
                with tape:
                    y.zero_()
                    wp.launch(square, n, inputs=[x], outputs=[y])
                    x = wp.zeros_like(y)
                    x.fill_(1.0)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def step(x: wp.array(dtype=float), x_next: wp.array(dtype=float)):
                i = wp.tid()
                x_next[i] = x[i] * 0.5

            def run(states, steps, n):
                tape = wp.Tape()
                with tape:
                    for t in range(steps):
                        wp.launch(step, n, inputs=[states[t]], outputs=[states[t + 1]])
            """),
        # `scale` only scales what it read: its adjoint never needs `y` again.
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            @wp.kernel
            def scale(y: wp.array(dtype=float), z: wp.array(dtype=float)):
                i = wp.tid()
                z[i] = 3.0 * y[i]

            def run(x, w, y, z, loss, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, n, inputs=[x], outputs=[y])
                    wp.launch(scale, n, inputs=[y], outputs=[z])
                    wp.launch(square, n, inputs=[w], outputs=[y])
                tape.backward(loss)
            """),
        # Under a tape gradients are required: the `else` arm (buffers reused in place) does not run.
        Example("""
            import warp as wp

            @wp.kernel
            def solve(q: wp.array(dtype=float), delta: wp.array(dtype=float)):
                i = wp.tid()
                delta[i] = wp.sin(q[i])

            @wp.kernel
            def apply_deltas(q: wp.array(dtype=float), delta: wp.array(dtype=float), q_out: wp.array(dtype=float)):
                i = wp.tid()
                q_out[i] = q[i] + delta[i]

            class Solver:
                def apply(self, state_in, state_out, delta, n):
                    if state_in.requires_grad:
                        q = state_out.q
                        new_q = wp.empty_like(state_out.q)
                    else:
                        q = state_in.q
                        new_q = state_out.q
                    wp.launch(apply_deltas, n, inputs=[q, delta], outputs=[new_q])
                    if state_in.requires_grad:
                        state_out.q = new_q
                    return new_q

                def step(self, state_in, state_out, iterations, n):
                    delta = wp.zeros(n, dtype=float, requires_grad=True)
                    q = state_out.q
                    for _ in range(iterations):
                        wp.launch(solve, n, inputs=[q], outputs=[delta])
                        q = self.apply(state_in, state_out, delta, n)

            def run(a, b, n):
                solver = Solver()
                tape = wp.Tape()
                with tape:
                    solver.step(a, b, 4, n)
            """),
        # `t`, computed from both loops' counters, picks one state per substep.
        Example("""
            import warp as wp

            @wp.kernel
            def contact_force(q: wp.array(dtype=float), f: wp.array(dtype=float)):
                i = wp.tid()
                wp.atomic_add(f, i, q[i] * q[i])

            @wp.kernel
            def integrate(q: wp.array(dtype=float), f: wp.array(dtype=float), q_out: wp.array(dtype=float)):
                i = wp.tid()
                q_out[i] = q[i] + f[i] * f[i] * 0.01

            class State:
                def __init__(self, n):
                    self.q = wp.zeros(n, dtype=float, requires_grad=True)
                    self.f = wp.zeros(n, dtype=float, requires_grad=True)

            class Example:
                def __init__(self, n, steps, substeps):
                    self.n = n
                    self.sim_steps = steps
                    self.sim_substeps = substeps
                    self.states = [State(n) for _ in range(steps * substeps + 1)]
                    self.loss = wp.zeros(1, dtype=float, requires_grad=True)

                def forward_backward(self):
                    self.tape = wp.Tape()
                    with self.tape:
                        for sim_step in range(self.sim_steps):
                            self.simulate(sim_step)
                    self.tape.backward(self.loss)

                def simulate(self, sim_step):
                    for i in range(self.sim_substeps):
                        t = sim_step * self.sim_substeps + i
                        self.step(self.states[t], self.states[t + 1])

                def step(self, state_in, state_out):
                    wp.launch(contact_force, self.n, inputs=[state_in.q], outputs=[state_in.f])
                    wp.launch(integrate, self.n, inputs=[state_in.q, state_in.f], outputs=[state_out.q])
            """),
        # Code switched off with `if False:` never runs.
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, z, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    if False:
                        wp.launch(square, 3, inputs=[z], outputs=[x])
                    wp.launch(square, 3, inputs=[y], outputs=[loss])
                tape.backward(loss)
            """),
        # A property that picks the state by a counter (`states[sim_tick]`) may give another array each time.
        Example("""
            import warp as wp

            @wp.kernel
            def forces(q: wp.array(dtype=float), f: wp.array(dtype=float)):
                i = wp.tid()
                f[i] = wp.sin(q[i])

            @wp.kernel
            def integrate(q: wp.array(dtype=float), f: wp.array(dtype=float), q_out: wp.array(dtype=float)):
                i = wp.tid()
                q_out[i] = q[i] + f[i] * f[i]

            class State:
                def __init__(self, n):
                    self.q = wp.zeros(n, dtype=float, requires_grad=True)
                    self.f = wp.zeros(n, dtype=float, requires_grad=True)

            class Drone:
                def __init__(self, n, ticks):
                    self.n = n
                    self.sim_tick = 0
                    self.requires_grad = True
                    self.states = [State(n) for _ in range(ticks + 1)]

                @property
                def state(self):
                    return self.states[self.sim_tick if self.requires_grad else 0]

                @property
                def next_state(self):
                    return self.states[self.sim_tick + 1 if self.requires_grad else 1]

            class Example:
                def __init__(self):
                    self.drone = Drone(4, 8)
                    self.loss = wp.zeros(1, dtype=float, requires_grad=True)

                def update(self, drone: Drone):
                    wp.launch(forces, drone.n, inputs=[drone.state.q], outputs=[drone.state.f])
                    wp.launch(integrate, drone.n, inputs=[drone.state.q, drone.state.f], outputs=[drone.next_state.q])
                    drone.sim_tick += 1

                def forward_backward(self):
                    self.tape = wp.Tape()
                    with self.tape:
                        for _ in range(8):
                            self.update(self.drone)
                    self.tape.backward(self.loss)
            """),
        # `claim` has its backward disabled: `backward()` never replays it.
        Example("""
            import warp as wp

            @wp.struct
            class Contacts:
                pos: wp.array(dtype=float)

            @wp.kernel(enable_backward=False)
            def claim(data: Contacts, owner: wp.array(dtype=int)):
                i = wp.tid()
                if data.pos[i] * data.pos[i] < 1.0:
                    owner[i] = i

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(data, owner, x, loss, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(claim, n, inputs=[data], outputs=[owner])
                    wp.launch(square, n, inputs=[x], outputs=[data.pos])
                    wp.launch(square, n, inputs=[data.pos], outputs=[loss])
                tape.backward(loss)
            """),
        # One buffer per step, picked by the step index the caller passes in.
        Example("""
            import warp as wp

            @wp.kernel
            def center(q: wp.array(dtype=wp.vec3), com: wp.array(dtype=wp.vec3)):
                i = wp.tid()
                wp.atomic_add(com, 0, q[i] * 0.1)

            @wp.kernel
            def loss_of(com: wp.array(dtype=wp.vec3), loss: wp.array(dtype=float)):
                wp.atomic_add(loss, 0, wp.length_sq(com[0]))

            class Example:
                def __init__(self, steps):
                    self.coms = [wp.zeros(1, dtype=wp.vec3, requires_grad=True) for _ in range(steps)]
                    self.q = wp.zeros(10, dtype=wp.vec3, requires_grad=True)
                    self.loss = wp.zeros(1, dtype=float, requires_grad=True)
                    self.steps = steps

                def forward_backward(self):
                    self.tape = wp.Tape()
                    with self.tape:
                        for step in range(self.steps):
                            self.forward(step)
                    self.tape.backward(self.loss)

                def forward(self, frame):
                    wp.launch(center, 10, inputs=[self.q], outputs=[self.coms[frame]])
                    wp.launch(loss_of, 1, inputs=[self.coms[frame], self.loss])
            """),
    ]
    INVALID = [
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(x, y, loss):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, 3, inputs=[x], outputs=[y])
                    x.zero_()
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = x[i] * x[i]

            def run(state, y, n):
                tape = wp.Tape()
                with tape:
                    q = state.q
                    wp.launch(kernel=square, dim=n, inputs=[q], outputs=[y])
                    wp.launch(square, n, [y], [state.q])
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def advance(x: wp.array(dtype=float), x_out: wp.array(dtype=float)):
                i = wp.tid()
                x_out[i] = x[i] * 0.5

            def run(x, steps, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(advance, n, inputs=[x], outputs=[x])
            """),
        Example("""
            import warp as wp

            @wp.struct
            class State:
                q: wp.array(dtype=float)

            @wp.kernel
            def square(s: State, y: wp.array(dtype=float)):
                i = wp.tid()
                y[i] = s.q[i] * s.q[i]

            def run(state, y, loss, n):
                tape = wp.Tape()
                with tape:
                    wp.launch(square, n, inputs=[state], outputs=[y])
                    state.q.fill_(5.0)
                tape.backward(loss)
            """),
        Example("""
            import warp as wp

            @wp.kernel
            def advance(x: wp.array(dtype=float), x_out: wp.array(dtype=float)):
                i = wp.tid()
                x_out[i] = wp.sin(x[i])

            def run(x, v, steps, n):
                tape = wp.Tape()
                with tape:
                    for _ in range(steps):
                        wp.launch(advance, n, inputs=[v], outputs=[x])
                        wp.launch(advance, n, inputs=[x], outputs=[v])
            """),
    ]

    def check(self, context: ProjectContext) -> None:
        for scope in context.host_scopes:
            if not scope.regions:
                continue
            reported: set[tuple[object, str]] = set()
            for region in scope.regions:
                self._check_window(context, scope, region, reported)
                self._check_loops(context, scope, region, reported)

    def _check_window(self, context, scope: HostScope, region: TapeRegion, reported) -> None:
        # every read so far: one in another arm of an `if` than the write does not run with it
        reads: dict[str, list[tuple[HostEvent, ArrayRef]]] = {}
        for event in scope.events_in(region):
            for write in event.writes:
                read = next((r for r in reads.get(write.key, ()) if not r[0].exclusive_with(event)), None)
                if read is not None:
                    self._report(context, scope, event, write, read, region, reported, "")
                    # What the read saw is gone: a later write before the next read clobbers
                    # nothing more (`x.zero_()` then a kernel accumulating into `x` is one overwrite).
                    reads[write.key] = [r for r in reads[write.key] if r[0].exclusive_with(event)]
            launch = event.launch
            if launch is None or not launch.recorded or not region.same_tape(event.region):
                continue
            written = {w.key: w for w in event.writes}
            for read in event.reads:
                if read.key in written and written[read.key].param != read.param:
                    self._report(context, scope, event, written[read.key], (event, read), region, reported, "same")
                if launch.needs_value(read, scope.without_gradient):
                    reads.setdefault(read.key, []).append((event, read))

    def _check_loops(self, context, scope: HostScope, region: TapeRegion, reported) -> None:
        """In a loop inside the region, a write early in the body follows the previous iteration's read."""
        for span in scope.loops.values():
            if not (region.start_order <= span.start_order and span.end_order <= region.end_order):
                continue
            events = list(scope.events_between(span.start_order, span.end_order))
            for position, event in enumerate(events):
                for write in event.writes:
                    if scope.per_iteration(write, span):
                        continue
                    if any(write.key in {w.key for w in earlier.writes} and not earlier.exclusive_with(event)
                           for earlier in events[:position]):
                        continue  # an earlier write in the pass already overwrote what was read
                    for later in events[position:]:
                        launch = later.launch
                        if launch is None or not launch.recorded or later.exclusive_with(event):
                            continue
                        read = next((r for r in later.reads
                                     if r.key == write.key and launch.needs_value(r, scope.without_gradient)), None)
                        if read is not None:
                            self._report(context, scope, event, write, (later, read), region, reported, "loop",
                                         loop=span.location)
                            break

    def _report(self, context, scope: HostScope, event: HostEvent, write: ArrayRef,
                read: tuple[HostEvent, ArrayRef], region: TapeRegion, reported, how: str,
                loop: Location | None = None) -> None:
        marker = (event.location, write.key)
        if marker in reported:
            return
        reported.add(marker)
        reader, read_ref = read
        reader_kernel = _kernel_named(reader.launch) if reader.launch else "`?`"
        where = context.where(reader.location, event.location)
        call = _call_into(reader, event)
        if call is not None:  # the read is in a helper the writer's code calls: name that call too
            where += f", called through `{call.callee}` at {context.where(call.location, event.location)}"
        writer = _describe_writer(event, write)
        tape = f"`{region.tape}`" if region.tape else "the tape"
        when = f"while {tape} is recording"
        if how == "same":
            what = (f"`{write.code}` is passed to {reader_kernel} both as `{read_ref.param}`, which it reads, and as"
                    f" `{write.param}`, which it writes")
        elif how == "loop":
            # The loop may be a caller's (`for t in range(steps): solver.step(...)`): say where it is.
            which = ("this loop" if loop is None or loop.path == event.location.path and loop.line <= event.location.line
                     else f"the loop at {context.where(loop, event.location)}")
            what = (f"{writer} overwrites `{write.code}`, which kernel {reader_kernel} ({where}) read in the"
                    f" previous iteration of {which}")
        else:
            what = f"{writer} overwrites `{write.code}` after kernel {reader_kernel} read it on {where}"
        message = (f"{what} {when}: `backward()` replays {reader_kernel} with the overwritten values, and its"
                   f" gradients are wrong wherever they differ from those it read, without an error; write into a"
                   f" separate array (one buffer per step) or move the write after `backward()`")
        data = {}
        writer_kernel = event.launch.kernel if event.launch is not None else None
        if writer_kernel is not None:
            data = dict(writer_kernel.runtime)  # Warp's tracker names the writing kernel
        data.update({"array": write.code, "reader": reader.launch.kernel_code if reader.launch else "?", "read_line": reader.location.line,
                     "read_path": reader.location.path, "host": True})
        data.update(host_confirmation_data(context, scope, region, event, write.key))
        related = [(f"{reader_kernel} reads `{read_ref.code}` here", reader.location)] if how != "same" else []
        check = _tape_check(scope, region)
        if check is not None:
            message += (f"; `gradcheck_tape` ({context.where(check.location, event.location)}) does not catch it: it"
                        f" checks each recorded launch alone, against finite differences of that launch, and passes")
            related.append(("`gradcheck_tape` passes this tape here", check.location))
        context.report(self, event, message, data=data, related=related)


def _tape_check(scope: HostScope, region: TapeRegion) -> HostEvent | None:
    """A `gradcheck_tape` of the region's tape after the region."""
    if not region.key:
        return None
    return next((e for e in scope.events if e.order > region.end_order and e.kind == "call" and
                 e.name in TAPE_CHECKS and any(ref.key == region.key for ref in e.arguments)), None)


def _call_into(reader: HostEvent, writer: HostEvent):
    """The call, in the code the writer and the reader share, that leads to the reader: the first
    step of the reader's path from the entry point that the writer's path does not take."""
    shared = 0
    for own, other in zip(reader.chain, writer.chain):
        if own != other:
            break
        shared += 1
    return reader.chain[shared] if len(reader.chain) > shared else None


def _kernel_named(launch) -> str:
    """The launch's kernel as written, and the kernel it is where that differs: `reader` (`sine_into`)."""
    code = launch.kernel_code
    name = launch.kernel.name if launch.kernel is not None else None
    return f"`{code}` (`{name}`)" if name and name != code.rsplit(".", 1)[-1] else f"`{code}`"


def _describe_writer(event: HostEvent, write: ArrayRef) -> str:
    if event.launch is not None:
        param = f" (parameter `{write.param}`)" if write.param else ""
        return f"kernel {_kernel_named(event.launch)}{param}"
    if event.kind == "method":
        return f"`{event.receiver}.{event.name}()`"
    return f"`{event.name.replace('warp.', 'wp.')}()`"

