"""D2Q9 lattice Boltzmann engine (paper P1): the reference array step and the CUDA variants.

:class:`LBM2D` composes the family's parts, each in its own module:

- ``launch.py``: launch shapes and NVRTC options of the single-step kernels, their KernelSpec;
- ``storage.py``: the stored state of a selection (fp16 shift, AA layouts) ⇄ the canonical state;
- ``steppers.py``: one stepper per kernel kind (reference, two-kernel, fused, temporal blocking),
  chosen once per selection;
- ``outputs.py``: moments and the named fields, one at a time;
- ``cases.py``: the bench description; ``variants.py``: the variant axes.
"""
from __future__ import annotations

import math

import numpy as np

from .. import registry
from ..contract import Engine
from . import cases, d2q9, outputs, reference, variants
from .config import LBM2DPreset
from .d2q9 import Q, W
from .launch import node_classes, segment_classes
from .steppers import stepper_class
from .storage import LatticeState, Storage
from .tracers import Tracers

FAMILY = variants.FAMILY
variants.register()


def fp16_representable(f: np.ndarray) -> np.ndarray:
    """f rounded so that f − w_i is exactly an fp16 number (what fp16 storage holds)."""
    w = W.reshape(Q, 1, 1)
    d = (f - w).astype(np.float16)
    return d.astype(np.float32).astype(np.float64) + w.astype(np.float32).astype(np.float64)


LATTICE_SOUND_SPEED = 1.0 / math.sqrt(3.0)
MAX_DENSITY = 10.0  # sanity bound, ten times the rest density (sanity_bounds)


