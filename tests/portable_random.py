"""Normal draws that give the same bits on every CPU, for the weights of the tests' tiny models.

torch's `normal_` on CPU fills float tensors of 16 or more elements with a vectorised Box-Muller
whose log and cos come from the ATen kernel chosen for the CPU (AVX-512, AVX2 or the scalar
`default`, `ATEN_CPU_CAPABILITY`): the same seed gives weights a few ulps apart on another
machine. The gold runs record each model's embedding fingerprint (a SHA-256 of its bits), so a
tiny model must come out bit for bit the same everywhere.

`install()` (tests/conftest.py calls it once) routes `Tensor.normal_` and `torch.randn` on CPU
float tensors through NumPy's `Generator.standard_normal`: integer arithmetic and table lookups
(ziggurat), no SIMD-dependent rounding. The seed of each draw is taken from torch's own stream
(`torch.randint`, a serial integer kernel), so `torch.manual_seed` and `torch.Generator` still
decide what a test gets, as before.
"""
from __future__ import annotations

import numpy as np
import torch

_ORIGINAL = {}


def _seed(generator: torch.Generator | None) -> int:
    return int(torch.randint(0, 2**62, (), generator=generator))


def _normal_(self: torch.Tensor, mean: float = 0.0, std: float = 1.0, *, generator=None):
    if self.device.type != "cpu" or not self.is_floating_point() or self.numel() == 0:
        return _ORIGINAL["normal_"](self, mean, std, generator=generator)
    draw = np.random.default_rng(_seed(generator)).standard_normal(tuple(self.shape))   # float64
    with torch.no_grad():
        self.copy_(torch.from_numpy(draw * std + mean))                                 # rounded once
    return self


def _randn(*size, generator=None, dtype=None, device=None, requires_grad=False, **kwargs):
    if kwargs or (device is not None and torch.device(device).type != "cpu"):
        return _ORIGINAL["randn"](*size, generator=generator, dtype=dtype, device=device,
                                  requires_grad=requires_grad, **kwargs)
    shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else size
    out = _normal_(torch.empty(shape, dtype=dtype), generator=generator)
    return out.requires_grad_(requires_grad)


def install() -> None:
    """Route CPU normal draws through NumPy for the rest of the process (idempotent)."""
    if _ORIGINAL:
        return
    _ORIGINAL.update(normal_=torch.Tensor.normal_, randn=torch.randn)
    torch.Tensor.normal_ = _normal_
    torch.randn = _randn
