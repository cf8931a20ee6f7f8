"""Kernels: unit integral, compact support 2h, F = (dW/dr)/r; Tait EOS and its inverse."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.sph import reference
from nagare.engine.sph.kernels import KERNELS


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("dim", [2, 3])
def test_kernel_integrates_to_one(name, dim):
    w, _ = KERNELS[name]
    h = 0.3
    r = np.linspace(0.0, 2 * h, 200001)
    shell = 2 * np.pi * r if dim == 2 else 4 * np.pi * r * r
    np.testing.assert_allclose(np.trapezoid(w(np, r, h, dim) * shell, r), 1.0, rtol=1e-7)
    np.testing.assert_allclose(w(np, np.array([2 * h, 2.5 * h]), h, dim), 0.0, atol=1e-15)


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("dim", [2, 3])
def test_kernel_gradient_factor(name, dim):
    w, f = KERNELS[name]
    h, eps = 0.3, 1e-6
    r = np.linspace(0.01, 1.99, 50) * h
    dwdr = (w(np, r + eps, h, dim) - w(np, r - eps, h, dim)) / (2 * eps)
    np.testing.assert_allclose(f(np, r, h, dim) * r, dwdr, rtol=1e-6, atol=1e-9 * np.abs(dwdr).max())


def test_tait_eos_and_hydrostatic_inverse():
    k = reference.Constants(dim=2, h=0.01, rho0=1000.0, gamma=7.0, c0=30.0, alpha=0.1, delta=0.1,
                            gravity=9.81, mass=1.0, kernel="wendland")
    np.testing.assert_allclose(k.B, 30.0 ** 2 * 1000.0 / 7.0)
    np.testing.assert_allclose(reference.pressure(np, np.array([1000.0]), k), [0.0], atol=1e-9)
    depth = np.array([0.0, 0.1, 0.5, 1.0])
    rho = reference.hydrostatic_density(np, depth, k)
    np.testing.assert_allclose(reference.pressure(np, rho, k), 1000.0 * 9.81 * depth, rtol=1e-10, atol=1e-8)
