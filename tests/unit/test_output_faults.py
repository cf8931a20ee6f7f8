"""A full disk (ENOSPC) and a file-size limit (EFBIG) at every write of every output writer.

The writers are found by walking the package's source for file writes (``open`` for writing,
``os.open`` with a write flag, ``os.pwrite``, ``h5py.File`` not read-only, ``savefig``, ``save``,
``write_atomic`` …): the function or class around each must be registered with
``nagare.engine.atomic.output_writer``, and a case below must make a fault fire inside it. So a
new writer cannot be added without being registered, and a registered writer cannot go untested.

Each case writes its outputs once (the previous version), then again with the n-th write operation
failing, for n = 1, 2, … until a run meets no write left to fail. After each: the failure was one
line naming the file, its cause and what is still there; every output is its previous version or
a complete new one (read back); no temporary or lock file is left. Faults are injected in
Python's I/O (``open``, ``os.open``/``write``/``pwrite``/``ftruncate``/``fsync``, ``h5py.File``),
half of the data written before the error, as a full disk does; HDF5's own writes are failed for
real by the file-size limit in tests/smoke/test_output_failures.py.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import csv
import errno
import functools
import io
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
PRIMITIVES = {"engine/atomic.py", "engine/outputlock.py"}  # the mechanism itself, tested directly below
WRITE_CALLS = {"write_atomic", "write_text_atomic", "fsync_and_replace", "write_bytes", "write_text", "savefig",
               "savez", "savez_compressed", "save", "get_writer", "pwrite", "ftruncate", "imwrite", "tofile"}


# ---- the walk --------------------------------------------------------------------------------
def _mode(call: ast.Call):
    for kw in call.keywords:
        if kw.arg in ("mode", "flags"):
            return kw.value
    return call.args[1] if len(call.args) > 1 else None


def _is_write(call: ast.Call) -> bool:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name in WRITE_CALLS:
        return True
    if name in ("open", "File"):
        if call.args and ast.unparse(call.args[0]) == "os.devnull":
            return False  # the null device: nothing is written anywhere (a closed pipe's stdout silenced)
        mode = _mode(call)
        if mode is None:
            return False
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
            return any(c in mode.value for c in "wax+")
        text = ast.unparse(mode)
        if isinstance(f, ast.Attribute) and ast.unparse(f.value) == "os":
            return any(x in text for x in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND"))
        return True  # a mode not written out: counted as a write
    return False


def _decorated_writer(top) -> bool:
    for d in getattr(top, "decorator_list", []):
        target = d.func if isinstance(d, ast.Call) else d
        if (target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)) == "output_writer":
            return True
    return False


@functools.cache
def write_sites() -> dict[str, list[str]]:
    """"nagare.app.x:Name" → the lines writing a file inside that top-level function or class."""
    sites: dict[str, list[str]] = {}
    hint = re.compile(r"open\(|File\(|\.save|savez|savefig|write_|pwrite|ftruncate|get_writer|imwrite|tofile|"
                      r"fsync_and_replace")
    for py in sorted([*ROOT.joinpath("app").rglob("*.py"), *ROOT.joinpath("engine").rglob("*.py")]):
        rel = py.relative_to(ROOT).as_posix()
        text = py.read_text(encoding="utf-8")
        if rel in PRIMITIVES or not hint.search(text):  # a file with none of these names writes nothing
            continue
        module = "nagare." + rel[:-3].replace("/", ".").removesuffix(".__init__")
        for top in ast.parse(text).body:
            for node in ast.walk(top):
                if isinstance(node, ast.Call) and _is_write(node):
                    key = f"{module}:{getattr(top, 'name', '<module level>')}"
                    sites.setdefault(key, []).append(f"{rel}:{node.lineno} ({ast.unparse(node.func)}); "
                                                     f"registered: {_decorated_writer(top)}")
    return sites


def test_every_file_write_is_inside_a_registered_output_writer():
    unregistered = {k: v for k, v in write_sites().items() if not v[0].endswith("registered: True")}
    assert not unregistered, ("these write files outside a function or class registered with @output_writer "
                              "(nagare.engine.atomic); register them and add a case to this file: "
                              + "; ".join(f"{k} at {v[0]}" for k, v in unregistered.items()))


# ---- the fault injector ------------------------------------------------------------------------
class Faults:
    """The n-th write operation under ``folder`` fails with ``code`` (half its data written first)."""

    def __init__(self, code: int, nth: int, folder: Path):
        self.code, self.nth, self.folder = code, nth, str(folder.resolve())
        self.ops = 0
        self.fired = False
        self.writers_hit: set[str] = set()

    def _mine(self, path) -> bool:
        """Under the case's folder; lock files excepted (a lock that cannot be made is not a failure: the
        write goes on unlocked, see engine/outputlock.py)."""
        try:
            real = os.path.realpath(os.fspath(path))
        except TypeError:
            return False
        return real.startswith(self.folder) and not real.endswith(".lock")

    def _fd_mine(self, fd: int) -> bool:
        try:
            return self._mine(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return False

    def op(self, partial=None) -> None:
        self.ops += 1
        if self.ops != self.nth:
            return
        self.fired = True
        frame = sys._getframe(1)
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if module.startswith("nagare."):
                self.writers_hit.add(f"{module}:{frame.f_code.co_qualname.split('.')[0]}")
            frame = frame.f_back
        if partial is not None:
            partial()
        raise OSError(self.code, os.strerror(self.code))

    @contextlib.contextmanager
    def installed(self):
        import h5py

        faults = self
        real_open, real_os_open = builtins.open, os.open
        real_write, real_pwrite, real_trunc, real_fsync = os.write, os.pwrite, os.ftruncate, os.fsync
        real_h5 = h5py.File

        class FaultFile:
            """Its first two writes may fail (the first and one after data went out: a later write of
            the same file takes the same path, and a PNG is written in hundreds of chunks)."""

            def __init__(self, fh):
                self._fh = fh
                self._writes = 0

            def write(self, data):
                self._writes += 1
                if self._writes <= 2:
                    faults.op(lambda: self._fh.write(data[: len(data) // 2]))
                return self._fh.write(data)

            def __getattr__(self, name):
                return getattr(self._fh, name)

            def __iter__(self):
                return iter(self._fh)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return self._fh.__exit__(*exc)

        def fake_open(file, mode="r", *args, **kwargs):
            if isinstance(file, int) or not any(c in mode for c in "wax+") or not faults._mine(file):
                return real_open(file, mode, *args, **kwargs)
            faults.op()
            return FaultFile(real_open(file, mode, *args, **kwargs))

        def fake_os_open(path, flags, *args, **kwargs):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND) and faults._mine(path):
                faults.op()
            return real_os_open(path, flags, *args, **kwargs)

        def fake_write(fd, data):
            if faults._fd_mine(fd):
                faults.op(lambda: real_write(fd, bytes(data[: len(data) // 2])))
            return real_write(fd, data)

        def fake_pwrite(fd, data, offset):
            if faults._fd_mine(fd):
                faults.op(lambda: real_pwrite(fd, bytes(data[: len(data) // 2]), offset))
            return real_pwrite(fd, data, offset)

        def fake_trunc(fd, size):
            if faults._fd_mine(fd):
                faults.op()
            return real_trunc(fd, size)

        def fake_fsync(fd):
            if faults._fd_mine(fd):
                faults.op()
            return real_fsync(fd)

        def fake_h5(name, mode="r", *args, **kwargs):
            if mode != "r" and faults._mine(name):
                faults.op()
            return real_h5(name, mode, *args, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(builtins, "open", fake_open)
            mp.setattr(io, "open", fake_open)
            mp.setattr(os, "open", fake_os_open)
            mp.setattr(os, "write", fake_write)
            mp.setattr(os, "pwrite", fake_pwrite)
            mp.setattr(os, "ftruncate", fake_trunc)
            mp.setattr(os, "fsync", fake_fsync)
            mp.setattr(h5py, "File", fake_h5)
            yield self


# ---- the cases: each writes its outputs into a folder; None, or the failure's line(s) ----------------
@dataclass
class Case:
    name: str
    writers: tuple  # the registered writers ("module:name") its faults must reach
    run: object  # folder -> None | str (the one line said about a failure)
    outputs: object  # folder -> the files it writes
    valid: object  # (folder, path) -> raises unless path is a complete output
    cached: bool = False  # a cache: a failure is silent by design


def _export(fn):
    """Run a writer that raises ExportError on failure: None, or its one line."""
    from nagare.engine.atomic import ExportError

    def run(folder):
        try:
            fn(folder)
        except ExportError as exc:
            return str(exc)
        return None
    return run


def _valid_npz(folder, p):
    with np.load(p) as z:
        assert z.files


def _valid_h5(folder, p):
    import h5py

    with h5py.File(p, "r") as f:
        assert "VTKHDF" in f


def _valid_png(folder, p):
    from PIL import Image

    with Image.open(p) as im:
        im.load()


def _valid_json(folder, p):
    json.loads(Path(p).read_text())


def _valid_text(folder, p):
    assert Path(p).read_text().endswith("\n")


def _valid_log(folder, p):
    rows = list(csv.reader(open(folder / "t.csv", newline="")))
    assert all(len(r) == len(rows[0]) for r in rows), rows
    doc = json.loads((folder / "t.json").read_text())
    assert len(doc["rows"]) == len(rows) - 1  # the same rows in both


@pytest.fixture(scope="module")
def engines():
    return make_engines()


def make_engines():
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    be = get_backend("numpy")
    d3 = create_engine(load_preset("diffusion3d", ["grid.nx=8", "grid.ny=8", "grid.nz=8"], "numpy"), be)
    c1 = create_engine(load_preset("compact-advection1d", ["grid.nx=32"], "numpy"), be)
    d3.step(2)
    return {"diffusion3d": d3, "compact": c1}


def _all_kinds():
    """One field of every kind a VTKHDF dump writes (and amr3d's octree)."""
    from nagare.app.vtkhdf_amr import OctreeLeaves
    from nagare.engine.fields import Boxes, Grid2D, Grid3D, Particles, Profile1D

    rng = np.random.default_rng(0)
    return {
        "rho": Grid2D(rng.random((6, 5), np.float32)),
        "u": Grid2D(rng.random((2, 6, 5), np.float32), kind="vector"),
        "phi": Grid3D(rng.random((4, 3, 2), np.float32)),
        "particles": Particles(rng.random((7, 3), np.float32), {"rho": rng.random(7, np.float32)}),
        "leaves": Boxes(np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32), np.array([0, 1])),
        "profile": Profile1D(np.linspace(0, 1, 9), np.zeros(9), np.ones(9)),
        "octree": OctreeLeaves(np.array([0, 1]), np.array([[0.0, 0, 0], [4.0, 0, 0]]), np.array([1.0, 0.5]), 3,
                               {"density": rng.random((2, 3, 3, 3), np.float32)}),
    }


