"""Boxes (octree leaves): snapshot, headless PNG (outlines), host copy, .npz arrays and VTK
(POLYDATA lines, 12 edges per box)."""
from __future__ import annotations

import numpy as np
from nagare.engine.fields import Boxes

from ..packets import SnapshotContext
from .registry import register
from .vtkio import be_bytes

PNG_SIZE = 512  # side of the headless image (as nagare.app.frames.MIN_SIZE)
_BOX_EDGES = np.array([(0, 1), (1, 3), (3, 2), (2, 0), (4, 5), (5, 7), (7, 6), (6, 4),
                       (0, 4), (1, 5), (2, 6), (3, 7)])


def box_segments(lo, hi, xp=np):
    """(n, 3) corners lo/hi → (n*24, 3) line-segment endpoints of the boxes' edges (``xp``: NumPy,
    or CuPy for device arrays: the 3D view builds the leaves' lines on the GPU)."""
    lo, hi = xp.asarray(lo, dtype=xp.float32), xp.asarray(hi, dtype=xp.float32)
    corners = xp.empty((len(lo), 8, lo.shape[1]), xp.float32)
    for c in range(8):
        pick = xp.asarray([(c >> d) & 1 for d in range(lo.shape[1])], dtype=bool)
        corners[:, c] = xp.where(pick, hi, lo)
    return corners[:, xp.asarray(_BOX_EDGES)].reshape(-1, lo.shape[1])


def boxes_copy(xp, boxes: Boxes, cache: dict | None):
    """((lo, hi, level) device copies, the levels present or None) of a Boxes field for a packet.

    One copy per set of engine arrays: while the engine hands the same arrays (amr3d: until it
    regrids) every packet carries the same tuple, so the canvas builds the boxes' lines again only
    when they change. The cache holds the engine's arrays themselves, so an id is never reused."""
    key = (boxes.lo, boxes.hi, boxes.level)
    hit = None if cache is None else cache.get("boxes copy")
    if hit is not None and all(a is b for a, b in zip(hit[0], key)):
        return hit[1], boxes.levels
    copy = (xp.asarray(boxes.lo, dtype=xp.float32).copy(), xp.asarray(boxes.hi, dtype=xp.float32).copy(),
            None if boxes.level is None else xp.asarray(boxes.level).copy())
    if cache is not None:
        cache["boxes copy"] = (key, copy)
    return copy, boxes.levels


@register("snapshot", Boxes)
def snapshot_boxes(f: Boxes, ctx: SnapshotContext):
    (lo, hi, level), levels = boxes_copy(ctx.xp, f, ctx.cache)
    return ctx.packet("boxes", lo=lo, hi=hi, level=level, boxes_levels=levels)


@register("png", Boxes)
def png_boxes(f: Boxes, backend, view, vrange) -> np.ndarray:
    return boxes_image(backend.asnumpy(f.lo), backend.asnumpy(f.hi))


def boxes_image(lo, hi, size=PNG_SIZE) -> np.ndarray:
    img = np.full((size, size, 3), 16, np.uint8)
    if len(lo) == 0:
        return img
    a, b = lo[:, :2].min(axis=0), hi[:, :2].max(axis=0)
    s = (size - 1) / max((b - a).max(), 1e-12)
    for l, h in zip(lo[:, :2], hi[:, :2]):
        (x0, y0), (x1, y1) = ((l - a) * s).astype(int), ((h - a) * s).astype(int)
        img[size - 1 - y0, x0:x1 + 1] = img[size - 1 - y1, x0:x1 + 1] = 220
        img[size - 1 - y1:size - y0, x0] = img[size - 1 - y1:size - y0, x1] = 220
    return img


@register("host_copy", Boxes)
def host_copy_boxes(f: Boxes, asnumpy) -> Boxes:
    return Boxes(asnumpy(f.lo), asnumpy(f.hi), None if f.level is None else asnumpy(f.level), f.label)


@register("arrays", Boxes)
def arrays_boxes(out: dict, name: str, f: Boxes, asnumpy) -> None:
    out[f"{name}/lo"], out[f"{name}/hi"] = asnumpy(f.lo), asnumpy(f.hi)
    if f.level is not None:
        out[f"{name}/level"] = asnumpy(f.level)


@register("vtk", Boxes)
def vtk_boxes(name: str, f: Boxes) -> tuple[list[bytes], list[bytes]]:
    pts = box_segments(np.asarray(f.lo, np.float32), np.asarray(f.hi, np.float32))
    if pts.shape[1] == 2:
        pts = np.concatenate([pts, np.zeros((len(pts), 1), np.float32)], axis=1)
    m = len(pts) // 2
    cells = np.stack([np.full(m, 2), 2 * np.arange(m), 2 * np.arange(m) + 1], axis=1)
    head = [b"DATASET POLYDATA", f"POINTS {len(pts)} float".encode()]
    return head, [be_bytes(pts), f"\nLINES {m} {3 * m}\n".encode() + be_bytes(cells, ">i4")]
