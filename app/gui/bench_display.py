"""Display overhead: simulation throughput with the live display on vs headless.

    PYOPENGL_PLATFORM=egl python -m nagare.app.gui.bench_display --backend cupy \\
        --out docs/benchmarks/display-overhead.json

Headless: the engine steps in ``run.steps_per_frame`` batches on its stream, nothing else (one
sync at the end). Display on: the app's :class:`SimulationWorker` runs the same engine in its
thread (snapshot + CUDA event + NaN check per displayed frame) while this (main) thread draws
the newest packet into a VisPy canvas at up to ``--fps`` frames per second (30, the app's cap),
paced as the main window paces it (a timer every 16 ms, frames on a fixed schedule: pacing.py),
with the imgui HUD on top as in the app (``--no-hud`` leaves it out), through CUDA–GL interop
where possible (``glFinish`` per frame, so the GL work is really done, not queued).
The ratio display/headless is the figure of merit; its headless reference is timed over the
same steps as the display run (:func:`headless_window`).

Besides the ratio it reports where the time goes: the mean/median/max draw time per frame and
frames/s (UI thread), the share of the worker's wall time spent publishing frames (snapshot +
NaN-check launch + stats + checkpoints) and how often the worker waited for the GPU to catch up
(run-ahead bound). ``--breakdown`` adds headless runs with the tracers off and with CUDA-graph
batching, which tell how much of a step is the LBM kernel and how much the rest.

Runs with VisPy's EGL backend (no display needed) or any other VisPy backend (``--app``).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import sys
import time
from pathlib import Path

import numpy as np
import vispy
from nagare.app.atomic import output_writer, write_text_atomic
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset, preset_names
from vispy.gloo import gl

from .canvas import FieldCanvas
from .hud import Hud
from .pacing import FramePacer, poll_interval
from .shared_texture import SharedTexture
from .view3d import Particles3DDrawer
from .worker import SimulationWorker


@output_writer("the display benchmark's result")
def write_result(path: Path, result: dict, markdown: str) -> None:
    """FILE.json and FILE.md, each whole or not at all (ExportError, one line)."""
    write_text_atomic(path, json.dumps(result, indent=1))
    write_text_atomic(path.with_suffix(".md"), markdown)


@output_writer("a profile of the display benchmark")
def write_profile(path, profiler, lines: int) -> None:
    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).sort_stats("cumulative").print_stats(lines)
    write_text_atomic(path, buf.getvalue())


def _default_case() -> tuple[str, list[str]]:
    if "lbm2d-cylinder" in preset_names():
        return "lbm2d-cylinder", ["grid.nx=2048", "grid.ny=2048"]
    return "diffusion3d", ["grid.nx=256", "grid.ny=256", "grid.nz=256"]


def headless_rate(preset, backend, seconds: float, variants: dict | None = None) -> float:
    eng = create_engine(preset, backend, variants=variants)
    spf = preset.run.steps_per_frame
    eng.step(spf)
    eng.synchronize()
    n0, t0 = eng.step_count, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        eng.step(spf)
        eng.timer.collect()  # what the worker does too: resolve finished events
    eng.synchronize()
    return (eng.step_count - n0) / (time.perf_counter() - t0)


def headless_window(preset, backend, n0: int, n1: int, variants: dict | None = None) -> float:
    """Headless steps/s over steps n0 → n1 of a fresh run (the steps before n0 untimed).

    The display run is measured over a window that starts after its warm-up; a flow whose cost
    per step changes as it develops (a dam break: faster water, more Verlet rebuilds) must be
    compared with the headless run over the same steps, not over its first seconds."""
    eng = create_engine(preset, backend, variants=variants)
    spf = preset.run.steps_per_frame
    while eng.step_count < n0:
        eng.step(min(spf, n0 - eng.step_count))
        eng.timer.collect()
    eng.synchronize()
    s0, t0 = eng.step_count, time.perf_counter()
    while eng.step_count < n1:
        eng.step(min(spf, n1 - eng.step_count))
        eng.timer.collect()
    eng.synchronize()
    return (eng.step_count - s0) / (time.perf_counter() - t0)


def _profiled_publish(worker, holder: list):
    """Wrap the worker's _publish in the cProfile profile holder[0] (it runs on the worker thread)."""
    inner = worker._publish

    def publish(*a, **k):
        prof = holder[0]
        prof.enable()
        try:
            return inner(*a, **k)
        finally:
            prof.disable()

    worker._publish = publish


