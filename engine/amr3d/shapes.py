"""The two shapes of an amr3d problem behind one interface. The engine (engine.py) holds the
preset's build (builder.py: bodies, forest, boundaries, tracers), picks the shape that fits the
preset, and asks it for everything that depends on how the state is stored and stepped.

- :class:`~.box.Box`: one level of periodic leaves (P0's benchmark), where every rung of the
  ladder runs on the storage it reads (leaves, mother leaves, apart, the uniform lattice);
- :class:`~.tree_shape.Tree`: refined regions or walls, run by the reference (reference.py) or the
  ladder on each level joined by the coupling kernels (tree_stepper.py), and regridded when the
  preset adapts (regridding.py).

Both hold the state as f[27, leaf, m, m, m] in the forest's leaf order at the interface
(:meth:`Shape.leaves`, :meth:`Shape.set_leaves`): checkpoints, fields and switching see one state.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from .sampled import MOMENTS


class Shape(ABC):
    """How one shape stores, selects, steps and shows the state of the engine ``e`` (its context:
    the preset, backend, build and physics, engine.AMR3D._allocate)."""

    takes_tracers: ClassVar[bool] = False  # the preset's tracers ride on this shape

    @staticmethod
    @abstractmethod
    def fits(preset) -> bool:
        """Whether this shape runs ``preset`` (the engine asks the box; every other preset is a tree)."""

    def __init__(self, e):
        self.e = e
        self.xp, self.m, self.dtype = e.xp, e.m, e.dtype

    @staticmethod
    @abstractmethod
    def extra_bytes(p, backend, leaves: int) -> int:
        """Memory this shape adds to builder.estimated_bytes for ``leaves`` leaves of preset ``p``."""

    # ---- the state --------------------------------------------------------------------------
    @abstractmethod
    def initialise(self) -> None:
        """The preset's initial state (cases.py)."""

    @abstractmethod
    def random_state(self, rng: np.random.Generator) -> None:
        """A random, physically valid state (the registry's equivalence tests)."""

    @abstractmethod
    def leaves(self):
        """f in the canonical leaf storage (a view when already there)."""

    @abstractmethod
    def set_leaves(self, leaves) -> None:
        """Take ``leaves`` (the canonical leaf storage) as the state."""

    def state_arrays(self) -> dict:
        return {"f": self.leaves()}

    def check_restorable(self, arrays: dict, expected: dict) -> None:  # noqa: B027 (a tree's tree arrays)
        """Adjust ``expected`` ({name: (shape, dtype)}) to what ``arrays`` may hold, or refuse them."""

    def load(self, arrays: dict) -> None:
        self.set_leaves(arrays["f"])

    # ---- variants and stepping ----------------------------------------------------------------
    @abstractmethod
    def select(self, selection: dict) -> None:
        """Build the stepper of ``selection`` (the state carried over)."""

    @abstractmethod
    def advance(self, n: int) -> None:
        """n engine steps (each of Δt = engine.dt)."""

    @abstractmethod
    def kernel_specs(self, selection: dict) -> list:
        """The CUDA compilations a (non-reference) selection launches."""

    # ---- outputs ----------------------------------------------------------------------------
    @abstractmethod
    def macroscopic(self, names=MOMENTS):
        """The moments ``names`` (default ρ, ux, uy, uz) on the display lattice."""

    def speed(self):
        """|u| on the display lattice (the speed field), as sqrt(ux·ux + uy·uy + uz·uz)."""
        ux, uy, uz = self.macroscopic(("ux", "uy", "uz"))
        return self.xp.sqrt(ux * ux + uy * uy + uz * uz)

    @abstractmethod
    def sample_kw(self) -> dict:
        """The Grid3D keywords of the display lattice: its spacing (level-0 units) and placement."""

    @abstractmethod
    def mass(self, rho):
        """The total mass (a device scalar); ``rho`` is the display lattice's density."""

    @abstractmethod
    def min_population(self):
        """The smallest population of the state (a device scalar), without assembling the leaves."""

    def body_force(self):
        """Momentum-exchange force (3,) on all bodies, level-0 lattice units (device array)."""
        return self.xp.zeros(3, np.float64)

    # ---- throughput -------------------------------------------------------------------------
    @abstractmethod
    def updates_per_step(self) -> float:
        """Stored points updated per engine step (P0 counts every stored point)."""

    def population_bytes(self) -> int:
        """Bytes a stored population takes."""
        return self.dtype.itemsize

    @abstractmethod
    def timing_figures(self) -> dict:
        """This shape's part of engine.timing_extra."""

