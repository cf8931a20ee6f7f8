"""Time series for ParaView: one temporal VTKHDF file per dataset, a step appended at a time.

``nagare run PRESET --series FILE.vtkhdf [--dump-every K]`` writes the engine's grids as one
temporal ``ImageData`` (every grid of one shape and spacing; others beside it as
``FILE_<field>.vtkhdf``, named as app/vtkhdf.py names them) and, for amr3d, the octree's leaves
with their point data as one temporal ``OverlappingAMR`` (``FILE_octree.vtkhdf``): the state at
the start, every K steps and at the end. ParaView opens each file as one dataset with a time axis
(the ``Steps`` group: ``NSteps``, ``Values`` and per-array offsets; VTKHDF 2.0 for ImageData, 2.3
for OverlappingAMR). Other field types (particles, profiles, the leaves' outlines) are not part of
a series.

Space is reserved when a file is created: every array is allocated for the whole run (``capacity``
steps, known from ``--steps`` and K) and written with zeros, inside a temporary file renamed into
place with the first step. Appending a step then never grows the file: it opens it, writes the
step's values and offsets into space no step refers to yet, flushes, raises ``Steps/NSteps`` (a
fixed-size attribute, rewritten in place: the commit), flushes, adds the step's time to
``Steps/Values`` — and for OverlappingAMR its ``AMRBoxOffsets`` and ``PointDataOffsets``, which like
Values must hold exactly NSteps rows (VTK 9.7's reader overruns a buffer when they hold more; their
one chunk is allocated with the first step) — and closes the file. So between steps
the file on disk is a complete, closed VTKHDF file, and a crash while a step is written loses that
step only (its values went to space no step refers to); a crash in the instant between NSteps and
its time leaves the step's values complete but its time read as 0 (and an OverlappingAMR
step's offsets missing, so ParaView may show another step's values for it). What HDF5 cannot promise: its
metadata writes are not atomic, so a kill in the middle of one of these small in-place writes is
not covered (HDF5's crash-proof SWMR mode makes files that need ``h5clear`` before VTK opens them
after a crash). A run stopped early (Ctrl-C, divergence) leaves the space of the steps it did not
reach unused.

A full disk is said once, when the file is created, before anything is written: the space a
series needs is checked against the free space of its folder (and the process's file-size limit).
This check matters beyond the message: HDF5 does not survive a failed write cleanly (a file whose
metadata could not be flushed stays half-open and the library can crash at exit). Any write that
fails anyway raises ExportError naming the file, the step and how many steps it keeps; the series
then stops (later steps are not attempted), the run goes on and ends with its "NOT WRITTEN"
summary and exit status 4.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np
from nagare.engine.fields import Grid2D, Grid3D

from .atomic import ExportError, describe_cause, free_bytes, make_folder, output_writer, write_atomic
from .fieldkinds import host_copies
from .fieldkinds.vtkio import safe_name
from .vtkhdf import _grid_key, _root, image_layout
from .vtkhdf_amr import OctreeLeaves, octree_leaves
from .vtkhdf_amr import _root as _amr_root
from .vtkhdf_format import h5py_module

MARGIN = 1 << 20  # bytes beyond the arrays a file needs (HDF5 metadata; a few kB in practice)


@output_writer("a VTKHDF time series")
class SeriesFile(ABC):
    """One temporal VTKHDF file of at most ``capacity`` steps. ``append(item, time)`` adds a step."""

    kind = ""

    def __init__(self, path: str | Path, capacity: int):
        if capacity < 1:
            raise ValueError("a series holds at least one step")
        self.path = Path(path)
        self.capacity = int(capacity)
        self.steps = 0  # steps on disk (the file's NSteps)
        self.layout = None  # what the first step fixed (names, shapes): later steps must match

    def append(self, item, time: float) -> Path:
        if self.steps >= self.capacity:
            raise ExportError(f"cannot write step {self.steps} of {self.path}: the series was made for "
                              f"{self.capacity} steps; {self._kept()}")
        try:
            if self.steps == 0:
                self.layout = self._layout(item)
                self._check_space()
                write_atomic(self.path, lambda tmp: self._create(tmp, item, time))
            else:
                self._check(item)
                with h5py_module().File(self.path, "r+") as f:
                    self._write_step(f["VTKHDF"], self.steps, item, time)
        except ExportError as exc:
            raise ExportError(f"{exc}; {self._kept()}") from None
        except (OSError, RuntimeError, KeyError, ValueError, IndexError) as exc:  # IndexError, KeyError: the
            # file was replaced or cut by another program (another run is refused by the output's lock)
            raise ExportError(f"cannot write step {self.steps} of {self.path}: {describe_cause(exc)}; "
                              f"{self._kept()}") from None
        self.steps += 1
        return self.path

    def _kept(self) -> str:
        if not self.steps:
            return "no step was written"
        return f"the file keeps the {self.steps} step{'s' if self.steps != 1 else ''} written before"

    def nbytes(self) -> int:
        """The file's size once created: every array for ``capacity`` steps (plus a margin)."""
        return MARGIN + self.capacity * (self._step_bytes() + 64)

    def _check_space(self) -> None:
        folder = self.path.parent
        try:
            make_folder(folder)
            free, what = free_bytes(folder)
        except OSError as exc:
            raise ExportError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        need = self.nbytes()
        if need > free:
            raise ExportError(f"cannot write {self.path}: {what}: a series of {self.capacity} steps "
                              f"needs {need / 1e6:,.1f} MB, {free / 1e6:,.1f} MB are free "
                              "(a larger --dump-every K writes fewer steps)")

    def _create(self, tmp: Path, item, time: float) -> None:
        with h5py_module().File(tmp, "w") as f:
            root = self._create_root(f)
            steps = root.create_group("Steps")
            steps.attrs["NSteps"] = np.int64(0)
            _growing(steps, "Values", self.capacity, np.float64)
            self._create_offsets(steps)
            self._write_step(root, 0, item, time)

    def _write_step(self, root, n: int, item, time: float) -> None:
        """Step n's values and offsets into reserved space, then NSteps = n + 1, then its time."""
        self._write_values(root, n, item)
        steps = root["Steps"]
        root.file.flush()  # the step's data on disk before it is announced
        steps.attrs.modify("NSteps", np.int64(n + 1))
        root.file.flush()
        for ds, value in ((steps["Values"], time), *self._after_commit(root, n)):
            ds.resize((n + 1,))
            ds[n] = value

    def _check(self, item) -> None:
        got = self._layout(item)
        if got != self.layout:
            raise ExportError(f"cannot write step {self.steps} of {self.path}: the fields changed "
                              f"({_describe(self.layout)} at the first step, now {_describe(got)})")

    # what a subclass says
    @abstractmethod
    def _layout(self, item) -> dict:
        ...

    @abstractmethod
    def _step_bytes(self) -> int:
        ...

    @abstractmethod
    def _create_root(self, f):
        ...

    @abstractmethod
    def _create_offsets(self, steps) -> None:
        ...

    @abstractmethod
    def _write_values(self, root, n: int, item) -> None:
        ...

    def _after_commit(self, root, n: int) -> list:
        """(dataset, value) of the step's entries in datasets that must hold exactly NSteps rows."""
        return []


