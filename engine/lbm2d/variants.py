"""The lbm2d variant axes (docs/architecture.md, "The variant registry"), registered explicitly by
:func:`register` (called once, when engine.py is imported; every family registers this way).

Single-step kernels live in shaders/cuda/lbm2d/lbm2d.cu. The temporal-blocking kernels (P1's
stb / srtb / srtb-ws and the wavefront kernel) come from ``engine/lbm2d/temporal_blocking.py``:

    unavailable_reason(selection: dict, preset) -> str | None
    make_stepper(xp, selection: dict, preset, mask, params) -> callable(f_src, f_dst, nsteps)

``make_stepper`` returns a function that advances ``nsteps`` steps from ``f_src`` into ``f_dst``
with exactly the step semantics of docs/lbm2d.md (``f_src`` may be clobbered). ``params`` is a
dict: tau, force (Fx, Fy), u_wall (uwx, uwy) — Python floats — and dtype.

The axes ts and tr parse as ``int`` and tile as (width, height) (``registry.typed``).
"""
from __future__ import annotations

from .. import registry
from . import temporal_blocking

FAMILY = "lbm2d"
SINGLE_STEP = ("reference", "two-kernel", "fused")
TEMPORAL_BLOCKING = ("stb", "srtb", "srtb-ws", "wavefront")
TS_CHOICES = ("1", "2", "4", "8", "16")
TR_CHOICES = ("0", "1", "2", "4", "8")
TILE_CHOICES = ("8x8", "10x10", "16x8", "16x16", "32x8", "32x16", "32x32")
# The wavefront kernel reads a tile as (threads = strip width incl. its 2·ts halo columns) x (rows
# marched per block); these are its best shapes in the ts × tile sweep (docs/decisions.md D11).
# For P1's kernels they are more than 1024 threads: "cannot run", with the reason.
WAVE_TILE_CHOICES = ("64x128", "128x64", "128x128", "192x128")


def _tb_reason(selection, preset) -> str | None:
    if preset.open_boundaries:
        return "temporal blocking does not implement inlet/outlet boundaries (walls, lid and periodic only)"
    if preset.physics.collision != "bgk":
        return "temporal-blocking kernels implement BGK collision only"
    if selection.get("storage", "native") != "native":
        return "temporal-blocking kernels use native storage (fp16 storage is fused/reference only)"
    if selection.get("streaming", "two-lattice") != "two-lattice":
        return "temporal-blocking kernels use two lattices (AA streaming is fused only)"
    return temporal_blocking.unavailable_reason(selection, preset)


def check_kernel(backend, selection, preset):
    k = selection["kernel"]
    if k in TEMPORAL_BLOCKING:
        return _tb_reason(selection, preset)
    return None


def check_blocking_knob(backend, selection, preset):
    """ts / tr / tile only shape the temporal-blocking kernels; elsewhere any value is ignored."""
    if selection["kernel"] not in TEMPORAL_BLOCKING:
        return None
    typed = registry.typed(FAMILY, selection)
    if typed["tr"] > typed["ts"]:
        return f"tr = {selection['tr']} > ts = {selection['ts']} (P1: tr ≤ ts)"
    return _tb_reason(selection, preset)


def check_storage(backend, selection, preset):
    if selection["storage"] == "native":
        return None
    if preset.physics.precision != "fp32":
        return "fp16 storage is defined against fp32 arithmetic; the preset is fp64"
    if selection["kernel"] == "two-kernel":
        return "two-kernel would round the intermediate streamed lattice to fp16 as well; use fused"
    if selection["kernel"] in TEMPORAL_BLOCKING:
        return "temporal-blocking kernels use native storage"
    return None


def check_streaming(backend, selection, preset):
    if selection["streaming"] == "two-lattice":
        return None
    if selection["kernel"] != "fused":
        return "AA (in-place) streaming is implemented in the fused kernel only"
    if preset.open_boundaries:
        return "AA streaming does not implement inlet/outlet boundaries"
    return None


def check_graph(backend, selection, preset):
    if selection["graph"] == "off":
        return None
    if selection["kernel"] == "reference":
        return "CUDA graphs batch CUDA kernels; the reference kernel is array code"
    return None


