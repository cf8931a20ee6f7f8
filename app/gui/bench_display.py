"""Display overhead: simulation throughput with the live display on vs headless.

    PYOPENGL_PLATFORM=egl python -m nagare.app.gui.bench_display --backend cupy \\
        --out docs/benchmarks/display-overhead.json

Headless: the engine steps in ``run.steps_per_frame`` batches on its stream, nothing else (one
sync at the end). Display on: the app's :class:`SimulationWorker` runs the same engine in its
thread (snapshot + CUDA event + NaN check per displayed frame) while this (main) thread draws
the newest packet into a VisPy canvas at up to ``--fps`` frames per second, through CUDA–GL
interop where possible (``glFinish`` per frame, so the GL work is really done, not queued).
The ratio display/headless is the figure of merit (target ≥ 0.95 at 2048² D2Q9).

Runs with VisPy's EGL backend (no display needed) or any other VisPy backend (``--app``).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path


def _default_case() -> tuple[str, list[str]]:
    from nagare.engine.presets import preset_names

    if "lbm2d-cylinder" in preset_names():
        return "lbm2d-cylinder", ["grid.nx=2048", "grid.ny=2048"]
    return "diffusion3d", ["grid.nx=256", "grid.ny=256", "grid.nz=256"]


def headless_rate(preset, backend, seconds: float) -> float:
    from nagare.engine.families import create_engine

    eng = create_engine(preset, backend)
    spf = preset.run.steps_per_frame
    eng.step(spf)
    eng.synchronize()
    n0, t0 = eng.step_count, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        eng.step(spf)
        eng.timer.collect()  # what the worker does too: resolve finished events
    eng.synchronize()
    return (eng.step_count - n0) / (time.perf_counter() - t0)


def display_rate(preset, backend_name: str, seconds: float, fps: float, size=(1280, 960)) -> dict:
    from vispy.gloo import gl

    from .canvas import FieldCanvas
    from .worker import SimulationWorker

    canvas = FieldCanvas(size=size, show=False)
    canvas.set_backend(backend_name)
    worker = SimulationWorker(preset, backend_name).start()
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
        n0, t0 = worker.engine.step_count, time.perf_counter()
        frames, last_seq, period = 0, -1, 1.0 / fps
        draw_ms = []
        while (now := time.perf_counter()) - t0 < seconds:
            pk = worker.latest_packet()
            if pk is not None and pk.seq != last_seq and pk.ready():
                last_seq = pk.seq
                canvas.show_packet(pk)
                t_draw = time.perf_counter()
                canvas.draw_now(finish=True)
                draw_ms.append((time.perf_counter() - t_draw) * 1e3)
                frames += 1
            sleep = period - (time.perf_counter() - now)
            if sleep > 0:
                time.sleep(sleep)
        n1, t1 = worker.engine.step_count, time.perf_counter()
        vendor = f"{gl.glGetParameter(gl.GL_VENDOR)} / {gl.glGetParameter(gl.GL_RENDERER)}"
    finally:
        worker.stop()
    draw_ms.sort()
    return {"steps_per_s": (n1 - n0) / (t1 - t0), "frames_per_s": frames / (t1 - t0),
            "display_path": canvas.display_path, "path_reason": canvas.path_reason, "gl": vendor,
            "host_copies": canvas.host_copies, "interop_copies": getattr(canvas._interop, "copies", 0),
            "draw_ms_median": draw_ms[len(draw_ms) // 2] if draw_ms else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m nagare.app.gui.bench_display", description=__doc__.splitlines()[0])
    p.add_argument("--preset")
    p.add_argument("--set", dest="overrides", action="append", default=None, metavar="KEY=VALUE")
    p.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--fps", type=float, default=60.0)
    p.add_argument("--app", default="egl", help="VisPy backend (egl: headless GPU; pyqt6 with a display)")
    p.add_argument("--out", type=Path, help="write the result as JSON (and .md beside it)")
    a = p.parse_args(argv)

    import vispy

    vispy.use(app=a.app)
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    name, overrides = _default_case()
    if a.preset:
        name, overrides = a.preset, []
    overrides = a.overrides if a.overrides is not None else overrides
    backend = get_backend(a.backend)
    preset = load_preset(name, overrides, backend=backend.name)
    print(f"display overhead: {name} {' '.join(overrides)} on {backend.name}, {a.seconds:.0f} s each", flush=True)
    head = headless_rate(preset, backend, a.seconds)
    print(f"  headless      {head:10.1f} steps/s", flush=True)
    disp = display_rate(preset, backend.name, a.seconds, a.fps)
    ratio = disp["steps_per_s"] / head if head else float("nan")
    print(f"  display on    {disp['steps_per_s']:10.1f} steps/s  ({disp['frames_per_s']:.1f} frames/s, "
          f"path {disp['display_path']}, draw {disp['draw_ms_median']} ms)")
    print(f"  ratio         {ratio:10.3f}   (target ≥ 0.95)")
    if a.out:
        info = backend.device_info().as_dict()
        result = {"preset": name, "overrides": overrides, "backend": backend.name, "device": info,
                  "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                  "seconds": a.seconds, "fps_cap": a.fps, "headless_steps_per_s": head, "display": disp,
                  "ratio": ratio}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1))
        a.out.with_suffix(".md").write_text(
            f"# Display overhead ({result['date']})\n\n{info.get('name')} · driver {info.get('driver_version')} · "
            f"CuPy {info.get('cupy_version')} · GL {disp['gl']}\n\n"
            f"| case | headless steps/s | display steps/s | frames/s | path | ratio |\n|---|---|---|---|---|---|\n"
            f"| {name} {' '.join(overrides)} | {head:.1f} | {disp['steps_per_s']:.1f} | "
            f"{disp['frames_per_s']:.1f} | {disp['display_path']} | {ratio:.3f} |\n")
        print(f"  written: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