A, E = "nagare.app.", "nagare.engine."
CASE_WRITERS = {  # case → the registered writers its faults reach (checked: the fault's stack holds them)
    "npz dump": (A + "headless:dump_fields",),
    "checkpoint": (E + "checkpoint:save_checkpoint",),
    "VTKHDF dump of every kind": (A + "vtkhdf:write_vtkhdf", A + "vtkhdf:write_vtkhdf_described",
                                  A + "vtkhdf:write_image",
                                  A + "vtkhdf:write_polydata_particles", A + "vtkhdf:write_polydata_boxes",
                                  A + "vtkhdf:write_polydata_profile", A + "vtkhdf_amr:write_overlapping_amr",
                                  A + "vtkhdf_format:new_file"),
    "frame": (A + "frames:save_png",),
    "app picture": (A + "gui.export:save_png",),
    "app legacy VTK": (A + "gui.export:write_vtk",),
    "text": (),
    "soak samples": (A + "soak:write_soak_json",),
    "display benchmark result": (A + "gui.bench_display:write_result",),
    "display benchmark profile": (A + "gui.bench_display:write_profile",),
    "stencil benchmark results": (E + "stencil.bench:write_results",),
    "scaling benchmark results": (E + "decomp.bench:write_scale_results",),
    "benchmark results": (A + "bench_report:bench_command",),
    "roofline plot": (A + "bench_report:roofline_plot",),
    "timing log": (A + "timinglog:TimingLog",),
    "series": (A + "vtkhdf_series:SeriesFile",),
    "app video": (A + "gui.export:VideoRecorder",),
    "auto-tuner cache": (E + "autotune.cache:TuneCache",),
    "bandwidth cache": (E + "device:_store_bandwidth_cache",),
    "screenshot": (A + "gui.screenshot:save_screenshot",),
}