class GpuTimeline:
    """GPU-side cost of the display: a timing event after every worker loop iteration (the
    engine's batch of steps plus what the worker queued with it). With the GPU kept busy (the
    worker runs ahead), the time between two events is what the GPU spent on that iteration,
    whatever else (the GL context, interop copies) it was switched to in between. Compared
    with the median iteration, the excess per drawn frame is the display's GPU cost, measured
    directly instead of as a difference of two noisy rates."""

    def __init__(self, worker):
        self.worker, self.events, self.on = worker, [], False
        inner = worker._fence

        def fence():
            inner()
            eng = worker.engine
            if self.on and eng.backend.is_gpu:
                ev = eng.xp.cuda.Event(block=False)
                ev.record(eng.stream)
                self.events.append(ev)

        worker._fence = fence

    def summary(self, frames: int) -> dict:
        if len(self.events) < 3:
            return {}
        self.events[-1].synchronize()
        cp = self.worker.engine.xp
        ms = np.array([cp.cuda.get_elapsed_time(a, b) for a, b in zip(self.events, self.events[1:])])
        base = float(np.median(ms))
        extra = ms - base
        return {"iterations": int(len(ms)), "iteration_ms_median": base,
                "iteration_ms_p90": float(np.quantile(ms, 0.9)), "iteration_ms_max": float(ms.max()),
                "gpu_excess_ms_per_frame": float(extra.sum() / frames) if frames else None,
                "iterations_over_0.2ms_per_frame": float((extra > 0.2).sum() / frames) if frames else None}


EXPERIMENTS = ("none", "publish-only", "draw-only", "no-overlay", "no-decor", "fixed-range", "no-field-copy",
               "no-cuda-copy", "no-gl-write")


def experiment_parts(text: str) -> set[str]:
    """The parts of ``--experiment`` (comma-separated, they combine); ValueError naming an unknown one."""
    parts = set(text.split(","))
    unknown = parts - set(EXPERIMENTS)
    if unknown:
        raise ValueError(f"unknown experiment {', '.join(sorted(unknown))}; known: {', '.join(EXPERIMENTS)}")
    return parts


