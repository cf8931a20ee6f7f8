"""ParaView export of an octree (amr3d) as VTKHDF ``OverlappingAMR``, written with h5py.

Each leaf becomes one AMR box on its level, with its own point data (density, speed, velocity).

How the node-centred leaves map onto VTK's model. A leaf of level l holds m³ *node-centred*
points with spacing h_l = h_0 / 2^l, from its origin to origin + (m − 1)·h_l; neighbouring leaves
share their face nodes (each stores a copy, equal after every step). A VTK AMR box is a uniform
grid given by a range of *cells* on its level's lattice (``AMRBox`` = imin, imax, jmin, jmax, kmin,
kmax, inclusive cell indices from the global ``Origin``), whose points are the cells' corners. So a
leaf is the box of its (m − 1)³ cells, lo = origin / h_l, hi = lo + m − 2, and its m³ nodes are
exactly the box's m³ points: the engine's values go in as **point data**, unchanged, with no
interpolation. A node on a face shared by two leaves appears in both boxes, as in the engine
(VTK's uniform grids each own their boundary points too). Cell data would have needed either
cells centred on the nodes (boxes shifted by h_l / 2, a different shift per level, which the one
global origin and integer box indices cannot express) or averaging 8 nodes per cell (not the
engine's values). The leaves of an octree tile the domain once, so no coarse box lies under a fine
one: the file is a valid overlapping AMR with nothing to blank. Levels run 0 … deepest; a level
with no leaves (every root refined) is written with no boxes.

A time series of the octree is one file with a ``Steps`` group (VTKHDF 2.3 temporal
OverlappingAMR): per level ``AMRBoxOffsets``, ``NumberOfAMRBoxes`` and ``PointDataOffsets``, so
the leaves may change between steps (app/vtkhdf_series.py appends the steps).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .atomic import output_writer
from .fieldkinds import register
from .fieldkinds.vtkio import safe_name
from .vtkhdf_format import field_data, h5py_module, new_file

VERSION = (2, 3)  # 2.3: the temporal OverlappingAMR datasets' names (AMRBoxOffsets, NumberOfAMRBoxes)


@dataclass
class OctreeLeaves:
    """An octree's leaves with their point data, on the host (the field type of this export).

    ``level`` (L,), ``origin`` (L, 3) and ``spacing`` (L,) in world units; ``m`` points per leaf
    edge; ``arrays`` name → (L, m, m, m) scalars or (L, m, m, m, 3) vectors, [leaf, z, y, x]."""

    level: np.ndarray
    origin: np.ndarray
    spacing: np.ndarray
    m: int
    arrays: dict = field(default_factory=dict)
    label: str = "octree"

    @property
    def n_levels(self) -> int:
        return int(self.level.max()) + 1 if len(self.level) else 0

    @property
    def level0_spacing(self) -> float:
        return float(self.spacing[0] * 2.0 ** int(self.level[0]))

    def boxes(self, level: int) -> np.ndarray:
        """(n, 6) int64 AMR boxes (imin, imax, jmin, jmax, kmin, kmax: inclusive cell indices on
        the level's lattice) of the leaves of one level, in leaf order."""
        pick = self.level == level
        h = self.level0_spacing / 2.0**level
        lo = np.rint(self.origin[pick] / h).astype(np.int64)
        hi = lo + (self.m - 2)
        return np.stack([lo[:, 0], hi[:, 0], lo[:, 1], hi[:, 1], lo[:, 2], hi[:, 2]], axis=1)

    def point_data(self, level: int) -> dict[str, np.ndarray]:
        """Per array the level's leaves' points, box after box, x fastest: (n·m³,) or (n·m³, 3)."""
        pick = self.level == level
        out = {}
        for name, a in self.arrays.items():
            a = np.asarray(a)[pick]
            out[name] = np.ascontiguousarray(a.reshape(-1, *a.shape[4:]), np.float32)
        return out


def octree_leaves(engine) -> OctreeLeaves | None:
    """The engine's leaves for export, or None when it has none (only amr3d offers ``leaf_blocks``)."""
    get = getattr(engine, "leaf_blocks", None)
    if get is None:
        return None
    b = get()
    u = np.moveaxis(np.asarray(b["u"]), 0, -1)  # (L, m, m, m, 3)
    return OctreeLeaves(np.asarray(b["level"]), np.asarray(b["origin"], np.float64),
                        np.asarray(b["spacing"], np.float64), int(b["m"]),
                        {"density": b["rho"], "speed": np.sqrt(np.sum(u * u, axis=-1)), "velocity": u})


def _root(f):
    h5py = h5py_module()
    root = f.create_group("VTKHDF", track_order=True)
    root.attrs["Version"] = np.array(VERSION, np.int64)
    for key, text in (("Type", b"OverlappingAMR"), ("GridDescription", b"XYZ")):
        root.attrs.create(key, text, dtype=h5py.string_dtype("ascii", len(text)))
    root.attrs["Origin"] = np.zeros(3)
    return root


@output_writer("a VTKHDF OverlappingAMR file")
def write_overlapping_amr(t: OctreeLeaves, tmp, name: str = "octree", meta: dict | None = None) -> None:
    """One OverlappingAMR file: Level0 … LevelN, each with Spacing, AMRBox and PointData."""
    with new_file(tmp) as f:
        root = _root(f)
        for lv in range(t.n_levels):
            g = root.create_group(f"Level{lv}")
            g.attrs["Spacing"] = np.full(3, t.level0_spacing / 2.0**lv)
            g.create_dataset("AMRBox", data=t.boxes(lv).reshape(-1, 6))
            pd = g.create_group("PointData")
            for key, a in t.point_data(lv).items():
                pd.create_dataset(safe_name(key), data=a)
            g.create_group("CellData")
            field_data(g, meta)  # the run's time and step with every level's blocks


register("vtkhdf", OctreeLeaves, write_overlapping_amr)