def cases(engines) -> list[Case]:
    from nagare.app import bench_report, frames, headless, soak
    from nagare.app.gui import bench_display, export
    from nagare.app.timinglog import TimingLog
    from nagare.app.vtkhdf import write_vtkhdf
    from nagare.app.vtkhdf_series import FieldSeries
    from nagare.engine import device
    from nagare.engine.atomic import ExportError, write_text_atomic
    from nagare.engine.autotune.cache import TuneCache
    from nagare.engine.checkpoint import save_checkpoint
    from nagare.engine.decomp import bench as decomp_bench
    from nagare.engine.stencil import bench as stencil_bench

    d3, c1 = engines["diffusion3d"], engines["compact"]
    kinds = _all_kinds()
    img = np.zeros((8, 6, 4), np.uint8)
    out: list[Case] = []

    def add(name, run, files, valid, cached=False):
        out.append(Case(name, CASE_WRITERS[name], run, lambda f, files=files: [f / x for x in files], valid, cached))

    add("npz dump", _export(lambda f: headless.dump_fields(d3, f / "d.npz")), ["d.npz"], _valid_npz)
    add("checkpoint", _export(lambda f: save_checkpoint(d3.checkpoint(), f / "c.npz")), ["c.npz"], _valid_npz)
    vtk_files = ["v.vtkhdf", "v_phi.vtkhdf", "v_particles.vtkhdf", "v_leaves.vtkhdf", "v_profile.vtkhdf",
                 "v_octree.vtkhdf"]
    add("VTKHDF dump of every kind", _export(lambda f: write_vtkhdf(kinds, f / "v.vtkhdf", time=1.0, step=2)),
        vtk_files, _valid_h5)
    add("frame", _export(lambda f: frames.save_png(img[..., :3], f / "frame.png")), ["frame.png"], _valid_png)
    add("app picture", _export(lambda f: export.save_png(img, f / "view.png")), ["view.png"], _valid_png)
    add("app legacy VTK", _export(lambda f: export.write_vtk({"rho": kinds["rho"]}, f, "s")), ["s_rho.vtk"],
        lambda folder, p: export.read_vtk_structured_points(p))
    add("text", _export(lambda f: write_text_atomic(f / "n.txt", "note\n")), ["n.txt"], _valid_text)
    add("soak samples", _export(lambda f: soak.write_soak_json(f / "soak.json", {"status": 0}, [{"t_s": 0}])),
        ["soak.json"], _valid_json)
    add("display benchmark result", _export(lambda f: bench_display.write_result(f / "r.json", {"a": 1}, "# r\n")),
        ["r.json", "r.md"], lambda folder, p: (_valid_json if p.suffix == ".json" else _valid_text)(folder, p))

    def profile(f):
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        sum(range(10))
        prof.disable()
        bench_display.write_profile(f / "prof.txt", prof, 5)

    add("display benchmark profile", _export(profile), ["prof.txt"], _valid_text)

    def status_run(fn):
        def run(folder):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                status = fn(folder)
            lines = [ln for ln in err.getvalue().splitlines() if "cannot write" in ln]
            # exit 4 exactly when the end left something unwritten (a JSON written after a failed update is complete)
            assert (status == 4) == ("NOT WRITTEN" in err.getvalue()), (status, err.getvalue())
            return "\n".join(lines) or None
        return run

    add("stencil benchmark results", status_run(lambda f: stencil_bench.write_results(
        {"rows": []}, "| a |", str(f / "s.json"), str(f / "s.md"))), ["s.json", "s.md"],
        lambda folder, p: (_valid_json if p.suffix == ".json" else _valid_text)(folder, p))
    add("scaling benchmark results", status_run(lambda f: decomp_bench.write_scale_results(
        str(f / "scale.json"), "numpy", {"name": "cpu"}, [], "| a |")), ["scale.json", "scale.md"],
        lambda folder, p: (_valid_json if p.suffix == ".json" else _valid_text)(folder, p))

    def bench(folder):
        from nagare.engine.bench import BenchResult

        results = [BenchResult("64x64", {"kernel": "array"}, "default", True, steps=4, ms_per_step=1.0,
                               updates_per_s=1e6, gbytes_per_s=1.0, roofline_pct=10.0),
                   BenchResult("64x64", {"kernel": "array"}, "other", True, steps=4, ms_per_step=2.0,
                               updates_per_s=5e5, gbytes_per_s=0.5, roofline_pct=5.0)]

        def fake_run_bench(family, backend, on_result, **kw):
            for r in results:
                on_result(r)
            return results

        from nagare.engine.backend import get_backend

        def light_plot(results, bw, title, path):  # matplotlib's cost once per fault: the plot has its own case
            write_text_atomic(path, f"{title}: {len(results)} cells\n")

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(bench_report, "roofline_plot", light_plot)
            mp.setattr(bench_report, "run_bench", fake_run_bench)
            mp.setattr(bench_report, "copy_bandwidth", lambda backend: 1e10)
            return bench_report.bench_command("wave2d", get_backend("numpy"), str(folder), None, 0.01, ["nagare"])

    def valid_bench(folder, p):
        {".json": _valid_json, ".md": _valid_text, ".png": _valid_text}[p.suffix](folder, p)

    add("benchmark results", status_run(bench), ["wave2d.json", "wave2d.md", "wave2d-roofline.png"], valid_bench)

    def plot(folder):
        from nagare.engine.bench import BenchResult

        bench_report.roofline_plot([BenchResult("8x8", {}, "default", True, steps=1, gbytes_per_s=1.0)], 1e10, "t",
                                   folder / "roofline.png")

    add("roofline plot", _export(plot), ["roofline.png"], _valid_png)

    def timing_log(folder):
        log = TimingLog(c1, ["nagare", "test"], folder / "t.csv")
        for _ in range(3):
            c1.step(2)
            log.record(wait=True)
        log.close()
        return log.error

    add("timing log", timing_log, ["t.csv", "t.json"], _valid_log)

    def series(folder):
        s = FieldSeries(folder / "s.vtkhdf", 3)
        try:
            for _ in range(3):
                s.append(d3)
                d3.step(1)
        except ExportError as exc:
            return str(exc)
        return None

    add("series", series, ["s.vtkhdf"], _valid_h5)

    def video(folder):
        rec = export.VideoRecorder(folder / "v.mp4", fps=5)
        for k in range(3):
            rec.append(np.full((16, 16, 4), 40 * k, np.uint8))
        rec.close()

    add("app video", _export(video), ["v.mp4"], lambda folder, p: p.stat().st_size > 0)

    def tune_cache(folder):
        TuneCache(folder / "tune.json")._write({"k": {"v": 1}})

    add("auto-tuner cache", tune_cache, ["tune.json"], _valid_json, cached=True)
    add("bandwidth cache", lambda f: device._store_bandwidth_cache(f / "bw.json", {"cpu": {"bytes_per_s": 1.0}}),
        ["bw.json"], _valid_json, cached=True)

    try:
        from nagare.app.gui import screenshot
        from PyQt6.QtGui import QImage

        def shot(folder):
            q = QImage(8, 8, QImage.Format.Format_RGB32)
            q.fill(0)
            screenshot.save_screenshot(q, folder / "shot.png")

        add("screenshot", _export(shot), ["shot.png"], _valid_png)
    except ImportError:  # no Qt here: the walk still demands the case (and the test says which is missing)
        pass
    return out


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob(".*") if p.name.endswith(".lock") or ".tmp" in p.name]


