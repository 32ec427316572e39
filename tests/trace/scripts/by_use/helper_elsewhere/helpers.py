"""A helper with a component overwrite (WL103); the kernel that calls it is in sim.py."""

import warp as wp


@wp.func
def stretched(v: wp.vec3):
    w = v
    w[0] = 2.0 * w[0]
    return wp.dot(w, w)