def register() -> None:
    R = registry
    R.register_axis(FAMILY, "kernel", default={"numpy": "reference", "cupy": "fused"},
                    doc="reference: array code (NumPy/CuPy); two-kernel: stream then collide (naive baseline); "
                        "fused: pull stream + collide in one kernel; stb/srtb/srtb-ws: P1's temporal blocking; "
                        "wavefront: temporal blocking marching along y (beyond P1)")
    R.register_choice(FAMILY, "kernel", "reference", backends=("numpy", "cupy"),
                      doc="xp-generic array step (the reference)", reference={"kernel": "reference"}, rtol=1e-6,
                      check=check_kernel)
    R.register_choice(FAMILY, "kernel", "two-kernel", backends=("cupy",), doc="stream kernel, then collide kernel",
                      reference={"kernel": "reference"}, rtol=1e-5, check=check_kernel)
    R.register_choice(FAMILY, "kernel", "fused", backends=("cupy",), doc="pull stream + collide, one kernel",
                      reference={"kernel": "reference"}, rtol=1e-5, check=check_kernel)
    docs = {"stb": "shared-memory temporal blocking s{ts}r0tb (P1 §3.1)",
            "srtb": "shared + register temporal blocking s{ts}r{tr}tb (P1 §3.2)",
            "srtb-ws": "srtb with warp-shuffle exchange of x-contiguous directions (P1 §3.3)",
            "wavefront": "ts steps per pass by a strip of columns marching along y, one barrier per row "
                         "(beyond P1; tile = threads x rows, e.g. 64x128)"}
    for name in TEMPORAL_BLOCKING:
        R.register_choice(FAMILY, "kernel", name, backends=("cupy",), doc=docs[name],
                          reference={"kernel": "reference"}, rtol=1e-5, check=check_kernel)

    for axis, choices, default, doc in (
            ("ts", TS_CHOICES, "4", "temporal-blocking steps per global-memory pass (P1's ts; read by the "
                                    "kernels stb, srtb, srtb-ws and wavefront only)"),
            ("tr", TR_CHOICES, "0", "register-blocking steps per shared-memory pass (P1's tr, ≤ ts; used by the "
                                    "kernels srtb and srtb-ws; stb and wavefront need 0)"),
            ("tile", TILE_CHOICES + WAVE_TILE_CHOICES, "16x16",
             "thread-block tile (x × y) of the temporal-blocking kernels (wavefront: threads × rows; read by "
             "the kernels stb, srtb, srtb-ws and wavefront only)")):
        R.register_axis(FAMILY, axis, default=default, doc=doc, parse=temporal_blocking.AXIS_PARSERS[axis])
        for c in choices:
            R.register_choice(FAMILY, axis, c, backends=("numpy", "cupy"), doc=f"{axis} = {c}",
                              reference={"kernel": "reference"}, rtol=1e-5, check=check_blocking_knob)

    R.register_axis(FAMILY, "storage", default="native",
                    doc="native: the preset's precision; fp16: half-precision storage of f − w, fp32 arithmetic")
    R.register_choice(FAMILY, "storage", "native", doc="fp32 or fp64 as the preset says",
                      reference={"kernel": "reference"}, rtol=1e-5, check=check_storage)
    # Stated tolerance of fp16 storage (docs/lbm2d.md): populations within 2e-4 absolute of the fp32
    # reference after 64 steps (f ≈ w_i ≤ 4/9; fp16 holds f − w_i with ~5e-4 relative rounding).
    R.register_choice(FAMILY, "storage", "fp16", backends=("numpy", "cupy"),
                      doc="half storage of the shifted populations f − w, fp32 arithmetic",
                      reference={"kernel": "reference", "storage": "native"}, rtol=0.0, atol=FP16_ATOL,
                      check=check_storage)

    R.register_axis(FAMILY, "streaming", default="two-lattice",
                    doc="two-lattice: read A, write B; aa: in-place AA pattern, one lattice (half the memory)")
    R.register_choice(FAMILY, "streaming", "two-lattice", doc="ping-pong between two lattices",
                      reference={"kernel": "reference"}, rtol=1e-5, check=check_streaming)
    R.register_choice(FAMILY, "streaming", "aa", backends=("cupy",), doc="AA pattern (Bailey et al. 2009), in place",
                      reference={"kernel": "reference"}, rtol=1e-5, check=check_streaming)

    R.register_axis(FAMILY, "graph", default="off",
                    doc=f"on: each batch of up to {GRAPH_STEPS} steps is one CUDA-graph launch (kills launch overhead)")
    R.register_choice(FAMILY, "graph", "off", doc="one launch per kernel and step (no CUDA graph)",
                      reference={"kernel": "reference"}, rtol=1e-5, check=check_graph)
    R.register_choice(FAMILY, "graph", "on", backends=("cupy",), doc="CUDA-graph batching of steps",
                      reference={"kernel": "reference"}, rtol=1e-5, check=check_graph)


FP16_ATOL = 2e-4
GRAPH_STEPS = 128
