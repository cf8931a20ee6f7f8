"""ParaView files through a standard library: VTKHDF (VTK's HDF5 format) written with h5py.

- grids (Grid2D / Grid3D) → one ``ImageData`` file: every grid of one shape and spacing as a
  CellData array (cell (i, j, k) covers [i, i+1)·h, as on screen), vectors with 3 components,
  the solid mask as ``solid`` (uint8);
- particles → ``PolyData`` with one vertex per particle and every attribute as PointData;
- boxes (octree leaves) → ``PolyData`` lines (12 edges per leaf) with the ``level`` as CellData;
- an octree's leaves with their point data (amr3d, app/vtkhdf_amr.py) → ``OverlappingAMR``.

One file per dataset: the grids go to the path asked for, the others beside it
(``stem_<field>.vtkhdf``). Every file carries the run's ``time`` and ``step`` as FieldData (as an
.npz dump does), and arrays are named by the field's name, as in the .npz. VTKHDF 2.x is read by
VTK ≥ 9.3 (vtkHDFReader) and ParaView ≥ 5.12
(tests/app/test_vtkhdf.py reads every kind back with VTK's own reader). Time series (one file
with a ``Steps`` group, appended a step at a time): app/vtkhdf_series.py. Commands: docs/export.md.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from nagare.engine.fields import Boxes, Grid2D, Grid3D, Particles, Profile1D

from . import vtkhdf_amr  # the octree's OverlappingAMR writer (registered on import) and OctreeLeaves
from .atomic import ExportError, output_writer, write_atomic
from .fieldkinds import FieldTypeError, lookup, register
from .fieldkinds.boxes import box_segments
from .fieldkinds.vtkio import safe_name
from .vtkhdf_format import field_data, h5py_module, new_file

VERSION = (2, 2)


def _root(f, kind: str):
    root = f.create_group("VTKHDF")
    root.attrs["Version"] = np.array(VERSION, np.int64)
    t = kind.encode("ascii")
    root.attrs.create("Type", t, dtype=h5py_module().string_dtype("ascii", len(t)))
    return root


def _grid_key(f):
    """(shape, spacing) of a grid field: grids that share it go into one ImageData. Reads the
    array's shape only, so a device array is not copied (the run's output plan asks before step 1)."""
    shape = tuple(f.data.shape)
    shape = shape[1:] if f.kind == "vector" else shape
    return tuple(int(n) for n in shape), float(f.spacing)


def stem_of(path: Path) -> str:
    return path.name[: -len(".vtkhdf")] if path.name.endswith(".vtkhdf") else path.stem


def vtkhdf_targets(fields: dict, path: str | Path, series: bool = False) -> dict[str, Path]:
    """Field name (of the first in a group of grids) → the file it goes to, for ``write_vtkhdf``
    (``series``: app/vtkhdf_series.py, grids and the octree only). The first grid group goes to
    ``path``, everything else to ``stem_<field>.vtkhdf`` beside it (the octree: ``stem_octree``)."""
    path = Path(path)
    stem = stem_of(path)
    out: dict[str, Path] = {}
    groups: dict = {}
    for k, g in fields.items():
        if isinstance(g, (Grid2D, Grid3D)):
            groups.setdefault(_grid_key(g), []).append(k)
    for n, names in enumerate(groups.values()):
        out[names[0]] = path if n == 0 else path.with_name(f"{stem}_{safe_name(names[0])}.vtkhdf")
    for k, f in fields.items():
        if isinstance(f, (Grid2D, Grid3D)) or (series and k != "octree"):
            continue
        # a series names its octree file stem_octree always (app/vtkhdf_series.py)
        out[k] = path if not out and not series else path.with_name(f"{stem}_{safe_name(k)}.vtkhdf")
    return out


def image_layout(grids: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """Grids of one shape (ny, nx) or (nz, ny, nx) and spacing → (the ImageData root attributes,
    name → float32 (float64 for double data) cell array (vectors as (…, 3), x fastest), plus
    ``solid`` (uint8) when a grid has a mask). Shared by the one-file writer and the time series
    (app/vtkhdf_series.py)."""
    first = next(iter(grids.values()))
    shape, h = _grid_key(first)
    dims = tuple(reversed(shape)) + (1,) * (3 - len(shape))  # x, y, z cells
    # node-centred samples (amr3d: values at the points i·h) are written as cells centred on their
    # points (origin −h/2), so they line up with the leaves and the octree files in ParaView
    origin = np.full(3, -0.5 * h) if getattr(first, "centering", "cell") == "node" else np.zeros(3)
    if len(shape) == 2:
        origin[2] = 0.0
    # where the field's cell (0, 0) starts (Grid2D.origin: a domain on [-1, 1]² starts at -1 - h/2 when
    # its samples are the nodes -1 + i·h), as the view draws it
    shift = getattr(first, "origin", None)
    if shift is not None:
        origin[:len(shift)] += np.asarray(shift, np.float64)
    attrs = {"WholeExtent": np.array([0, dims[0], 0, dims[1], 0, dims[2] if len(shape) == 3 else 0], np.int64),
             "Origin": origin, "Spacing": np.array([h, h, h]), "Direction": np.eye(3).ravel()}
    arrays: dict[str, np.ndarray] = {}
    mask = None
    for name, g in grids.items():
        data = np.asarray(g.data)
        if g.kind == "vector":
            comps = [data[i] for i in range(data.shape[0])]
            while len(comps) < 3:
                comps.append(np.zeros_like(comps[0]))
            arr = np.stack(comps, axis=-1)  # (…, 3): x fastest per point
        else:
            arr = data
        # double precision stays double (an fp64 run's fields), anything else is written as float32
        arrays[safe_name(name)] = np.ascontiguousarray(arr, np.float64 if arr.dtype == np.float64 else np.float32)
        if mask is None and g.mask is not None:
            mask = np.asarray(g.mask, np.uint8)
    if mask is not None:
        arrays["solid"] = mask
    return attrs, arrays


def label_dataset(ds, field) -> None:
    """The field's label and units (what the app's colour bar says, as an .npz dump's ``field_labels``)
    as HDF5 attributes of its array: VTK's reader ignores them, h5py and scripts read them."""
    if field is None:
        return
    for key in ("label", "units"):
        value = getattr(field, key, "") or ""
        if value:
            ds.attrs[key] = value


