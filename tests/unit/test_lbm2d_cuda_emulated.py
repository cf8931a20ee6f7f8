"""The lbm2d CUDA kernels on the CPU: the exact source of shaders/cuda/lbm2d compiled as C++ with
the CUDA built-ins emulated (tests/unit/cuda_emulator.py's approach), every block and thread of a
launch looped over serially. Checks the kernels' indexing, bounce-back, moving wall, AA layouts,
open boundaries, TRT and fp16 conversion against the NumPy reference without a GPU. (Serial
threads cannot show races: the AA race-freedom argument is test_lbm2d_aa_layout.py.)
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.lbm2d import Engine
from nagare.engine.lbm2d.d2q9 import CX, CY, OPP, Q, W
from nagare.engine.lbm2d.launch import BLOCK, node_classes, segment_classes

from nagare import shaders
from tests.unit.cuda_emulator import PRELUDE, compile_shared

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")

KERNELS = {  # wrapper name: (kernel template instance, C parameter list, call arguments)
    "fused": ("lbm_fused<T, S, TRT, NPT, ROWS>", "const S* f, S* g, const unsigned char* m, int nx, int ny, T om, "
              "T omm, T fx, T fy, T uwx, T uwy", "f, g, m, cls, seg, nx, ny, om, omm, fx, fy, uwx, uwy, r0, r1"),
    "stream": ("lbm_stream<T, S, ROWS>", "const S* f, S* g, const unsigned char* m, int nx, int ny, T om, T omm, "
               "T fx, T fy, T uwx, T uwy", "f, g, m, nx, ny, uwx, uwy, r0, r1"),
    "collide": ("lbm_collide<T, S, TRT, ROWS>", "const S* f, S* g, const unsigned char* m, int nx, int ny, T om, "
                "T omm, T fx, T fy, T uwx, T uwy", "g, m, nx, ny, om, omm, fx, fy, r0, r1"),
    "aa_p": ("lbm_fused_aa<T, S, TRT, true, ROWS>", "const S* f, S* g, const unsigned char* m, int nx, int ny, T om, "
             "T omm, T fx, T fy, T uwx, T uwy", "g, m, cls, nx, ny, om, omm, fx, fy, uwx, uwy, r0, r1"),
    "aa_q": ("lbm_fused_aa<T, S, TRT, false, ROWS>", "const S* f, S* g, const unsigned char* m, int nx, int ny, T om, "
             "T omm, T fx, T fy, T uwx, T uwy", "g, m, cls, nx, ny, om, omm, fx, fy, uwx, uwy, r0, r1"),
    "open": ("lbm_open_boundaries<T, S, ROWS>", "const S* f, S* g, const unsigned char* m, int nx, int ny, T om, "
             "T omm, T fx, T fy, T uwx, T uwy", "g, m, nx, ny, uwx, r0, r1"),  # u_in passed in the uwx slot
}


def build(T, S, trt, npt, tmp_path_factory, rows=False):
    """The serial emulation of lbm2d.cu's kernels; ``rows``: the ROWS instances (a row range a launch)."""
    body = [PRELUDE, "#define __host__\n", shaders.source("cuda/lbm2d/lbm2d.cu"),
            f"typedef {T} T; typedef {S} S; static const bool TRT = {trt}; static const int NPT = {npt};\n",
            f"static const bool ROWS = {'true' if rows else 'false'};\n",
            "static const unsigned char* cls;\nstatic const unsigned char* seg;\n"]
    for name, (kern, params, call) in KERNELS.items():
        body.append(f"""
extern "C" void {name}(int gx, int gy, int bx, int by, const unsigned char* node_class,
                       const unsigned char* node_seg, {params}, int r0, int r1) {{
    cls = node_class;
    seg = node_seg;
    blockDim = {{(unsigned)bx, (unsigned)by, 1u}};
    for (unsigned y = 0; y < (unsigned)gy; ++y) for (unsigned x = 0; x < (unsigned)gx; ++x) {{
        blockIdx = {{x, y, 0u}};
        for (unsigned ty = 0; ty < (unsigned)by; ++ty) for (unsigned tx = 0; tx < (unsigned)bx; ++tx) {{
            threadIdx = {{tx, ty, 0u}};
            {kern}({call});
        }}
    }}
}}""")
    return compile_shared("\n".join(body), "lbm2d", tmp_path_factory)