def _growing(group, name: str, capacity: int, dtype) -> None:
    """A dataset of one row a step that must hold exactly NSteps rows: VTK 9.7's reader overruns a
    buffer when ``Steps/Values``, ``AMRBoxOffsets`` or ``PointDataOffsets`` (OverlappingAMR) hold
    more. One chunk for every step, allocated with the first: growing it allocates nothing."""
    group.create_dataset(name, shape=(0,), maxshape=(capacity,), chunks=(capacity,), dtype=dtype)


def _describe(layout: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in layout.items() if k != "attrs")


def _reserved(group, name: str, shape: tuple, dtype) -> None:
    """A contiguous dataset of ``shape`` written with zeros row by row (space taken on disk now)."""
    ds = group.create_dataset(name, shape=shape, dtype=dtype)
    row = np.zeros(shape[1:], dtype)
    step = max(1, (1 << 24) // max(1, row.nbytes))  # ≈16 MB a write
    for i in range(0, shape[0], step):
        j = min(shape[0], i + step)
        ds[i:j] = np.broadcast_to(row, (j - i, *row.shape))


def _series_image(grids: dict) -> tuple[dict, dict]:
    """image_layout, with 2D grids as one cell thick in z (extent 0…1, arrays (time, 1, y, x[, 3])):
    VTK 9.7's reader cannot read a temporal ImageData whose z extent is 0 (it reads past the
    arrays; checked with (time, y, x) and (time, 1, y, x) arrays)."""
    attrs, arrays = image_layout(grids)
    if attrs["WholeExtent"][5] == 0:
        attrs["WholeExtent"] = attrs["WholeExtent"].copy()
        attrs["WholeExtent"][5] = 1
        arrays = {k: a[None] for k, a in arrays.items()}
    return attrs, arrays


class ImageSeries(SeriesFile):
    """Grids of one shape and spacing as a temporal ImageData: every cell array has a leading time
    axis (capacity, z, y, x[, 3]); ``Steps/CellDataOffsets/<name>`` is the step's index on it."""

    kind = "ImageData"

    def _layout(self, grids: dict) -> dict:
        attrs, arrays = _series_image(grids)
        return {"attrs": {k: tuple(np.ravel(v).tolist()) for k, v in attrs.items()},
                **{k: (a.shape, a.dtype.str) for k, a in arrays.items()}}

    def _arrays(self):
        return {k: v for k, v in self.layout.items() if k != "attrs"}

    def _step_bytes(self) -> int:
        return sum(int(np.prod(s)) * np.dtype(d).itemsize + 8 for s, d in self._arrays().values()) + 8

    def _create_root(self, f):
        root = _root(f, "ImageData")
        for k, v in self.layout["attrs"].items():
            root.attrs[k] = np.array(v, np.int64 if k == "WholeExtent" else np.float64)
        cd = root.create_group("CellData")
        for name, (shape, dtype) in self._arrays().items():
            _reserved(cd, name, (self.capacity, *shape), np.dtype(dtype))
        root.create_group("PointData")
        root.create_group("FieldData")
        return root

    def _create_offsets(self, steps) -> None:
        off = steps.create_group("CellDataOffsets")
        for name in self._arrays():
            off.create_dataset(name, data=np.zeros(self.capacity, np.int64))

    def _write_values(self, root, n: int, grids: dict) -> None:
        _attrs, arrays = _series_image(grids)
        for name, a in arrays.items():
            root["CellData"][name][n] = a
            root["Steps"]["CellDataOffsets"][name][n] = n


class AMRSeries(SeriesFile):
    """The octree as a temporal OverlappingAMR. The leaves of every step are those of the first
    (amr3d's tree is fixed by its preset): per level, step n's boxes are rows [n·b, (n+1)·b) of
    ``AMRBox`` and its points rows [n·b·m³, (n+1)·b·m³) of every ``PointData`` array;
    ``Steps/Level<l>`` holds ``AMRBoxOffsets``, ``NumberOfAMRBoxes`` and
    ``PointDataOffsets/<name>`` (in points) per step."""

    kind = "OverlappingAMR"

    def _layout(self, t: OctreeLeaves) -> dict:
        return {"levels": t.n_levels, "h0": t.level0_spacing, "m": t.m,
                "boxes": tuple(int(np.sum(t.level == lv)) for lv in range(t.n_levels)),
                "arrays": tuple((safe_name(k), np.asarray(a).shape[4:]) for k, a in t.arrays.items())}

    def _step_bytes(self) -> int:
        lay = self.layout
        leaves = sum(lay["boxes"])
        comps = sum(int(np.prod(c)) for _n, c in lay["arrays"])
        return leaves * (48 + 4 * comps * lay["m"] ** 3) + lay["levels"] * (16 + 8 * len(lay["arrays"]))

    def _create_root(self, f):
        lay, cap = self.layout, self.capacity
        root = _amr_root(f)
        for lv in range(lay["levels"]):
            g = root.create_group(f"Level{lv}")
            g.attrs["Spacing"] = np.full(3, lay["h0"] / 2.0**lv)
            nb = lay["boxes"][lv]
            _reserved(g, "AMRBox", (cap * nb, 6), np.int64)
            pd = g.create_group("PointData")
            for name, comp in lay["arrays"]:
                _reserved(pd, name, (cap * nb * lay["m"] ** 3, *comp), np.float32)
            g.create_group("CellData")
            g.create_group("FieldData")
        return root

    def _create_offsets(self, steps) -> None:
        for lv in range(self.layout["levels"]):
            g = steps.create_group(f"Level{lv}")
            g.create_dataset("NumberOfAMRBoxes", data=np.zeros(self.capacity, np.int64))
            _growing(g, "AMRBoxOffsets", self.capacity, np.int64)
            pdo = g.create_group("PointDataOffsets")
            for name, _comp in self.layout["arrays"]:
                _growing(pdo, name, self.capacity, np.int64)

    def _write_values(self, root, n: int, t: OctreeLeaves) -> None:
        m3 = self.layout["m"] ** 3
        for lv in range(self.layout["levels"]):
            g, s = root[f"Level{lv}"], root["Steps"][f"Level{lv}"]
            nb = self.layout["boxes"][lv]
            if nb:
                g["AMRBox"][n * nb:(n + 1) * nb] = t.boxes(lv)
                for name, a in t.point_data(lv).items():
                    g["PointData"][safe_name(name)][n * nb * m3:(n + 1) * nb * m3] = a
            s["NumberOfAMRBoxes"][n] = nb

    def _after_commit(self, root, n: int) -> list:
        m3, out = self.layout["m"] ** 3, []
        for lv in range(self.layout["levels"]):
            s, nb = root["Steps"][f"Level{lv}"], self.layout["boxes"][lv]
            out.append((s["AMRBoxOffsets"], n * nb))
            out += [(s["PointDataOffsets"][name], n * nb * m3) for name, _comp in self.layout["arrays"]]
        return out


class FieldSeries:
    """Every dataset of an engine's series: grids grouped by shape and spacing as app/vtkhdf.py
    groups them (the first group at ``path``, the others as ``stem_<field>.vtkhdf``) and the octree
    (``stem_octree.vtkhdf``) when the engine has one, each made for ``capacity`` steps.
    ``append(engine)`` adds the engine's current state to each; the first failure stops the
    series (see the module doc)."""

    def __init__(self, path: str | Path, capacity: int):
        self.path = Path(path)
        self.capacity = int(capacity)
        self.stem = self.path.name[: -len(".vtkhdf")] if self.path.name.endswith(".vtkhdf") else self.path.stem
        self.files: dict[str, SeriesFile] = {}  # fixed at the first step
        self.failed: str | None = None

    def _datasets(self, engine) -> dict:
        fields = host_copies(engine)
        groups: dict = {}
        for k, f in fields.items():
            if isinstance(f, (Grid2D, Grid3D)):
                groups.setdefault(_grid_key(f), {})[k] = f
        out = {}
        for n, group in enumerate(groups.values()):
            out["" if n == 0 else safe_name(next(iter(group)))] = group
        t = octree_leaves(engine)
        if t is not None:
            out["octree"] = t
        return out

    def _file(self, key: str, item) -> SeriesFile:
        if key not in self.files:
            path = self.path if key == "" else self.path.with_name(f"{self.stem}_{key}.vtkhdf")
            cls = AMRSeries if isinstance(item, OctreeLeaves) else ImageSeries
            self.files[key] = cls(path, self.capacity)
        return self.files[key]

    def append(self, engine) -> Path | None:
        """Add the engine's current state as the next step of every file (ExportError once, on the
        first failure; later calls do nothing)."""
        if self.failed is not None:
            return None
        try:
            data = self._datasets(engine)
            if not data:
                raise ExportError(f"cannot write {self.path}: the {engine.family} engine has no grid or octree "
                                  "field (particles and profiles are not part of a series)")
            if self.files and set(data) != set(self.files):
                raise ExportError(f"cannot write {self.path}: the engine's fields changed "
                                  f"({sorted(self.files)} at the first step, now {sorted(data)})")
            for key, item in data.items():
                self._file(key, item).append(item, float(engine.time))
        except ExportError as exc:
            self.failed = str(exc)
            raise ExportError(f"{exc} (the series stops here)") from None
        return self.path

    @property
    def paths(self) -> list[Path]:
        return [f.path for f in self.files.values() if f.steps]


def series_capacity(steps: int, every: int) -> int:
    """Steps a run of ``steps`` steps writes with a series step every ``every``: the start, each
    multiple of ``every`` and the end."""
    return steps // every + 1 + (1 if steps % every else 0)