@output_writer("a VTKHDF file")
def write_image(grids: dict, tmp, meta: dict | None = None) -> None:
    """Grids of one shape (ny, nx) or (nz, ny, nx) and spacing as one ImageData."""
    attrs, arrays = image_layout(grids)
    with new_file(tmp) as f:
        root = _root(f, "ImageData")
        for k, v in attrs.items():
            root.attrs[k] = v
        cd = root.create_group("CellData")
        described = {safe_name(name): g for name, g in grids.items()}
        for name, a in arrays.items():
            ds = cd.create_dataset(name, data=a)
            label_dataset(ds, described.get(name))
        root.create_group("PointData")
        field_data(root, meta)


def _empty_topology(root, name: str) -> None:
    g = root.create_group(name)
    g.create_dataset("NumberOfConnectivityIds", data=np.array([0], np.int64))
    g.create_dataset("NumberOfCells", data=np.array([0], np.int64))
    g.create_dataset("Offsets", data=np.array([0], np.int64))
    g.create_dataset("Connectivity", data=np.zeros(0, np.int64))


def _topology(root, name: str, n_cells: int, per_cell: int) -> None:
    g = root.create_group(name)
    g.create_dataset("NumberOfConnectivityIds", data=np.array([n_cells * per_cell], np.int64))
    g.create_dataset("NumberOfCells", data=np.array([n_cells], np.int64))
    g.create_dataset("Offsets", data=np.arange(n_cells + 1, dtype=np.int64) * per_cell)
    g.create_dataset("Connectivity", data=np.arange(n_cells * per_cell, dtype=np.int64))


def _points3(pos) -> np.ndarray:
    pos = np.asarray(pos, np.float32)
    if pos.shape[1] == 2:
        pos = np.concatenate([pos, np.zeros((len(pos), 1), np.float32)], axis=1)
    return pos


def _placed_points(positions) -> tuple[np.ndarray, np.ndarray]:
    """(the points (n, 3) a particle file holds, which of the particles they are): those without a
    position (parked tracers: NaN) are left out — NaN points break bounds and camera resets in ParaView."""
    pos = _points3(positions)
    keep = np.isfinite(pos).all(axis=1)
    return pos[keep], keep


@output_writer("a VTKHDF file")
def write_polydata_particles(p: Particles, tmp, name: str = "particles", meta: dict | None = None) -> None:
    """Vertices with the attributes as point data; particles without a position (parked tracers:
    NaN) are left out — NaN points break bounds and camera resets in ParaView."""
    pos, keep = _placed_points(p.positions)
    n = len(pos)
    with new_file(tmp) as f:
        root = _root(f, "PolyData")
        root.create_dataset("NumberOfPoints", data=np.array([n], np.int64))
        root.create_dataset("Points", data=pos)
        _topology(root, "Vertices", n, 1)
        for topo in ("Lines", "Polygons", "Strips"):
            _empty_topology(root, topo)
        pd = root.create_group("PointData")
        for k, v in p.attributes.items():
            v = np.asarray(v)[keep]
            pd.create_dataset(safe_name(k), data=v.astype(np.float32 if v.dtype.kind == "f" else np.int32))
        root.create_group("CellData")
        field_data(root, meta)


@output_writer("a VTKHDF file")
def write_polydata_boxes(b: Boxes, tmp, name: str = "boxes", meta: dict | None = None) -> None:
    pts = _points3(box_segments(np.asarray(b.lo, np.float32), np.asarray(b.hi, np.float32)))
    m = len(pts) // 2
    with new_file(tmp) as f:
        root = _root(f, "PolyData")
        root.create_dataset("NumberOfPoints", data=np.array([len(pts)], np.int64))
        root.create_dataset("Points", data=pts)
        _empty_topology(root, "Vertices")
        _topology(root, "Lines", m, 2)
        for topo in ("Polygons", "Strips"):
            _empty_topology(root, topo)
        cd = root.create_group("CellData")
        if b.level is not None:
            cd.create_dataset("level", data=np.repeat(np.asarray(b.level, np.int32), 12))
        root.create_group("PointData")
        field_data(root, meta)