class Emulated:
    """Drives the emulated kernels exactly as the lbm2d steppers (steppers.py) drive the real ones."""

    def __init__(self, lib, engine, storage_dtype, scalar, fused_launch):
        self.lib, self.e, self.sd, self.scalar = lib, engine, np.dtype(storage_dtype), scalar
        p = engine.preset
        self.ny, self.nx = p.shape
        self.grid = ((self.nx + BLOCK[0] - 1) // BLOCK[0], (self.ny + BLOCK[1] - 1) // BLOCK[1])
        (fbx, fby, _), npt = fused_launch
        self.fused_block = (fbx, fby)
        self.fused_grid = ((self.nx + fbx * npt - 1) // (fbx * npt), (self.ny + fby - 1) // fby)
        T = scalar
        self.tail = [ctypes.c_int(self.nx), ctypes.c_int(self.ny), T(1 / p.tau), T(float(engine.lat.omega_minus)),
                     T(p.physics.force[0]), T(p.physics.force[1]), T(p.wall_velocity[0]), T(p.wall_velocity[1])]
        self.open_tail = list(self.tail)
        self.open_tail[6] = T(p.physics.inlet_velocity)
        self.mask = np.ascontiguousarray(engine.mask_host)
        self.cls = np.ascontiguousarray(node_classes(np, self.mask))
        self.seg = segment_classes(np, self.cls)

    def call(self, name, f, g, tail=None, rows=None):
        """One launch, over all rows or over ``rows`` = (r0, r1) (a ROWS build; the grid's y extent
        then covers r1 − r0 rows, as steppers.SingleStepStepper.update launches it)."""
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        grid, block = (self.fused_grid, self.fused_block) if name == "fused" else (self.grid, BLOCK[:2])
        r0, r1 = rows if rows is not None else (0, self.ny)
        gy = -(-(r1 - r0) // block[1])
        if name == "open":
            grid, block, gy = (-(-(r1 - r0) // 128), 1), (128, 1), 1
        getattr(self.lib, name)(ctypes.c_int(grid[0]), ctypes.c_int(gy), ctypes.c_int(block[0]),
                                ctypes.c_int(block[1]), ptr(self.cls), ptr(self.seg), ptr(f), ptr(g), ptr(self.mask),
                                *(tail or self.tail), ctypes.c_int(r0), ctypes.c_int(r1))

    def encode(self, f):
        if self.sd == np.float16:
            return (f.astype(np.float32) - W.astype(np.float32).reshape(Q, 1, 1)).astype(np.float16)
        return f.astype(self.sd)

    def decode(self, s):
        if self.sd == np.float16:
            return s.astype(np.float32) + W.astype(np.float32).reshape(Q, 1, 1)
        return s

    def run(self, f, steps, kind, ranges=(None,)):
        """``steps`` steps of ``kind``, each launched over the row ``ranges`` in turn (None: whole)."""
        a = np.ascontiguousarray(self.encode(f))
        b = np.empty_like(a)
        if kind == "aa":
            a = np.ascontiguousarray(a[OPP])
            for s in range(steps):
                for r in ranges:
                    self.call("aa_p" if s % 2 == 0 else "aa_q", a, a, rows=r)
            if steps % 2:  # layout Q
                a = np.stack([np.roll(a[i], (-CY[i], -CX[i]), axis=(0, 1)) for i in range(Q)])
            else:
                a = a[OPP]
            return self.decode(a)
        for _ in range(steps):
            for r in ranges:  # as SingleStepStepper.update: the kernels, then the open boundaries, per range
                if kind == "two-kernel":
                    self.call("stream", a, b, rows=r)
                    self.call("collide", a, b, rows=r)
                else:
                    self.call("fused", a, b, rows=r)
                if self.e.preset.open_boundaries:
                    self.call("open", b, b, self.open_tail, rows=r)
            a, b = b, a
        return self.decode(a)


# Launch shapes of the fused kernel: the engine's choice plus odd ones (several nodes per thread,
# blocks that overhang the grid) so the tail handling is exercised.
LAUNCHES = [((64, 4, 1), 1), ((32, 2, 1), 2), ((16, 3, 1), 3)]

CASES = [  # (equivalence preset, kernel kind, storage)
    ("fp32-walls-obstacle", "fused", "native"), ("fp32-walls-obstacle", "two-kernel", "native"),
    ("fp32-walls-obstacle", "aa", "native"), ("fp64-cavity", "fused", "native"), ("fp64-cavity", "aa", "native"),
    ("fp32-channel", "fused", "native"), ("fp32-channel", "two-kernel", "native"),
    ("fp32-trt", "fused", "native"), ("fp32-trt", "aa", "native"),
    ("fp32-walls-obstacle", "fused", "fp16"), ("fp32-walls-obstacle", "aa", "fp16"),
]


@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda la: f"{la[0][0]}x{la[0][1]}n{la[1]}")
@pytest.mark.parametrize("label,kind,storage", CASES)
def test_emulated_kernel_matches_reference(label, kind, storage, launch, tmp_path_factory):
    if kind != "fused" and launch != LAUNCHES[0]:
        pytest.skip("launch shapes only vary for the fused kernel")
    p = Engine.equivalence_presets()[label]
    ref = Engine(p, get_backend("numpy"), variants={"storage": storage})
    ref.random_state(np.random.default_rng(11))
    f0 = np.asarray(ref.state_arrays()["f"])
    fp64 = p.physics.precision == "fp64"
    T, S = ("double", "double") if fp64 else ("float", "unsigned short" if storage == "fp16" else "float")
    lib = build(T, S, "true" if p.physics.collision == "trt" else "false", launch[1], tmp_path_factory)
    emu = Emulated(lib, ref, np.float16 if storage == "fp16" else p.physics.dtype,
                   ctypes.c_double if fp64 else ctypes.c_float, launch)
    steps = 9  # odd: AA ends in layout Q
    got = emu.run(f0, steps, kind)
    ref.step(steps)
    want = np.asarray(ref.state_arrays()["f"])
    fluid = ref.mask_host == 0
    # Same IEEE operations in the same order (no FMA on the host): equal to the last bits, bar the
    # libm-free division; fp16 may flip a rounding where the fp32 values differ in the last bit.
    tol = dict(rtol=0, atol=1e-5) if storage == "fp16" else dict(rtol=1e-6 if not fp64 else 1e-13)
    np.testing.assert_allclose(got[:, fluid], want[:, fluid], **tol)
    assert np.abs(want - f0).max() > 1e-4  # the state moved


ROW_CASES = [  # (equivalence preset, kernel kind, storage): every kernel of lbm2d.cu's serial build
    ("fp32-walls-obstacle", "fused", "native"), ("fp32-walls-obstacle", "two-kernel", "native"),
    ("fp32-walls-obstacle", "aa", "native"), ("fp32-channel", "fused", "native"), ("fp32-trt", "aa", "fp16"),
]


def row_parts(ny: int):
    """The decomposed overlap's order on a slab of ny rows (ghost rows 0 and ny − 1 last here, so
    every row is updated once): the edge rows, the interior, then the ghosts."""
    return [(1, 2), (ny - 2, ny - 1), (2, ny - 2), (0, 1), (ny - 1, ny)]


@pytest.mark.parametrize("label,kind,storage", ROW_CASES)
def test_row_ranges_give_the_whole_steps_bits(label, kind, storage, tmp_path_factory):
    """The ROWS instances (the decomposed step's overlap): a step launched as several row ranges
    equals the whole-grid launch of the ROWS=false instances bit for bit, and a range updates its
    rows only (the rest of the target keeps what it held)."""
    p = Engine.equivalence_presets()[label]
    ref = Engine(p, get_backend("numpy"), variants={"storage": storage})
    ref.random_state(np.random.default_rng(17))
    f0 = np.asarray(ref.state_arrays()["f"])
    fp64 = p.physics.precision == "fp64"
    T, S = ("double", "double") if fp64 else ("float", "unsigned short" if storage == "fp16" else "float")
    trt = "true" if p.physics.collision == "trt" else "false"
    scalar = ctypes.c_double if fp64 else ctypes.c_float
    sd = np.float16 if storage == "fp16" else p.physics.dtype
    whole = Emulated(build(T, S, trt, 1, tmp_path_factory), ref, sd, scalar, LAUNCHES[0])
    parts = Emulated(build(T, S, trt, 1, tmp_path_factory, rows=True), ref, sd, scalar, LAUNCHES[0])
    ny = p.shape[0]
    want = whole.run(f0, 5, kind)
    np.testing.assert_array_equal(parts.run(f0, 5, kind, ranges=row_parts(ny)), want)
    np.testing.assert_array_equal(parts.run(f0, 5, kind, ranges=[(0, ny)]), want)
    if kind == "aa":
        return
    a = np.ascontiguousarray(parts.encode(f0))
    b = np.full_like(a, 7)  # a sentinel no update writes
    for name in ("stream", "collide") if kind == "two-kernel" else ("fused",):
        parts.call(name, a, b, rows=(3, 5))
    outside = np.ones(ny, bool)
    outside[3:5] = False
    assert (b[:, outside] == 7).all() and not (b[:, 3:5] == 7).all()


# ---- lbm_fused_vec: real warp shuffles need one fiber per CUDA thread (tests/cuda_emu/emu.h) -------------
EMU = Path(__file__).resolve().parents[1] / "cuda_emu"
# (equivalence preset, storage, W, block x, block y, nx override, kernel): idle/edge lanes, wrap, segments
VEC_CASES = [
    ("fp32-walls-obstacle", "native", 2, 32, 2, None, "vec"),  # 24 pairs a row: lanes 24..31 idle
    ("fp32-walls-obstacle", "fp16", 2, 32, 3, None, "vec"),
    ("fp32-walls-obstacle", "native", 4, 32, 1, None, "vec"),  # 12 quads a row
    ("fp32-walls-obstacle", "fp16", 4, 32, 2, 192, "vec"),     # three segments a row: FAST ones beside the obstacle's
    ("fp32-walls-obstacle", "native", 2, 64, 1, 256, "vec"),   # four segments, two warps a row
    ("fp32-walls-obstacle", "fp16", 8, 32, 1, 384, "vec"),     # eight fp16 (16 bytes) per access: 1.5 warps a row
    ("fp32-channel", "native", 2, 32, 1, None, "vec"),         # 32 pairs: lane 31 loads across the wrap; open ends
    ("fp32-channel", "native", 4, 32, 1, 192, "vec"),          # 48 quads (two warps), open boundaries, W = 4
    ("fp32-trt", "native", 2, 64, 1, None, "vec"),             # two warps a row, the second partly idle
    ("fp64-cavity", "native", 2, 32, 2, 38, "vec"),            # fp64 (double pairs), moving lid
    ("fp64-cavity", "native", 4, 32, 1, 40, "vec"),            # fp64 quads
    # lbm_fused_packed (fp16 two to a register): every W, edge lanes, FIXED nodes inside a word, segments
    ("fp32-walls-obstacle", "fp16", 8, 32, 1, 384, "packed"),  # 48 words a row: 1.5 warps
    ("fp32-walls-obstacle", "fp16", 4, 32, 2, 192, "packed"),
    ("fp32-walls-obstacle", "fp16", 2, 32, 3, None, "packed"),
    ("fp32-channel", "fp16", 8, 32, 1, None, "packed"),        # open boundaries; 8 lanes of 32 active
    ("fp32-channel", "fp16", 8, 32, 1, None, "vec"),           # the open ends read the neighbour column as stored
    ("fp32-trt", "fp16", 8, 32, 1, None, "packed"),            # TRT on shifted storage
    # lbm_fused_pipe (packed rows through cp.async; `by` = rows per warp): prologue / ring wrap, the
    # last run shorter than the others, rows that wrap in y, idle warps and lanes, open ends, TRT
    ("fp32-walls-obstacle", "fp16", 8, 32, 5, 384, "pipe2"),   # 1.5 strips: a half-idle warp
    ("fp32-walls-obstacle", "fp16", 8, 64, 7, 192, "pipe3"),   # two warps a block, the second idle
    ("fp32-walls-obstacle", "fp16", 8, 32, 64, 256, "pipe4"),  # one run of every row (ny < rows)
    ("fp32-channel", "fp16", 8, 32, 3, None, "pipe2"),         # open boundaries; 8 lanes of 32 active
    ("fp32-trt", "fp16", 8, 64, 4, 512, "pipe3"),              # TRT; two full strips in one block
    ("fp32-walls-obstacle", "fp16", 8, 32, 5, 384, "pipe2i64"),  # 64-bit offsets (grids beyond 21,845²)
]


def pipe_stages(kernel: str) -> int:
    """EMU_PIPE of a VEC_CASES kernel label: "pipe3" → 3, "pipe2i64" → 2, others 0."""
    return int(kernel.removeprefix("pipe").removesuffix("i64")) if kernel.startswith("pipe") else 0


def build_vec(T, S, trt, w, tmp_path_factory, kernel="vec", rows=False):
    d = tmp_path_factory.getbasetemp()
    src_dir = Path(shaders.__file__).parent / "cuda" / "lbm2d"
    main = EMU / "fused_vec_main.cpp"
    tag = hashlib.sha256((shaders.source("cuda/lbm2d/lbm2d.cu") + shaders.source("cuda/lbm2d/d2q9.cuh")
                          + (EMU / "emu.h").read_text() + main.read_text()
                          + T + S + trt + str(w) + kernel + str(rows)).encode()).hexdigest()[:12]
    exe = d / f"fused_vec_emu_{tag}"
    if not exe.exists():
        res = subprocess.run(["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-fno-fast-math", "-w", "-pthread",
                              f"-DEMU_S={S}", f"-DEMU_T={T}", f"-DEMU_TRT={trt}", f"-DEMU_W={w}",
                              f"-DEMU_PACKED={int(kernel == 'packed')}",
                              f"-DEMU_PIPE={pipe_stages(kernel)}", f"-DEMU_ROWS={int(rows)}",
                              *(["-DEMU_PIPE_INDEX=unsigned long long"] if kernel.endswith("i64") else []),
                              f"-I{src_dir}", f"-I{src_dir.parent}",  # lbm2d/, and cuda/ for fp16.cuh
                              f"-I{EMU}", str(main), "-o", str(exe)], capture_output=True, text=True, timeout=300)
        if res.returncode != 0 and "barrier" in res.stderr and "No such file" in res.stderr:
            pytest.skip("the host C++ compiler has no C++20 <barrier>")
        assert res.returncode == 0, res.stderr[:3000]
    return exe


def run_vec(exe, emu, f0, bx, by, steps, tmp_path):
    """Run a build_vec executable on f0 for ``steps`` steps; the decoded result."""
    p, ref = emu.e.preset, emu.e
    emu.encode(f0).tofile(tmp_path / "in.bin")
    emu.mask.tofile(tmp_path / "mask.bin")
    emu.cls.tofile(tmp_path / "cls.bin")
    emu.seg.tofile(tmp_path / "seg.bin")
    ny, nx = p.shape
    args = [str(exe), str(nx), str(ny), str(steps), str(bx), str(by), str(int(p.open_boundaries)),
            *(str(tmp_path / f) for f in ("in.bin", "mask.bin", "cls.bin", "seg.bin", "out.bin")),
            repr(1 / p.tau), repr(float(ref.lat.omega_minus)), *map(repr, map(float, p.physics.force)),
            *map(repr, map(float, p.wall_velocity)), repr(float(p.physics.inlet_velocity))]
    subprocess.run(args, check=True, timeout=600)
    return emu.decode(np.fromfile(tmp_path / "out.bin", emu.sd).reshape(f0.shape))


def vec_case(label, storage, nx, seed):
    """(NumPy engine on a random state, its Emulated driver, f0, (T, S, TRT) of the build) for a
    VEC_CASES row: the equivalence preset, widened to ``nx`` when given."""
    p = Engine.equivalence_presets()[label]
    if nx is not None:
        p = p.model_copy(update={"grid": p.grid.model_copy(update={"nx": nx})})
    ref = Engine(p, get_backend("numpy"), variants={"storage": storage})
    ref.random_state(np.random.default_rng(seed))
    f0 = np.asarray(ref.state_arrays()["f"])
    fp64 = p.physics.precision == "fp64"
    T, S = ("double", "double") if fp64 else ("float", "unsigned short" if storage == "fp16" else "float")
    emu = Emulated(None, ref, np.float16 if storage == "fp16" else p.physics.dtype, ctypes.c_double, LAUNCHES[0])
    return ref, emu, f0, (T, S, "true" if p.physics.collision == "trt" else "false")


ROW_VEC_CASES = [VEC_CASES[i] for i in (2, 5, 6, 12, 17, 20)]  # vec fp32 / fp16, open ends, packed, pipe (+ open)


@pytest.mark.parametrize("label,storage,w,bx,by,nx,kernel", ROW_VEC_CASES)
def test_vector_kernels_in_row_ranges_give_the_whole_steps_bits(label, storage, w, bx, by, nx, kernel, tmp_path,
                                                               tmp_path_factory):
    """lbm_fused_vec / _packed / _pipe as ROWS instances, each step launched over the decomposed
    overlap's row ranges: the same bits as the whole-grid instances (threaded emulation: real
    shuffles, the pipe's cp.async ring over a range's rows)."""
    ref, emu, f0, (T, S, trt) = vec_case(label, storage, nx, seed=23)
    whole = run_vec(build_vec(T, S, trt, w, tmp_path_factory, kernel), emu, f0, bx, by, 4, tmp_path)
    parts = run_vec(build_vec(T, S, trt, w, tmp_path_factory, kernel, rows=True), emu, f0, bx, by, 4, tmp_path)
    np.testing.assert_array_equal(parts, whole)
    assert np.abs(whole - f0).max() > 1e-4  # the state moved


@pytest.mark.parametrize("label,storage,w,bx,by,nx,kernel", VEC_CASES)
def test_emulated_vec_kernel_matches_reference(label, storage, w, bx, by, nx, kernel, tmp_path, tmp_path_factory):
    ref, emu, f0, (T, S, trt) = vec_case(label, storage, nx, seed=5)
    fp64 = ref.preset.physics.precision == "fp64"
    exe = build_vec(T, S, trt, w, tmp_path_factory, kernel)
    if nx is not None and nx >= 128:  # the FAST-segment shortcut and the per-node path both run
        assert (emu.seg == 0).any() and (emu.seg != 0).any()
    steps = 5
    got = run_vec(exe, emu, f0, bx, by, steps, tmp_path)
    ref.step(steps)
    want = np.asarray(ref.state_arrays()["f"])
    tol = dict(rtol=0, atol=1e-5) if storage == "fp16" else dict(rtol=1e-6 if not fp64 else 1e-13)
    np.testing.assert_allclose(got, want, **tol)  # every node, solid ones included (their copy)
    assert np.abs(want - f0).max() > 1e-4  # the state moved


def test_segment_classes_are_the_largest_node_class_of_each_run():
    rng = np.random.default_rng(3)
    cls = np.zeros((5, 150), np.uint8)
    cls[1, 70] = 1  # EDGE in row 1, segment 1
    cls[2, 149] = 2  # FIXED in the last, partial segment of row 2
    cls[4, rng.integers(0, 150, 6)] = 1
    seg = segment_classes(np, cls)
    assert seg.shape == (5, 3) and seg.dtype == np.uint8
    want = np.array([[cls[r, s * 64:(s + 1) * 64].max() for s in range(3)] for r in range(5)])
    np.testing.assert_array_equal(seg, want)
    assert seg[1].tolist() == [0, 1, 0] and seg[2].tolist() == [0, 0, 2]
    # lbm_fused_pipe copies whole 4-byte words: the buffer behind the 15 bytes is padded to 16, zeros
    assert seg.base is not None and seg.base.nbytes == 16 and seg.base[15] == 0


def test_fused_launch_modes_parse_and_fall_back():
    from nagare.engine.lbm2d import launch as lbm

    assert lbm.pipe_mode("pipe3r7") == (3, 7) and lbm.pipe_mode("pipe2") == (2, lbm.PIPE_ROWS)
    assert lbm.pipe_mode("packed8") is None and lbm.pipe_mode(2) is None
    # 32-bit element offsets while 9 planes fit in 2^32 elements, 64-bit beyond (21,846² and up)
    assert lbm.pipe_index_type(8192, 8192) == "unsigned int" == lbm.pipe_index_type(21845, 21845)
    assert lbm.pipe_index_type(21846, 21846) == "unsigned long long" == lbm.pipe_index_type(2**16, 2**13)
    assert lbm.vector_width("pipe2r16") == 8 and lbm.vector_width("vec4") == 4 and lbm.vector_width(3) == 1
    pipe = ((64, 1, 1), "pipe2r16")
    saved = dict(lbm.FUSED_LAUNCH)
    try:
        lbm.FUSED_LAUNCH["fp16"] = pipe
        assert lbm.fused_launch("fp16", 512) == pipe
        assert lbm.fused_launch("fp16", 512, 9.0) == pipe
        assert lbm.fused_launch("fp16", 512, 7.5) == lbm.PIPE_FALLBACK  # no cp.async before sm_80
        assert lbm.fused_launch("fp16", 516) == lbm.FUSED_FALLBACK  # nx not a multiple of 8
        # too few warps for the pipeline on small grids: vec4 (fp16 loads, fp32 arithmetic)
        assert lbm.fused_launch("fp16", 1024, 9.0, ny=1024) == lbm.SMALL_FP16_LAUNCH == ((64, 1, 1), "vec4")
        assert lbm.fused_launch("fp16", 2048, 9.0, ny=2048) == pipe  # from 2^22 nodes up
        assert lbm.fused_launch("fp16", 2048, 9.0, ny=2047) == lbm.SMALL_FP16_LAUNCH
        assert lbm.fused_launch("fp16", 322, 9.0, ny=320) == lbm.FUSED_FALLBACK  # nx not a multiple of 4
        assert lbm.fused_launch("fp16", 4096, 9.0, ny=4096) == pipe
        lbm.FUSED_LAUNCH["fp16"] = ((64, 2, 1), "pipe2")
        with pytest.raises(ValueError, match="one row of warps per block"):
            lbm.fused_launch("fp16", 512)
    finally:
        lbm.FUSED_LAUNCH.update(saved)


def test_fused_bench_shapes_and_hints_parse():
    from nagare.engine.lbm2d import fused_bench as fb

    for launch in fb.SHAPES:
        assert fb.parse_shape(fb.shape_label(launch)) == launch
    assert fb.parse_shape("64x1npipe2r8") == ((64, 1, 1), "pipe2r8")
    assert fb.hint_options("rreg152+fastdiv") == ("--maxrregcount=152", "--prec-div=false")
    assert fb.hint_options("default") is None
    with pytest.raises(KeyError):
        fb.hint_options("rreg152+nonsense")


# ---- tracers.cu: the tracer update and the velocity pass against the array path ------------------
def build_tracers(tmp_path_factory):
    launch = """
    blockDim = {64u, 1u, 1u};
    for (unsigned b = 0; b < (unsigned)((n + 63) / 64); ++b) {
        blockIdx = {b, 0u, 0u};
        for (unsigned t = 0; t < 64u; ++t) {
            threadIdx = {t, 0u, 0u};
            %s;
        }
    }"""
    tail = "solid, n, nx, ny, dt, ring_in, ring_out, m, line, lx0, ly0, lx1, ly1, pts, npts"
    params = ("const bool* solid, int nx, int ny, float dt, const long long* ring_in, long long* ring_out, int m, "
              "int line, double lx0, double ly0, double lx1, double ly1, const double* pts, int npts")
    body = [PRELUDE, "using std::max; using std::fmod; using std::floor;\n#define __host__\n",
            shaders.source("cuda/lbm2d/tracers.cu"),
            'extern "C" void advance(int n, float* pos, float* age, const float* ux, const float* uy, ' + params
            + ") {" + launch % f"tracer_advance<float>(pos, age, ux, uy, {tail})" + "}",
            'extern "C" void advance_lattice(int n, float* pos, float* age, const float* f, const unsigned char* mask, '
            "float fx, float fy, " + params + ") {"
            + launch % f"tracer_advance_lattice<float, float>(pos, age, f, mask, fx, fy, {tail})" + "}",
            'extern "C" void advance_lattice16(int n, float* pos, float* age, const unsigned short* f, '
            "const unsigned char* mask, float fx, float fy, " + params + ") {"
            + launch % f"tracer_advance_lattice<float, unsigned short>(pos, age, f, mask, fx, fy, {tail})" + "}",
            """
extern "C" void velocity(const float* f, const unsigned char* mask, int nx, int ny, float fx, float fy, float* ux,
                         float* uy, float* rho) {
    blockDim = {16u, 4u, 1u};
    for (unsigned by = 0; by < (unsigned)((ny + 3) / 4); ++by)
    for (unsigned bx = 0; bx < (unsigned)((nx + 15) / 16); ++bx) {
        blockIdx = {bx, by, 0u};
        for (unsigned ty = 0; ty < 4u; ++ty) for (unsigned tx = 0; tx < 16u; ++tx) {
            threadIdx = {tx, ty, 0u};
            lbm_velocity<float, float>(f, mask, nx, ny, fx, fy, ux, uy, rho);
        }
    }
}
extern "C" void vorticity(const float* f, const unsigned char* mask, const bool* solid, int nx, int ny, float fx,
                          float fy, float* out) {
    blockDim = {16u, 4u, 1u};
    for (unsigned by = 0; by < (unsigned)((ny + 3) / 4); ++by)
    for (unsigned bx = 0; bx < (unsigned)((nx + 15) / 16); ++bx) {
        blockIdx = {bx, by, 0u};
        for (unsigned ty = 0; ty < 4u; ++ty) for (unsigned tx = 0; tx < 16u; ++tx) {
            threadIdx = {tx, ty, 0u};
            lbm_vorticity<float, float>(f, mask, solid, nx, ny, fx, fy, out);
        }
    }
}"""]
    return compile_shared("\n".join(body), "tracers", tmp_path_factory)


def _tracer_case(release):
    from nagare.engine.presets import load_preset

    p = load_preset("lbm2d-cylinder", ["grid.nx=96", "grid.ny=48", "obstacle.diameter=10", "tracers.count=700",
                                       "tracers.rate=60", f"tracers.release={release}",
                                       "tracers.points=[[0.1, 0.3], [0.05, 0.7]]"], backend="numpy")
    e = Engine(p, get_backend("numpy"))
    e.step(41)  # a developed flow, tracers of every age (parked ones included), a ring mid-turn
    return p, e


def _ring_and_points(p, ref, release):
    """The kernels' ring (two slots, the current one first) and the release points."""
    ring = np.zeros((2, 2), np.int64)
    ring[0] = ref.cursor, ref.released
    pts = np.asarray(p.tracers.points, np.float64).reshape(-1)
    return ring, pts


@pytest.mark.parametrize("release", ["line", "points"])
def test_emulated_tracer_kernels_match_the_array_path(release, tmp_path_factory):
    from nagare.engine.lbm2d.tracers import Tracers

    p, e = _tracer_case(release)
    lib = build_tracers(tmp_path_factory)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    # the velocity pass equals macroscopic()
    f = np.ascontiguousarray(e.state_arrays()["f"], dtype=np.float32)
    ny, nx = p.shape
    ux, uy, rho = (np.empty((ny, nx), np.float32) for _ in range(3))
    lib.velocity(ptr(f), ptr(np.ascontiguousarray(e.mask_host)), nx, ny, ctypes.c_float(e.lat.force[0]),
                 ctypes.c_float(e.lat.force[1]), ptr(ux), ptr(uy), ptr(rho))
    rho_ref, ux_ref, uy_ref = e._macroscopic_arrays()
    np.testing.assert_array_equal(rho, rho_ref)
    np.testing.assert_array_equal(ux, ux_ref)
    np.testing.assert_array_equal(uy, uy_ref)
    # the display's one-pass vorticity equals the array path (reference.vorticity, 0 on solid nodes)
    from nagare.engine.lbm2d import reference

    vort = np.empty((ny, nx), np.float32)
    lib.vorticity(ptr(f), ptr(np.ascontiguousarray(e.mask_host)), ptr(np.ascontiguousarray(e.solid)), nx, ny,
                  ctypes.c_float(e.lat.force[0]), ctypes.c_float(e.lat.force[1]), ptr(vort))
    want = np.where(e.solid, 0, reference.vorticity(np, ux_ref, uy_ref))
    assert np.abs(want).max() > 1e-3
    np.testing.assert_array_equal(vort, want)
    # three tracer updates, kernel vs array path from the same state; the kernel keeps the ring's
    # counters in two device slots used in turn
    ref = e.tracers
    # a few on the box's last node lines (x = nx − 1, y = ny − 1, just inside them in float32):
    # their cells are the last ones, read at t = 1, never a node past the row
    edge = np.array([[nx - 1, 20.5], [30.25, ny - 1], [nx - 1, ny - 1], [np.nextafter(np.float32(nx - 1), 0), 7.0]],
                    np.float32)
    ref.pos[-len(edge):], ref.age[-len(edge):] = edge, 5.0
    pos, age = ref.pos.copy(), ref.age.copy()
    solid = np.ascontiguousarray(ref.solid)
    ring, pts = _ring_and_points(p, ref, release)
    m = min(ref.n, int(p.tracers.rate * 2.0))
    for u in range(3):
        lib.advance(ref.n, ptr(pos), ptr(age), ptr(ux), ptr(uy), ptr(solid), nx, ny, ctypes.c_float(2.0),
                    ptr(ring[u % 2]), ptr(ring[1 - u % 2]), m, int(release == "line"),
                    *(ctypes.c_double(v) for v in p.tracers.line), ptr(pts), len(p.tracers.points))
        ref._advance_array(ux_ref, uy_ref, 2.0)
        np.testing.assert_array_equal(ring[1 - u % 2], [ref.cursor, ref.released])
    assert isinstance(ref, Tracers) and (ref.age > 0).sum() > 100 and (ref.age == 0).sum() >= 120
    np.testing.assert_allclose(pos, ref.pos, rtol=0, atol=2e-6)  # libm sin/cos vs NumPy's: last bits
    np.testing.assert_array_equal(age, ref.age)


@pytest.mark.parametrize("storage", ["fp32", "fp16"])
@pytest.mark.parametrize("release", ["line", "points"])
def test_emulated_lattice_tracer_update_equals_velocity_pass_then_update(release, storage, tmp_path_factory):
    """tracer_advance_lattice (the update inside the CUDA graph, reading the populations) gives the
    bits of the moments pass followed by tracer_advance, on fp32 and fp16-shifted storage."""
    from nagare.engine.lbm2d.storage import Storage

    p, e = _tracer_case(release)
    lib = build_tracers(tmp_path_factory)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    ny, nx = p.shape
    canonical = np.ascontiguousarray(e.state_arrays()["f"], dtype=np.float32)
    if storage == "fp16":  # the stored bits of the shifted fp16 lattice, and what they decode to
        stored = np.ascontiguousarray(Storage.of({**e.selection, "storage": "fp16"}, np, np.dtype(np.float32),
                                                 e.mask_host).load(canonical).f)
        assert stored.dtype == np.float16
        w = W.astype(np.float32).reshape(Q, 1, 1)
        f32 = np.ascontiguousarray(stored.astype(np.float32) + w)
    else:
        stored = f32 = canonical
    mask = np.ascontiguousarray(e.mask_host)
    fx, fy = (ctypes.c_float(v) for v in e.lat.force)
    ux, uy, rho = (np.empty((ny, nx), np.float32) for _ in range(3))
    lib.velocity(ptr(f32), ptr(mask), nx, ny, fx, fy, ptr(ux), ptr(uy), ptr(rho))
    ref = e.tracers
    solid = np.ascontiguousarray(ref.solid)
    ring_a, pts = _ring_and_points(p, ref, release)
    ring_b = ring_a.copy()
    pos_a, age_a, pos_b, age_b = ref.pos.copy(), ref.age.copy(), ref.pos.copy(), ref.age.copy()
    m = min(ref.n, int(p.tracers.rate * 2.0))
    rel = (int(release == "line"), *(ctypes.c_double(v) for v in p.tracers.line), ptr(pts), len(p.tracers.points))
    lattice = lib.advance_lattice16 if storage == "fp16" else lib.advance_lattice
    for u in range(3):
        s_in, s_out = u % 2, 1 - u % 2
        lib.advance(ref.n, ptr(pos_a), ptr(age_a), ptr(ux), ptr(uy), ptr(solid), nx, ny, ctypes.c_float(2.0),
                    ptr(ring_a[s_in]), ptr(ring_a[s_out]), m, *rel)
        lattice(ref.n, ptr(pos_b), ptr(age_b), ptr(stored), ptr(mask), fx, fy, ptr(solid), nx, ny,
                ctypes.c_float(2.0), ptr(ring_b[s_in]), ptr(ring_b[s_out]), m, *rel)
    assert (age_a > 0).sum() > 100 and not np.array_equal(pos_a, ref.pos)  # the tracers moved
    np.testing.assert_array_equal(pos_b, pos_a)
    np.testing.assert_array_equal(age_b, age_a)
    np.testing.assert_array_equal(ring_b, ring_a)
