"""Host hazards the static rules cannot see (helpers called through a dict), and one they can (WL204)."""

import warp as wp

# No module-load lines: their timings differ from run to run (and with overwrite tracking on, Warp
# builds a differently hashed module: a plain run says "(cached)" where the traced one says "(compiled)").
wp.config.log_level = wp.LOG_WARNING


@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


@wp.kernel
def total(y: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i])


def clear(a):
    a.zero_()  # runtime-only WR201: the write hides in a helper only the run finds


def backward_of(tape, loss):
    tape.backward(loss)  # runtime-only WR204 when called twice


# Called by name at run time: no static analysis follows a call through a dict lookup.
HANDLERS = {"clear": clear, "backward": backward_of}


def record(x):
    y = wp.zeros(3, dtype=float, requires_grad=True)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(square, 3, inputs=[x], outputs=[y])
        wp.launch(total, 3, inputs=[y], outputs=[loss])
    return tape, loss


def main():
    x = wp.array([1.0, 2.0, 3.0], dtype=float, requires_grad=True)
    tape, loss = record(x)
    tape.backward(loss)
    tape.backward(loss)  # WL204: a second backward without zeroing
    print("accumulated", x.grad.numpy().tolist())

    x2 = wp.array([1.0, 2.0, 3.0], dtype=float, requires_grad=True)
    tape2, loss2 = record(x2)
    HANDLERS["backward"](tape2, loss2)
    HANDLERS["backward"](tape2, loss2)
    print("helper", x2.grad.numpy().tolist())

    x3 = wp.array([1.0, 2.0, 3.0], dtype=float, requires_grad=True)
    tape3, loss3 = record(x3)
    HANDLERS["clear"](x3)
    tape3.backward(loss3)
    print("cleared", x3.grad.numpy().tolist())


if __name__ == "__main__":
    main()