def display_rate(preset, backend_name: str, seconds: float, fps: float, size=(1280, 960), hud: bool = True,
                 profile: Path | None = None, warmup: float = 3.0, worker_attrs: dict | None = None,
                 experiment: str = "none", profile_draw: Path | None = None, field_path: str = "auto",
                 timeline: bool = False, upload: str = "shared",
                 lod: bool = True, planes: str | None = None, leaves: bool | None = None) -> dict:
    canvas = FieldCanvas(size=size, show=False)
    canvas.set_backend(backend_name)
    view3d = {}
    if planes is not None:  # 3D grids: the slice planes shown ("x,z"; "" for none)
        on = set(filter(None, planes.split(",")))
        view3d["planes"] = {a: [a in on, 0.5] for a in "xyz"}
    if leaves is not None:  # 3D grids: the octree leaves around the volume
        view3d["boxes"] = leaves
    canvas.set_view3d(**view3d)
    canvas.shared_uploads = upload in ("shared", "shared-texture")
    canvas.buffer_sampling = upload == "shared"
    canvas.grid_lod = lod
    if field_path == "host":  # an experiment: the field through host memory even where interop works
        canvas.display_path, canvas.path_reason = "host", "forced by --field-path host"
    parts = experiment_parts(experiment)
    if "fixed-range" in parts:  # a fixed colour range: no range read back, the colour bar never changes
        canvas.set_range((-0.05, 0.05))
    if "no-field-copy" in parts:  # the field's texture is never written after the first frame
        canvas._upload_interop = lambda data, event, shape: None
    if parts & {"no-cuda-copy", "no-gl-write"}:  # one half of the shared buffers' upload left out
        SharedTexture.skip = frozenset(p.removeprefix("no-") for p in parts & {"no-cuda-copy", "no-gl-write"})
    if "no-decor" in parts:  # neither colour bar nor axes (their text and ticks)
        canvas.colorbar_on = canvas.axes_on = False
        canvas.relayout()
    if "no-overlay" in parts:  # the tracers are stepped but neither copied nor drawn
        canvas._upload_overlay = lambda pk: setattr(canvas.overlay, "visible", False)
    worker = SimulationWorker(preset, backend_name, display_interval=1.0 / fps)  # publishes at the cap, as the app's
    for key, value in (worker_attrs or {}).items():  # an experiment: e.g. diagnostics_interval=1e9
        setattr(worker, key, value)
    prof = None
    if profile is not None:
        prof = [cProfile.Profile()]
        _profiled_publish(worker, prof)
    draw_prof = None
    if profile_draw is not None:
        draw_prof = [cProfile.Profile()]
    tl = GpuTimeline(worker) if timeline else None
    worker.start()
    if hud:
        canvas.hud = Hud(canvas, lambda: (list(worker.history), {}, "bench"), lambda axis, choice: None)
    try:
        t_build = time.perf_counter()
        while worker.latest_packet() is None:  # engine built, kernels compiled, first frame
            errors = [n.text for n in worker.drain_notices() if n.kind == "error"]
            if errors or time.perf_counter() - t_build > 600:
                raise SystemExit(f"bench_display: the engine did not start: {errors or 'timeout'}")
            time.sleep(0.01)
        worker.send("play")
        while worker.engine.step_count < 2 * preset.run.steps_per_frame:
            time.sleep(0.005)
        frames, last_seq = 0, -1
        poll = poll_interval(fps)
        pacer = FramePacer(fps, poll)  # as the main window: a timer every poll, at most fps frames/s
        draw_ms = []

        def draw_loop(duration):
            nonlocal frames, last_seq
            t_start = time.perf_counter()
            while (now := time.perf_counter()) - t_start < duration:
                pk = worker.next_packet(last_seq)
                if pk is not None and pacer.due(now):
                    pacer.drawn(now)
                    last_seq = pk.seq
                    t_draw = time.perf_counter()
                    if "publish-only" not in parts:  # publish-only: the worker's side alone, no GL
                        if draw_prof is not None:
                            draw_prof[0].enable()
                        if "draw-only" not in parts or frames == 0:  # draw-only: GL without uploads
                            canvas.show_packet(pk)
                        t_draw = time.perf_counter()
                        canvas.draw_now(finish=True)
                        canvas.shown_time()  # the status line's time label, read every frame as the window does
                        if draw_prof is not None:
                            draw_prof[0].disable()
                    draw_ms.append((time.perf_counter() - t_draw) * 1e3)
                    frames += 1
                sleep = poll - (time.perf_counter() - now)
                if sleep > 0:
                    time.sleep(sleep)

        # Warm-up, as the headless run has one: the first frames compile CuPy's reduction kernels
        # for the publish path (range, diagnostics) and the HUD's GL programs — seconds, once.
        draw_loop(warmup)
        if prof is not None:
            prof[0] = cProfile.Profile()  # profile the measured window only
        if draw_prof is not None:
            draw_prof[0] = cProfile.Profile()
        frames, draw_ms[:] = 0, []
        n0, t0 = worker.engine.step_count, time.perf_counter()
        pub0, waits0, seq0 = worker.publish_s, worker.throttle_waits, worker._seq
        ck0, cks0 = worker.checkpoints_taken, worker.checkpoint_s
        hb0, hby0 = canvas.host_bytes.total, dict(canvas.host_bytes.by)
        glir0, hud_gl0 = _ui_counts(canvas)
        if tl is not None:
            tl.on = True
        draw_loop(seconds)
        if tl is not None:
            tl.on = False
        n1, t1 = worker.engine.step_count, time.perf_counter()
        pub1, waits1, seq1 = worker.publish_s, worker.throttle_waits, worker._seq
        ck1, cks1 = worker.checkpoints_taken, worker.checkpoint_s
        hb1 = canvas.host_bytes.total
        glir1, hud_gl1 = _ui_counts(canvas)
        host_by = {k: (v - hby0.get(k, 0)) / max(frames, 1) for k, v in canvas.host_bytes.by.items()
                   if v != hby0.get(k, 0)}
        vendor = f"{gl.glGetParameter(gl.GL_VENDOR)} / {gl.glGetParameter(gl.GL_RENDERER)}"
    finally:
        worker.stop()
    if prof is not None:
        write_profile(profile, prof[0], 40)
    if draw_prof is not None:
        write_profile(profile_draw, draw_prof[0], 45)
    draw_ms.sort()
    hud_state = None if canvas.hud is None else (canvas.hud.error or f"{canvas.hud.frames} frames")
    return {"steps_per_s": (n1 - n0) / (t1 - t0), "frames_per_s": frames / (t1 - t0), "steps_window": [n0, n1],
            "packets_per_s": (seq1 - seq0) / (t1 - t0),
            "display_path": canvas.display_path, "display_label": canvas.display_label,
            "path_reason": canvas.path_reason, "gl": vendor,
            "host_copies": canvas.host_copies, "interop_copies": getattr(canvas._interop, "copies", 0),
            # every device→host byte the display copied in the measured window, per drawn frame, and by what
            "host_bytes_per_frame": (hb1 - hb0) / frames if frames else None, "host_bytes_per_frame_by": host_by,
            "view3d": {"planes": sorted(canvas.view3d.active_planes()), "leaves": canvas.view3d.boxes},
            "interop_upload": type(canvas._interop).__name__ if canvas._interop is not None else None,
            # how the device geometry's vertex buffers were written (SharedVertexBuffer / BufferInterop)
            "vertex_upload": sorted({type(v.interop).__name__ for v in canvas.device_geometry.buffers.values()
                                     if v.interop is not None}),
            "field_drawn_from_buffer": bool(canvas.image.samples_buffer),
            "texture_shape": list(canvas._image_shape) if canvas._image_shape else None,
            "draw_ms_mean": sum(draw_ms) / len(draw_ms) if draw_ms else None,
            "draw_ms_median": draw_ms[len(draw_ms) // 2] if draw_ms else None,
            "draw_ms_max": draw_ms[-1] if draw_ms else None,
            "ui_busy_share": sum(draw_ms) * 1e-3 / (t1 - t0),
            "worker_publish_share": (pub1 - pub0) / (t1 - t0), "worker_gpu_waits": waits1 - waits0,
            # last-good checkpoints in the window: each one a synchronous copy of the state to the
            # host (≤ 1 % of a long run by design, but one in an 8 s window weighs more)
            "worker_checkpoints": ck1 - ck0, "worker_checkpoint_ms": (cks1 - cks0) * 1e3,
            # the UI thread's GL work a drawn frame: GLIR commands run and left out by the state
            # filter, and the HUD's GL calls (each a ctypes call that lets go of the GIL)
            "glir_commands_per_frame": (glir1[0] - glir0[0]) / frames if frames else None,
            "glir_dropped_per_frame": (glir1[1] - glir0[1]) / frames if frames else None,
            "hud_gl_calls_per_frame": (hud_gl1 - hud_gl0) / frames if frames and hud_gl1 is not None else None,
            "hud": hud_state, "gpu_timeline": tl.summary(frames) if tl is not None else None}


def _ui_counts(canvas) -> tuple[tuple[int, int], int | None]:
    """((GLIR commands run, left out) so far, the HUD's GL calls so far or None)."""
    f = canvas.gl_state()
    renderer = getattr(canvas.hud, "renderer", None)
    return (f.passed, f.dropped), getattr(renderer, "gl_calls_total", None)


def _breakdown(name, overrides, backend, seconds) -> dict:
    """Headless steps/s of variations of the case: where does a step's time go?"""
    out = {}
    cases = [("tracers off", overrides + ["tracers.count=0"], None),
             ("graph on", overrides, {"graph": "on"}),
             ("tracers off, graph on", overrides + ["tracers.count=0"], {"graph": "on"})]
    for label, ov, variants in cases:
        try:
            rate = headless_rate(load_preset(name, ov, backend=backend.name), backend, seconds, variants)
        except Exception as exc:  # a case this family/backend does not offer
            print(f"  headless, {label}: not run ({type(exc).__name__}: {str(exc)[:100]})", flush=True)
            continue
        out[label] = rate
        print(f"  headless, {label:22s} {rate:10.1f} steps/s", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m nagare.app.gui.bench_display", description=__doc__.splitlines()[0])
    p.add_argument("--preset")
    p.add_argument("--set", dest="overrides", action="append", default=None, metavar="KEY=VALUE")
    p.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--fps", type=float, default=30.0, help="frame cap of the drawing loop (the app's: 30)")
    p.add_argument("--no-hud", dest="hud", action="store_false", help="draw without the imgui HUD")
    p.add_argument("--breakdown", action="store_true",
                   help="also headless with the tracers off and with graph=on (5 s each)")
    p.add_argument("--app", default="egl", help="VisPy backend (egl: headless GPU; pyqt6 with a display)")
    p.add_argument("--out", type=Path, help="write the result as JSON (and .md beside it)")
    p.add_argument("--max-lag", type=float, help="override the worker's run-ahead bound (s) for an experiment")
    p.add_argument("--max-fences", type=int, help="override the worker's bound on queued loop iterations")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of display before measuring (compiles)")
    p.add_argument("--worker", dest="worker_attrs", action="append", default=[], metavar="NAME=SECONDS",
                   help="set a worker interval for an experiment (e.g. diagnostics_interval=1e9: no NaN checks)")
    p.add_argument("--experiment", default="none",
                   help="where does a frame's cost go (comma-separated, they combine): publish-only (packets "
                        "made, nothing drawn), draw-only (redraw without uploads), no-overlay (tracers not copied "
                        "or drawn), no-decor (no colour bar, no axes), fixed-range (no range read back, the colour "
                        "bar never changes), no-field-copy (the field texture not written after the first frame), "
                        "no-cuda-copy / no-gl-write (shared buffers: the device copy into the buffer, or GL's "
                        "buffer → texture write, left out)")
    p.add_argument("--profile-publish", type=Path, help="cProfile the worker's frame publishing into this file")
    p.add_argument("--profile-draw", type=Path, help="cProfile the UI thread's uploads and draws into this file")
    p.add_argument("--field-path", choices=["auto", "host"], default="auto",
                   help="experiment: 'host' draws the field through host memory even where interop works")
    p.add_argument("--timeline", action="store_true",
                   help="time every worker iteration on the GPU: the display's GPU cost per frame, directly")
    p.add_argument("--upload", choices=["shared", "shared-texture", "mapped"], default="shared",
                   help="interop route of a grid: a buffer shared by CUDA and GL that the image draws directly "
                        "(the app's default where the driver offers it), the same buffers copied by GL into the "
                        "texture, or the texture mapped for each copy")
    p.add_argument("--no-lod", dest="lod", action="store_false",
                   help="upload every cell of a field even where the view shows several cells a pixel")
    p.add_argument("--particles", choices=["splat", "sprites"], default="splat",
                   help="3D particles on the interop path: splatted by CUDA (default) or GL point sprites")
    p.add_argument("--planes", help="3D grids: the slice planes shown, e.g. x,z (default: the canvas' three)")
    p.add_argument("--leaves", action=argparse.BooleanOptionalAction, default=None,
                   help="3D grids: draw the octree leaves (amr3d) around the volume (default: on)")
    p.add_argument("--targets", action="store_true",
                   help="run issue 41's three cases in turn (1M-particle SPH dam break at a cap of 60, "
                        "amr3d-sphere-re100 with tracers, leaves and two planes at 30, lbm2d 2048² at 30); "
                        "--preset, --set and --fps are not used")
    p.add_argument("--switch-interval", type=float, metavar="SECONDS",
                   help="experiment: Python's thread switch interval (sys.setswitchinterval; 0.005 by default): "
                        "how long a thread waiting for the GIL (the UI after each GL call) waits for the other")
    a = p.parse_args(argv)
    if a.switch_interval is not None:
        sys.setswitchinterval(a.switch_interval)
    worker_attrs = {}
    for item in a.worker_attrs:
        key, _, value = item.partition("=")
        if not hasattr(SimulationWorker, key) and key != "checkpoint_interval":
            p.error(f"--worker {item}: the worker has no setting {key!r}")
        try:
            worker_attrs[key] = float(value)
        except ValueError:
            p.error(f"--worker {item}: {value!r} is not a number")
    if a.max_lag is not None or a.max_fences is not None:
        if a.max_lag is not None:
            SimulationWorker.max_lag_s = a.max_lag
        if a.max_fences is not None:
            SimulationWorker.max_fences = a.max_fences

    vispy.use(app=a.app)
    Particles3DDrawer.renderer = a.particles
    try:
        experiment_parts(a.experiment)  # before the headless run, not after it
    except ValueError as exc:
        p.error(str(exc))
    backend = get_backend(a.backend)
    if a.targets:
        cases = [dict(case) for case in TARGET_CASES]
    else:
        name, overrides = _default_case()
        if a.preset:
            name, overrides = a.preset, []
        cases = [dict(preset=name, overrides=a.overrides if a.overrides is not None else overrides, fps=a.fps,
                      planes=a.planes, leaves=a.leaves)]
    results = [run_case(a, backend, worker_attrs, **case) for case in cases]
    if a.out:
        info = backend.device_info().as_dict()
        head = (f"# Display overhead ({time.strftime('%Y-%m-%d')})\n\n{info.get('name')} · driver "
                f"{info.get('driver_version')} · CuPy {info.get('cupy_version')} · GL {results[0]['display']['gl']}\n\n"
                f"| case | cap | headless steps/s | display steps/s | frames/s | frames/s ÷ cap | path | ratio | "
                f"host bytes/frame |\n|---|---|---|---|---|---|---|---|---|\n")
        rows = "".join(_markdown_row(r) for r in results)
        for r in results:
            r.update(backend=backend.name, device=info, date=time.strftime("%Y-%m-%d"),
                     python=platform.python_version())
        write_result(a.out, results[0] if len(results) == 1 else {"cases": results}, head + rows)
        print(f"  written: {a.out}")
    return 0


# The frame-rate targets of issue 41, measured in one call (--targets): the 1M-particle SPH dam
# break at a cap of 60 (4 steps a frame: a batch of 8 takes ~31 ms, too long for 60 packets/s),
# amr3d's sphere with its tracers, their trails, the octree leaves and two planes at 30, and
# lbm2d at 2048² at 30.
TARGET_CASES = (
    {"preset": "sph-dambreak3d", "overrides": ["particles.dp=0.0048", "run.steps_per_frame=4"], "fps": 60.0},
    {"preset": "amr3d-sphere-re100", "overrides": [], "fps": 30.0, "planes": "x,z", "leaves": True},
    {"preset": "lbm2d-cylinder", "overrides": ["grid.nx=2048", "grid.ny=2048"], "fps": 30.0},
)


def _markdown_row(r: dict) -> str:
    d = r["display"]
    hb = d.get("host_bytes_per_frame")
    return (f"| {r['preset']} {' '.join(r['overrides'])} | {r['fps_cap']:g} | {r['headless_steps_per_s']:.1f} | "
            f"{d['steps_per_s']:.1f} | {d['frames_per_s']:.1f} | {d['frames_per_s'] / r['fps_cap']:.3f} | "
            f"{d['display_path']} | {r['ratio']:.3f} | {'—' if hb is None else f'{hb:.0f}'} |\n")


def run_case(a, backend, worker_attrs: dict, preset: str, overrides: list, fps: float,
             planes: str | None = None, leaves: bool | None = None) -> dict:
    """One case: headless from the start, the display run, headless over the display run's steps."""
    name = preset
    preset = load_preset(name, overrides, backend=backend.name)
    if preset.run.paced:  # the display's cost at full speed: a paced run is capped by design (Run ▸ Speed)
        preset = load_preset(name, [*overrides, "run.paced=false"], backend=backend.name)
    print(f"display overhead: {name} {' '.join(overrides)} on {backend.name}, cap {fps:g} frames/s, "
          f"{a.seconds:.0f} s each", flush=True)
    head_start = headless_rate(preset, backend, a.seconds)
    print(f"  headless      {head_start:10.1f} steps/s from the start", flush=True)
    breakdown = {}
    if a.breakdown:
        breakdown = _breakdown(name, overrides, backend, min(a.seconds, 5.0))
    disp = display_rate(preset, backend.name, a.seconds, fps, hud=a.hud, profile=a.profile_publish,
                        warmup=a.warmup, worker_attrs=worker_attrs, experiment=a.experiment,
                        profile_draw=a.profile_draw, field_path=a.field_path,
                        timeline=a.timeline, upload=a.upload, lod=a.lod, planes=planes, leaves=leaves)
    n0, n1 = disp["steps_window"]
    head = headless_window(preset, backend, n0, n1)  # the ratio's reference: the same steps
    print(f"  headless      {head:10.1f} steps/s over the display run's steps {n0}–{n1}", flush=True)
    ratio = disp["steps_per_s"] / head if head else float("nan")

    def ms(x):
        return "—" if x is None else f"{x:.1f}"
    print(f"  display on    {disp['steps_per_s']:10.1f} steps/s  ({disp['frames_per_s']:.1f} frames/s drawn of "
          f"{disp['packets_per_s']:.1f} published, {disp['frames_per_s'] / fps:.3f} of the cap; "
          f"path {disp['display_label']}, HUD {disp['hud']})")
    print(f"  draw/frame    mean {ms(disp['draw_ms_mean'])} ms, median {ms(disp['draw_ms_median'])} ms, "
          f"max {ms(disp['draw_ms_max'])} ms; UI thread busy drawing {100 * disp['ui_busy_share']:.1f} % of the time")
    if disp["glir_commands_per_frame"] is not None:
        hud_calls = disp["hud_gl_calls_per_frame"]
        print(f"  UI GL work    {disp['glir_commands_per_frame']:.0f} GLIR commands a frame run, "
              f"{disp['glir_dropped_per_frame']:.0f} left out as repeats"
              + ("" if hud_calls is None else f"; HUD {hud_calls:.0f} GL calls a frame"))
    hb = disp["host_bytes_per_frame"]
    print(f"  host bytes    {'—' if hb is None else f'{hb:.0f}'} a frame (device → host)"
          + (f", by what: {disp['host_bytes_per_frame_by']}" if disp["host_bytes_per_frame_by"] else ""))
    print(f"  worker        publishing {100 * disp['worker_publish_share']:.1f} % of the time, "
          f"waited for the GPU {disp['worker_gpu_waits']}×; {disp['worker_checkpoints']} last-good "
          f"checkpoint(s), {disp['worker_checkpoint_ms']:.0f} ms")
    if disp.get("gpu_timeline") and disp["gpu_timeline"].get("gpu_excess_ms_per_frame") is not None:
        g = disp["gpu_timeline"]
        print(f"  GPU timeline  iteration median {g['iteration_ms_median']:.3f} ms, p90 {g['iteration_ms_p90']:.3f}, "
              f"max {g['iteration_ms_max']:.3f}; excess {g['gpu_excess_ms_per_frame']:.3f} ms a frame, "
              f"{g['iterations_over_0.2ms_per_frame']:.2f} slow iterations a frame")
    print(f"  ratio         {ratio:10.3f}   (display steps/s over headless steps/s of the same steps)", flush=True)
    return {"preset": name, "overrides": overrides, "seconds": a.seconds, "fps_cap": fps,
            "headless_steps_per_s": head, "headless_steps_per_s_from_start": head_start, "display": disp,
            "headless_breakdown": breakdown, "ratio": ratio, "frames_per_s_over_cap": disp["frames_per_s"] / fps,
            "experiment": a.experiment, "particles": a.particles, "field_path": a.field_path,
            "upload": a.upload, "lod": a.lod}


if __name__ == "__main__":
    sys.exit(main())
