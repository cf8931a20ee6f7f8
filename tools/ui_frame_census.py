"""What the UI thread does for one steady frame: milliseconds and counts, without a simulation.

    xvfb-run -a python tools/ui_frame_census.py --case sph-splat --case lbm2d --frames 60

Each case builds a FieldCanvas with the imgui HUD (a few seconds of timing history in it, as a
running app has), feeds it synthetic packets whose automatic colour range moves every frame (as a
live run's does) and draws ``--frames`` frames after a warm-up. Reported per frame: the draw's
wall time (``draw_now`` with ``glFinish``), the GLIR commands the parser ran and those the state
filter left out, gloo program draws, UNIFORM commands, transform-chain maps, text layouts
(``_text_to_vbo``), and the HUD's share. Mesa's GL is slower than a GPU driver's, so the counts and
the Python-side times are what carry over to the GPU machine, not the total.

Cases:
- ``sph``: 3D particles (GL sphere sprites, the host path), a domain box, one obstacle;
- ``sph-splat``: the same on the interop path's CUDA splat, its CUDA half stubbed out (the
  Python around it: view matrix, point scale, the quad's uniforms) — what the GPU machine runs;
- ``lbm2d``: a 2D grid with obstacles and tracers, axes and colour bar (the host path's texture
  upload included);
- ``lbm2d-shared``: the same with the field's upload left out (the interop path's shared buffer
  is drawn directly: no texture write a frame).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
import types
from types import SimpleNamespace

import numpy as np

SORT = "cumulative"
COUNTED = {  # label → (file suffix, function name) in the profile
    "text layouts": ("text.py", "_text_to_vbo"),
    "transform maps": ("chain.py", "map"),
    "program draws": ("gloo/program.py", "draw"),
    "visual draws": ("visuals/visual.py", "draw"),
    "_prepare_draw (text)": ("text.py", "_prepare_draw"),
    "set_state": ("wrappers.py", "set_state"),
    "shader var sets": ("multiprogram.py", "__setitem__"),
}


class GLCallCounter:
    """Counts the GL functions called through VisPy's ``gl`` namespace and PyOpenGL's ``OpenGL.GL``
    (the HUD's renderer): each one is a ctypes call that lets go of the GIL."""

    def __init__(self):
        from OpenGL import GL as pyopengl
        from vispy.gloo import gl as vispy_gl

        self.calls = {"vispy": 0, "pyopengl": 0}
        self.names: dict = {}
        for key, module in (("vispy", vispy_gl), ("pyopengl", pyopengl)):
            for name in dir(module):
                fn = getattr(module, name)
                if name.startswith("gl") and callable(fn):
                    setattr(module, name, self._wrap(key, name, fn))

    def _wrap(self, key, name, fn):
        def call(*a, **k):
            self.calls[key] += 1
            self.names[(key, name)] = self.names.get((key, name), 0) + 1
            return fn(*a, **k)
        return call

    def reset(self) -> None:
        self.calls = dict.fromkeys(self.calls, 0)
        self.names = {}


_GL_CALLS: GLCallCounter | None = None  # installed once per process


def _history(n: int = 80) -> list:
    t0 = time.perf_counter() - n * 0.25
    return [SimpleNamespace(wall=t0 + 0.25 * i, step=10 * i, steps_per_s=40.0, updates_per_s=4e6 + 1e4 * i,
                            gbytes_per_s=1.5, roofline_pct=12.0 + 0.01 * i,
                            phase_ms={"step": 2.0 + 0.01 * (i % 7), "publish": 0.3, "tracers": 0.2})
            for i in range(n)]


def _stub_splat(canvas) -> None:
    """The interop path's splat with its CUDA half stubbed: the drawer prepares and draws the quad
    as on the GPU machine; nothing is written into the quad's texture."""
    from nagare.app.gui import interop, splat

    class FakeTexture:
        stream, rt = 0, None

        def __init__(self, handle, shape):
            self.in_flight = interop.InFlight()

        def _record_event(self):
            return None

        def upload(self, image, event=None):
            pass

        def close(self):
            pass

    class FakeSplatter:
        def set_colormap(self, name):
            pass

        def render(self, positions, values, params, stream):
            return None, ()

    interop.TextureInterop = FakeTexture
    splat.CudaSplatter = FakeSplatter
    sys.modules.setdefault("cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(ExternalStream=lambda p: None)))
    canvas.display_path = "interop"


def _packets(case: str, rng):
    from nagare.app.packets import FramePacket

    if case.startswith("sph"):
        n = 20000
        hi = np.array([1.6, 0.67, 0.4])
        pos = (rng.random((n, 3)) * hi).astype(np.float32)
        solids = (((0.9, 0.24, 0.0), (1.02, 0.36, 0.4)),)
        for seq in range(10 ** 9):
            val = rng.random(n).astype(np.float32)
            yield FramePacket(seq=seq, step=seq, time=0.001 * seq, field_name="particles", kind="particles",
                              fields=("particles",), positions=pos, data=val, attribute="speed",
                              attributes=("speed", "pressure"), vmin=np.float32(0.01 * rng.random()),
                              vmax=np.float32(2 + 0.1 * rng.random()), bounds=((0, 0, 0), tuple(hi)),
                              radius=0.01, solids=solids, label="speed", units="m/s", time_units="s")
    ny, nx = 256, 512
    mask = np.zeros((ny, nx), bool)
    yy, xx = np.mgrid[:ny, :nx]
    mask[(yy - ny / 2) ** 2 + (xx - nx / 5) ** 2 < 20 ** 2] = True
    tracers = (rng.random((4000, 2)) * [nx, ny]).astype(np.float32)
    field = rng.random((ny, nx)).astype(np.float32)
    for seq in range(10 ** 9):
        yield FramePacket(seq=seq, step=seq, time=0.001 * seq, field_name="speed", kind="grid2d",
                          fields=("speed", "vorticity"), data=field, mask=mask, overlay=tracers,
                          vmin=np.float32(0.01 * rng.random()), vmax=np.float32(0.1 + 0.01 * rng.random()),
                          label="speed", units="lattice", time_units="s")


def measure(case: str, frames: int, warmup: int = 8, profile_out: str | None = None, verbose: bool = False,
            hud: bool = True, colorbar: bool = True, axes: bool = True) -> dict:
    global _GL_CALLS
    if _GL_CALLS is None:
        _GL_CALLS = GLCallCounter()
    gl_calls = _GL_CALLS
    from nagare.app.gui.canvas import FieldCanvas
    from nagare.app.gui.hud import Hud
    from vispy.gloo import gl

    canvas = FieldCanvas(size=(1280, 960), show=False, colorbar=colorbar, axes=axes)
    canvas.show()  # a hidden Qt canvas has no GL surface to draw into
    canvas.set_backend("numpy")
    if case == "sph-splat":
        _stub_splat(canvas)
    if case == "lbm2d-shared":
        canvas._upload_interop = lambda data, event, shape: None
        canvas.display_path = "interop"
    history = _history()
    status = "running · step 100 · 40 steps/s\nt = 0.1 s (frame on screen)"
    canvas.hud = None if not hud else Hud(canvas, lambda: (history, {}, status), lambda axis, choice: None)
    canvas.relayout()
    rng = np.random.default_rng(1)
    feed = _packets(case, rng)
    canvas.app.process_events()
    # drawn as bench_display draws (draw_now), Qt's own paint events left unprocessed: each frame once
    for _ in range(warmup):
        canvas.show_packet(next(feed))
        canvas.draw_now(finish=True)
    state = canvas.gl_state()
    ran = {"commands": 0, "uniforms": 0}
    inner = state._inner

    def counting(commands):
        ran["commands"] += len(commands)
        ran["uniforms"] += sum(1 for c in commands if c[0] == "UNIFORM")
        return inner(commands)

    state._inner = counting
    hud_s = [0.0]
    if canvas.hud is not None:
        hud_render = canvas.hud.render

        def timed_hud(*a, **k):
            t = time.perf_counter()
            try:
                return hud_render(*a, **k)
            finally:
                hud_s[0] += time.perf_counter() - t

        canvas.hud.render = timed_hud
    dropped0 = state.dropped
    packets = [next(feed) for _ in range(frames)]
    gl_calls.reset()
    t_total = t_finish = 0.0
    cpu = []
    for pk in packets:
        t, c = time.perf_counter(), time.thread_time()
        canvas.show_packet(pk)
        canvas.draw_now()
        canvas.shown_time()
        cpu.append(time.thread_time() - c)
        t1 = time.perf_counter()
        gl.glFinish()
        t_finish += time.perf_counter() - t1
        t_total += time.perf_counter() - t
    calls = dict(gl_calls.calls)
    names = dict(gl_calls.names)
    # hud_gl.LeanRenderer calls OpenGL's unwrapped entry points (not counted above): its own count
    lean_calls = getattr(canvas.hud.renderer, "gl_calls", None) if canvas.hud is not None else None
    if lean_calls is not None:
        calls["pyopengl"] = lean_calls * frames
    out = {"case": case, "frames": frames, "ms_per_frame": 1e3 * t_total / frames,
           "glFinish_ms": 1e3 * t_finish / frames,
           # the UI thread's own CPU time up to glFinish (Mesa rasterises on threads of its own)
           "ui_cpu_ms_median": 1e3 * float(np.median(cpu)),
           "hud_ms_per_frame": 1e3 * hud_s[0] / frames,
           "glir_commands": ran["commands"] / frames, "uniform_commands": ran["uniforms"] / frames,
           "dropped_by_state_filter": (state.dropped - dropped0) / frames,
           "GL calls (VisPy)": calls["vispy"] / frames, "GL calls (HUD)": calls["pyopengl"] / frames}
    if verbose:
        for (key, name), n in sorted(names.items(), key=lambda kv: -kv[1]):
            print(f"    {key:8s} {name:32s} {n / frames:6.2f}")
    prof = cProfile.Profile()
    prof.enable()
    for pk in [next(feed) for _ in range(frames)]:
        canvas.show_packet(pk)
        canvas.draw_now(finish=True)
        canvas.shown_time()
    prof.disable()
    stats = pstats.Stats(prof).stats
    out["python calls"] = sum(v[1] for v in stats.values()) / frames  # primitive calls included
    for label, (suffix, name) in COUNTED.items():
        out[label] = sum(v[0] for (f, _, fn), v in stats.items() if fn == name and f.endswith(suffix)) / frames
    if profile_out:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(SORT).print_stats(150)
        with open(profile_out, "w") as fh:
            fh.write(buf.getvalue())
    canvas.close()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", action="append", choices=["sph", "sph-splat", "lbm2d", "lbm2d-shared"])
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--app", default="pyqt6")
    p.add_argument("--sort", default="cumulative", help="the profile's order (cumulative, tottime)")
    p.add_argument("--no-hud", dest="hud", action="store_false", help="draw without the imgui HUD")
    p.add_argument("--no-colorbar", dest="colorbar", action="store_false", help="draw without the colour bar")
    p.add_argument("--no-axes", dest="axes", action="store_false", help="draw without the 2D axes")
    p.add_argument("--verbose", action="store_true", help="list the GL functions called per frame")
    p.add_argument("--profile", help="write the cProfile of the last case's counted frames here")
    a = p.parse_args(argv)
    import vispy

    vispy.use(app=a.app)
    global SORT
    SORT = a.sort
    for case in a.case or ["sph-splat", "lbm2d-shared"]:
        r = measure(case, a.frames, profile_out=a.profile, verbose=a.verbose, hud=a.hud, colorbar=a.colorbar,
                    axes=a.axes)
        print(f"{case:13s} " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in r.items() if k != "case"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