CODES = (errno.ENOSPC, errno.EFBIG)


def drive(case: Case, base: Path) -> dict[int, set[str]]:
    """Every write operation of the case failed in turn, with ENOSPC and EFBIG alternately;
    returns the writers the faults of each hit. After a failure the outputs are the previous
    version or a complete new one: the next fault meets them as its previous version."""
    hit: dict[int, set[str]] = {code: set() for code in CODES}
    by_nth: dict[int, set[str]] = {}
    folder = base / case.name.replace(" ", "-")
    folder.mkdir()
    assert case.run(folder) is None, f"{case.name}: the clean run failed"
    for nth in range(1, 500):
        if not fault_once(case, folder, nth, CODES[nth % 2], hit, by_nth):
            break
    else:
        raise AssertionError(f"{case.name}: more than 500 write operations")
    for code in CODES:  # a writer the alternation gave one code only: its first write again, with the other
        for nth, writers in by_nth.items():
            if writers & (set(case.writers) - hit[code]):
                fault_once(case, folder, nth, code, hit, by_nth)
    return hit


def fault_once(case: Case, folder: Path, nth: int, code: int, hit: dict, by_nth: dict) -> bool:
    """The case run once with its nth write failing; False when it had no nth write."""
    before = {p: p.read_bytes() for p in case.outputs(folder)}
    faults = Faults(code, nth, folder)
    with faults.installed():
        said = case.run(folder)
    where = f"{case.name}, write {nth} failing with {errno.errorcode[code]}"
    if not faults.fired:
        assert said is None, f"{where}: failed with no fault: {said}"
        return False
    hit[code] |= faults.writers_hit
    by_nth[nth] = faults.writers_hit
    if said is not None:
        assert not case.cached, f"{where}: a cache's failure is silent"
        for line in said.splitlines():
            assert "Traceback" not in line and os.strerror(code) in line, f"{where}: {line}"
            assert any(p.name in line for p in before), f"{where}: names no output: {line}"
            assert any(w in line for w in ("kept", "keep", "left", "holds", "no step")), \
                f"{where}: does not say what is intact: {line}"
    for p, old in before.items():
        assert p.exists(), f"{where}: {p.name} is gone"
        if p.read_bytes() != old:
            try:
                case.valid(folder, p)
            except Exception as exc:
                raise AssertionError(f"{where}: {p.name} is neither the previous version nor complete: "
                                     f"{exc!r}") from None
    assert not _leftovers(folder), f"{where}: left {_leftovers(folder)}"
    return True


