"""The Warp devices runtime tests run on: ``cpu`` always, ``cuda:0`` when Warp sees a CUDA device.

Importable by any test module (``from warp_devices import DEVICES``): ``tests/`` is on ``sys.path``
because it holds the root ``conftest.py``. Warp is initialised once, with the per-run kernel cache
``tests/conftest.py`` set up.
"""

from __future__ import annotations


def available_devices() -> list[str]:
    try:
        import warp as wp
    except ImportError:
        return ["cpu"]
    wp.config.quiet = True
    wp.init()
    return ["cpu"] + (["cuda:0"] if wp.get_cuda_device_count() > 0 else [])


DEVICES = available_devices()