def write_vtkhdf(fields: dict, path: str | Path, time: float | None = None, step: int | None = None) -> list[Path]:
    """Host-copied fields (nagare.app.fieldkinds.host_copies) → VTKHDF files, the run's ``time`` and
    ``step`` in each one's FieldData; returns their paths."""
    return [p for p, _ in write_vtkhdf_described(fields, path, time, step)]


def what_it_holds(name: str, f, resampled: bool = False) -> str:
    """One line on what a VTKHDF file holds (the CLI's --dump line and the app's status line say it
    for each file, since an amr3d export writes three)."""
    if isinstance(f, dict):  # a group of grids of one shape: one ImageData
        first = next(iter(f.values()))
        shape, _ = _grid_key(first)
        cells = "×".join(str(n) for n in reversed(shape))
        what = f"ImageData, {', '.join(f)} as cell data on {cells} cells"
        return what + (" (the octree's fields resampled onto one uniform grid)" if resampled else "")
    if isinstance(f, Boxes):
        return (f"PolyData lines, {name}: the outlines of {len(np.asarray(f.lo))} boxes (an octree's leaves) "
                f"with their level as cell data")
    if isinstance(f, Particles):
        return (f"PolyData vertices, {name}: {len(_placed_points(f.positions)[0])} points"
                + (f" with {', '.join(f.attributes)}" if f.attributes else ""))
    if isinstance(f, Profile1D):
        return f"PolyData polyline, the 1-D profile {name}"
    if isinstance(f, vtkhdf_amr.OctreeLeaves):
        return (f"OverlappingAMR, the octree itself: each of its {len(f.level)} leaves one box on its level "
                f"({f.n_levels} levels) with its own point data ({', '.join(f.arrays)})")
    return f"{type(f).__name__} {name}"


@output_writer("a VTKHDF file")
def write_vtkhdf_described(fields: dict, path: str | Path, time: float | None = None,
                           step: int | None = None) -> list[tuple[Path, str]]:
    """:func:`write_vtkhdf`, each path with a line on what it holds (:func:`what_it_holds`)."""
    path = Path(path)
    resampled = any(isinstance(f, vtkhdf_amr.OctreeLeaves) for f in fields.values())
    meta = {"time": time, "step": step}
    targets = vtkhdf_targets(fields, path)
    out: list[tuple[Path, str]] = []
    groups: dict = {}
    for k, g in fields.items():
        if isinstance(g, (Grid2D, Grid3D)):
            groups.setdefault(_grid_key(g), {})[k] = g
    for group in groups.values():
        target = targets[next(iter(group))]
        out.append((write_atomic(target, lambda tmp, g=group: write_image(g, tmp, meta)),
                    what_it_holds("", group, resampled)))
    for k, f in fields.items():
        if isinstance(f, (Grid2D, Grid3D)):
            continue
        target = targets[k]
        try:
            writer = lookup("vtkhdf", type(f))
        except FieldTypeError:
            raise ExportError(f"field {k!r} ({type(f).__name__}) has no VTKHDF writer") from None
        out.append((write_atomic(target, lambda tmp, f=f, w=writer, k=k: w(f, tmp, k, meta)), what_it_holds(k, f)))
    return out


@output_writer("a VTKHDF file")
def write_polydata_profile(p: Profile1D, tmp, name: str = "value", meta: dict | None = None) -> None:
    """A 1-D profile as one polyline along x, its values as point data named as the field (and the .npz
    dump: ``name``; the exact solution ``name_exact``, the .npz's ``name/exact``)."""
    x = np.asarray(p.x, np.float32)
    pts = np.zeros((len(x), 3), np.float32)
    pts[:, 0] = x
    with new_file(tmp) as f:
        root = _root(f, "PolyData")
        root.create_dataset("NumberOfPoints", data=np.array([len(pts)], np.int64))
        root.create_dataset("Points", data=pts)
        _empty_topology(root, "Vertices")
        _topology(root, "Lines", 1, len(pts))  # one polyline through the points in order
        for topo in ("Polygons", "Strips"):
            _empty_topology(root, topo)
        pd = root.create_group("PointData")
        pd.create_dataset(safe_name(name), data=np.asarray(p.data, np.float32))
        if p.exact is not None:
            pd.create_dataset(safe_name(f"{name}_exact"), data=np.asarray(p.exact, np.float32))
        root.create_group("CellData")
        field_data(root, meta)


# one writer per field type besides the grids (nagare.app.fieldkinds' registry, role "vtkhdf")
register("vtkhdf", Particles, write_polydata_particles)
register("vtkhdf", Boxes, write_polydata_boxes)
register("vtkhdf", Profile1D, write_polydata_profile)