@pytest.fixture(scope="module")
def all_cases(engines):
    return {c.name: c for c in cases(engines)}


@pytest.mark.parametrize("name", sorted(CASE_WRITERS))
def test_a_full_disk_and_a_size_limit_at_every_write(name, all_cases, tmp_path):
    if name not in all_cases:
        pytest.skip(f"{name}: needs PyQt6")
    case = all_cases[name]
    hit = drive(case, tmp_path)
    for code in CODES:
        assert set(case.writers) <= hit[code], (f"{name}: no {errno.errorcode[code]} fault reached "
                                                f"{sorted(set(case.writers) - hit[code])}")


def test_every_registered_writer_has_a_fault_case():
    covered = {w for ws in CASE_WRITERS.values() for w in ws}
    missing = sorted(set(write_sites()) - covered)
    assert not missing, f"registered writers no case fails: {missing}; add a case to CASE_WRITERS and cases()"


# ---- the primitives themselves ----------------------------------------------------------------------
def test_write_atomic_keeps_the_previous_file_and_says_so(tmp_path):
    from nagare.engine.atomic import ExportError, write_atomic, write_text_atomic

    p = write_text_atomic(tmp_path / "a.txt", "old\n")

    def fail(tmp):
        tmp.write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(ExportError) as info:
        write_atomic(p, fail)
    assert str(info.value) == (f"cannot write {p}: the disk is full (No space left on device); "
                               "the previous a.txt is kept unchanged")
    assert p.read_text() == "old\n" and not _leftovers(tmp_path)
    with pytest.raises(ExportError, match="no b.txt was left"):
        write_atomic(tmp_path / "b.txt", fail)


def test_hdf5_errors_are_one_line_with_the_errno_s_words():
    from nagare.engine.atomic import describe_cause, is_write_failure

    text = ("Can't decrement id ref count (unable to close file, errno = 27, error message = 'File too large',\n"
            " buf = 0x5581, total write size = 4096)")
    exc = RuntimeError(text)
    assert is_write_failure(exc)
    assert describe_cause(exc) == "the file is larger than this process may write (ulimit -f) (File too large)"
    assert describe_cause(OSError(errno.ENAMETOOLONG, "File name too long")) == "File name too long"


def test_the_walk_counts_writes_but_not_the_null_device():
    def call(src):
        return ast.parse(src).body[0].value

    assert _is_write(call("os.open(path, os.O_WRONLY)")) and _is_write(call("open(p, 'w')"))
    assert not _is_write(call("os.open(os.devnull, os.O_WRONLY)")) and not _is_write(call("open(p)"))