class LBM2D(Engine):
    time_units = "lattice steps"
    family = FAMILY
    Preset = LBM2DPreset
    equivalence_steps = 64
    # lattice units: every step advances Δt = 1, so time = step count (and a checkpoint's meta.time
    # must be meta.step: Engine.check_consistent)
    constant_dt = True
    dt = 1.0

    def estimated_bytes(self):
        """Peak memory: the two lattices, the initial equilibrium and its encoded copies (up to two
        more lattices; with AA streaming the canonical state, its cast, its encoding, the fixed-node
        copy and the layout-P gather live at once: six), fp64 moments and masks (~64 B per node),
        and the tracers (positions, ages, their sources and velocities while they move). The array
        step (kernel "reference", NumPy or CuPy) holds its moments, equilibria and streamed copies
        besides: seven lattices at its peak (measured: 6.2–7.2 with tracemalloc, fp32 and fp64).
        Checked against free memory before anything is allocated."""
        p = self.preset
        nodes = p.shape[0] * p.shape[1]
        lattice = Q * np.dtype(p.physics.dtype).itemsize * nodes
        lattices = 6 if self.selection.get("streaming") == "aa" else 4
        if self.selection.get("kernel") == "reference":
            lattices = 7
        # On the GPU the memory pool also keeps what a frame and a checkpoint allocate: the fields
        # (five fp32/fp64 arrays and their temporaries) and the fp64 canonical state of a checkpoint
        # (72 B a node); measured: 70–128 B a node above the lattices (docs/decisions.md D12).
        outputs = 160 * nodes if self.backend.is_gpu else 0
        return lattices * lattice + 64 * nodes + 96 * p.tracers.count + outputs

    # ---- state ---------------------------------------------------------------------------
    def _allocate(self):
        p, xp = self.preset, self.xp
        self.dtype = np.dtype(p.physics.dtype)
        self.mask_host = reference.build_mask(p)
        self.mask = xp.asarray(self.mask_host)
        self.node_class = node_classes(xp, self.mask)
        self.node_segment = segment_classes(xp, self.node_class)
        self.lat = reference.build_lattice(xp, self.mask_host, p.tau, p.physics.force, p.wall_velocity, self.dtype,
                                           p.physics.collision, p.physics.inlet_velocity)
        self.solid = xp.asarray((self.mask_host == d2q9.SOLID) | (self.mask_host == d2q9.MOVING_WALL))
        self.tracers = Tracers(xp, p.tracers, p.shape, self.solid) if p.tracers.count else None
        if self.tracers is not None:
            self.tracers.bind_lattice(self.mask, self.lat.force, self.dtype)
        # The stepper is built by _apply_selection; the state is stored as the selection says.
        self.stepper = None
        self.storage = self._storage(self.selection)
        self.state = LatticeState(xp.zeros((Q, *p.shape), dtype=self.dtype))  # canonical until _initialise

    @property
    def f(self):
        """The stored lattice (storage.py says how it relates to the canonical state)."""
        return self.state.f

    def _storage(self, selection: dict) -> Storage:
        return Storage.of(selection, self.xp, self.dtype, self.mask_host)

    def _canonical_in(self, f_host_or_dev) -> None:
        self.state = self.storage.load(f_host_or_dev)
        if self.stepper is not None:
            self.stepper.reset()

    def canonical_state(self):
        """The canonical state f[i, y, x] (the preset's dtype) of the stored lattice."""
        return self.storage.canonical(self.state)

    def _initialise(self):
        """Equilibrium of the initial flow, computed on the backend (8192² in fp64 is 5 GB)."""
        p, xp = self.preset, self.xp
        ny, nx = p.shape
        y, x = (v.astype(xp.float64) for v in xp.ogrid[0:ny, 0:nx])  # open grids: broadcast, not 2 full arrays
        ux = xp.zeros((ny, nx))
        uy = xp.zeros((ny, nx))
        rho = xp.ones((ny, nx))
        u0 = p.initial.u0
        if p.initial.kind == "uniform":
            ux[:] = u0
        elif p.initial.kind == "taylor-green":
            kx, ky = 2 * np.pi / nx, 2 * np.pi / ny
            ux = -u0 * xp.cos(kx * x) * xp.sin(ky * y)
            uy = u0 * (kx / ky) * xp.sin(kx * x) * xp.cos(ky * y)
            # The vortex's pressure field, p = cs²ρ: ρ = 1 − ¾u0²(cos 2kx·x + (kx/ky)² cos 2ky·y)
            rho = 1 - 0.75 * u0 ** 2 * (xp.cos(2 * kx * x) + (kx / ky) ** 2 * xp.cos(2 * ky * y))
        if p.open_boundaries:
            ux[:] = p.physics.inlet_velocity
        if p.initial.kick and p.obstacle.kind != "none":
            # A smooth one-sided transverse push in the near wake breaks the symmetry that
            # otherwise delays shedding by ~10⁴ steps.
            size = p.characteristic_length()
            cx, cy = p.obstacle.center[0] * nx, p.obstacle.center[1] * ny
            uy += p.initial.kick * u0 * xp.exp(-((x - cx - 1.5 * size) / size) ** 2 - ((y - cy) / (0.6 * size)) ** 2)
        del x, y
        wall = xp.asarray((self.mask_host == d2q9.SOLID) | (self.mask_host == d2q9.MOVING_WALL))
        ux = xp.where(wall, 0.0, ux)
        uy = xp.where(wall, 0.0, uy)
        # Direction by direction into the state's dtype (the same values as stacking the fp64
        # equilibrium and casting it, without nine fp64 planes and their stacked copy).
        feq = xp.empty((Q, ny, nx), dtype=self.dtype)
        usq = ux * ux + uy * uy
        for i in range(Q):
            feq[i] = reference.equilibrium_i(i, rho, ux, uy, usq)
        del rho, ux, uy, usq
        self._canonical_in(feq)

    def random_state(self, rng: np.random.Generator):
        """Smooth random flow near rest plus non-equilibrium noise: positive, physically valid.

        Values are rounded so that f − w_i is an fp16 number: then every storage (fp16 included)
        holds exactly the same start state, and the equivalence test compares dynamics only.
        """
        ny, nx = self.preset.shape

        def smooth(scale):
            a = rng.standard_normal((ny, nx))
            k = np.fft.fftfreq(ny)[:, None] ** 2 + np.fft.fftfreq(nx)[None, :] ** 2
            a = np.real(np.fft.ifft2(np.fft.fft2(a) * np.exp(-k * 400)))
            return scale * a / (np.abs(a).max() + 1e-300)

        rho = 1.0 + smooth(0.01)
        ux, uy = smooth(0.04), smooth(0.04)
        f = reference.equilibrium(np, rho, ux, uy)
        f *= 1.0 + 0.01 * rng.standard_normal(f.shape)
        self._load_state_arrays({"f": fp16_representable(f)})

    def state_arrays(self):
        # the stored lattice itself where it is canonical: a checkpoint copies it anyway, and a
        # 2048² lattice is 150 MB that need not be allocated for each of the app's checkpoints
        out = {"f": self.storage.canonical(self.state, copy=False)}
        if self.tracers is not None:
            out["tracer_pos"] = self.tracers.pos
            out["tracer_age"] = self.tracers.age
            # everything else that decides the tracers' future: the ring's cursor, the release count
            # (the golden-ratio sequence) and the steps since the last tracer substep
            # — [cursor, released, clock], built on the backend: reading the ring to the host would
            # wait for the device (engine/pending_checkpoint.py takes checkpoints without waiting)
            ring = self.xp.empty(3, dtype=self.xp.int64)
            ring[:2] = self.tracers.ring[self.tracers.slot]
            ring[2] = self.tracers.clock
            out["tracer_ring"] = ring
        return out

    def _load_state_arrays(self, arrays):
        self._canonical_in(np.asarray(arrays["f"], dtype=np.float64))
        if self.tracers is not None and "tracer_pos" in arrays:
            self.tracers.pos[...] = self.xp.asarray(arrays["tracer_pos"].astype(np.float32))
            self.tracers.age[...] = self.xp.asarray(arrays["tracer_age"].astype(np.float32))
            if "tracer_ring" in arrays:  # (checkpoints before it existed resume with a fresh ring)
                cursor, released, clock = (int(v) for v in np.asarray(arrays["tracer_ring"]).reshape(3))
                if not (0 <= cursor < max(self.tracers.n, 1) and released >= 0
                        and 0 <= clock < self.preset.tracers.every):
                    raise ValueError(f"tracer_ring {[cursor, released, clock]} is out of range for this preset")
                self.tracers.cursor, self.tracers.released, self.tracers.clock = cursor, released, clock

    # ---- variants ---------------------------------------------------------------------------
    def _apply_selection(self, old, new):
        """Decode the state with the old selection's storage, store it as the new one says, then
        build the new selection's stepper."""
        if old:  # keep the physical state across the switch
            canonical = self._storage(old).canonical(self.state)
            self.storage = self._storage(new)
            self._canonical_in(canonical)
            del canonical
        self.stepper = None
        self.stepper = stepper_class(new)(self, new)

    def compute_capability(self) -> float | None:
        """The GPU's compute capability (None on NumPy): the fused kernels' launch depends on it."""
        cc = self.backend.device_info().compute_capability if self.backend.is_gpu else None
        return float(cc) if cc else None

    def kernel_specs(self, selection: dict | None = None):
        """The CUDA modules ``selection`` (default: the current one) compiles on this engine's GPU."""
        sel = dict(self.selection if selection is None else selection)
        axes = registry.axes(self.family)
        if not self.backend.is_gpu or any(registry.unavailable_reason(axes[a].choices[c], self.backend.name, sel,
                                                                      self.preset) for a, c in sel.items()):
            return []  # nothing to compile here, or a selection that cannot run
        cls, cc = stepper_class(sel), self.compute_capability()
        return cls.all_kernel_specs(self.preset, sel, cc)

    # ---- stepping ---------------------------------------------------------------------------
    def _advance(self, n):
        if self.tracers is None or self.stepper.tracer_steps:
            # No tracers, or a CUDA stepper that calls tracers.after_step after each of its steps
            # (inside its CUDA graph): one tracer kernel every tracers.every steps, no lattice pass.
            with self.timer.phase("lbm", steps=n):
                self.stepper.advance(self.state, n, self.tracers)
            return float(n)
        # Tracers move every `tracers.every` steps with the velocity of the step that ends each of
        # their substeps, so the batch is cut at those steps: step(N) equals N × step(1) bit for
        # bit, tracers included, whatever the frame rate asks for.
        tr = self.tracers
        done = 0
        while done < n:
            k = min(n - done, tr.every - tr.clock)
            with self.timer.phase("lbm", steps=k):
                self.stepper.advance(self.state, k)
            done += k
            tr.clock += k
            if tr.clock == tr.every:
                tr.clock = 0
                _, ux, uy = outputs.moments(self, with_rho=False)
                tr.advance(ux, uy, float(tr.every))
        return float(n)

    # ---- outputs ----------------------------------------------------------------------------
    def macroscopic(self):
        """ρ, ux, uy (ny × nx) of the current state (one fused pass on CUDA, see outputs.moments)."""
        return outputs.moments(self)

    def _macroscopic_arrays(self):
        """ρ, ux, uy as array code (the reference of the fused pass)."""
        return outputs.macroscopic_arrays(self)

    def fields(self):
        return outputs.fields(self)

    def field_names(self):
        return outputs.field_names(self)

    def field(self, name):
        """Only what the named field needs (the moments without ρ for speed, vorticity, ux, uy)."""
        return outputs.field(self, name)

    def device_diagnostics(self):
        xp = self.xp
        rho, ux, uy = self.macroscopic()
        fluid = xp.asarray(self.mask_host == d2q9.FLUID)
        u2 = ux * ux + uy * uy
        return {"mass": xp.sum(xp.where(fluid, rho, 0), dtype=xp.float64),
                "max_speed": xp.sqrt(xp.max(u2)),
                "min_density": xp.min(xp.where(fluid, rho, xp.inf)),
                "max_density": xp.max(xp.where(fluid, rho, -xp.inf)),
                "kinetic_energy": 0.5 * xp.sum(xp.where(fluid, rho * u2, 0), dtype=xp.float64),
                "tau": self.preset.tau}

    def sanity_bounds(self):
        """Density positive and below MAX_DENSITY (the rest density is 1; a low-Mach flow moves it by
        O(Ma²), so 10 is no flow, only a blow-up or a state that was never one, such as a checkpoint
        whose populations are all 1e30); speed below the lattice sound speed 1/√3 (Mach 1: far beyond
        what the lattice Boltzmann equation resolves; a run there is blowing up)."""
        return {"min_density": (0.0, math.inf), "max_density": (-math.inf, MAX_DENSITY),
                "max_speed": (-math.inf, LATTICE_SOUND_SPEED)}

    def divergence_advice(self):
        """A lattice Boltzmann run has no time step to lower: it is stable for τ well above ½ and
        a small lattice Mach number (|u| ≪ 1/√3)."""
        p = self.preset
        if p.physics.reynolds is not None:
            return (f"τ = {p.tau:.4g}: lower physics.reynolds or raise the resolution (both bring τ closer to 1, away "
                    "from the unstable ½), or lower the velocity (the lid or inlet)")
        return (f"τ = {p.tau:.4g}: raise physics.tau towards 1 (away from the unstable ½), or lower the velocity "
                "(the lid or inlet)")

    @property
    def updates_per_step(self):
        ny, nx = self.preset.shape
        return float(nx * ny)

    def bytes_per_update(self):
        """One read and one write of the 9 populations per node: 72 B in fp32, 36 B fp16, 144 B fp64."""
        return 2.0 * Q * self.storage.stored_dtype.itemsize

    # ---- tests and benchmarks ---------------------------------------------------------------
    @classmethod
    def equivalence_presets(cls):
        return cases.equivalence_presets()

    @classmethod
    def equivalence_companions(cls, axis, choice):
        return cases.equivalence_companions(axis, choice)

    BENCH_BATCH = cases.BENCH_BATCH

    @classmethod
    def bench_spec(cls):
        return cases.SPEC

    @classmethod
    def bench_cases(cls, backend: str = "cupy"):
        return cases.bench_cases(backend)
