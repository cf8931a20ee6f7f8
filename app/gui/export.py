"""Exports from the app: PNG frames, MP4 video, VTK fields, checkpoints.

Every write is atomic (temporary file beside the target, then rename: nagare.app.atomic), and a
failing write raises :class:`ExportError` with one line; the window shows it and the run goes on.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from nagare.app.atomic import ExportError, write_atomic
from nagare.engine.checkpoint import save_checkpoint
from nagare.engine.fields import Boxes, Grid2D, Grid3D, Particles

__all__ = ["ExportError", "save_png", "VideoRecorder", "write_vtk", "write_checkpoint", "host_fields"]


def save_png(rgba: np.ndarray, path: str | Path) -> Path:
    from PIL import Image

    img = Image.fromarray(np.ascontiguousarray(rgba[..., :3]), "RGB")
    return write_atomic(path, lambda tmp: img.save(tmp, format="PNG"))


def write_checkpoint(ckpt: dict, path: str | Path) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(ckpt, path)
    except OSError as exc:
        Path(path.name + ".tmp").unlink(missing_ok=True)
        raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


class VideoRecorder:
    """MP4 (H.264 through imageio-ffmpeg's bundled ffmpeg) written to a temp file, renamed on stop.

    Frames must keep one size; H.264 with yuv420p needs even sides, so frames are cropped to
    the first frame's even size.
    """

    def __init__(self, path: str | Path, fps: int = 30):
        self.path = Path(path)
        self.fps = fps
        self.tmp = self.path.with_name(f".{self.path.stem}.{os.getpid()}.tmp.mp4")
        self.frames = 0
        self._size: tuple[int, int] | None = None
        self._writer = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not os.access(self.path.parent, os.W_OK):
                raise PermissionError(13, "Permission denied")
        except OSError as exc:
            raise ExportError(f"cannot record to {self.path}: {exc.strerror or exc}") from None

    def append(self, rgba: np.ndarray) -> None:
        import imageio.v2 as imageio

        frame = np.ascontiguousarray(rgba[..., :3])
        if self._size is None:
            h, w = frame.shape[:2]
            self._size = (h - h % 2, w - w % 2)
            try:
                self._writer = imageio.get_writer(self.tmp, format="FFMPEG", mode="I", fps=self.fps,
                                                  codec="libx264", quality=7, pixelformat="yuv420p",
                                                  macro_block_size=2)
            except Exception as exc:
                raise ExportError(f"cannot start the video writer for {self.path}: {exc}") from None
        h, w = self._size
        if frame.shape[0] < h or frame.shape[1] < w:  # the window shrank: pad with black
            pad = np.zeros((h, w, 3), np.uint8)
            pad[:min(h, frame.shape[0]), :min(w, frame.shape[1])] = frame[:h, :w]
            frame = pad
        try:
            self._writer.append_data(np.ascontiguousarray(frame[:h, :w]))
        except Exception as exc:
            self.abort()
            raise ExportError(f"video recording to {self.path} stopped: {exc}") from None
        self.frames += 1

    def close(self) -> Path | None:
        """Finish the file and rename it into place; None if no frame was recorded."""
        if self._writer is None:
            return None
        try:
            self._writer.close()
            self._writer = None
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.abort()
            raise ExportError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        return self.path

    def abort(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:
                pass
            self._writer = None
        self.tmp.unlink(missing_ok=True)


# ---- VTK (legacy binary: ParaView, VisIt and the vtk package read it) --------------------------------
def host_fields(engine) -> dict:
    """Host copies of every field (run on the simulation thread, between steps)."""
    out = {}
    be = engine.backend
    for name, f in engine.fields().items():
        if isinstance(f, Grid2D | Grid3D):
            out[name] = type(f)(be.asnumpy(f.data), f.kind, f.spacing, f.label, f.units,
                                None if f.mask is None else be.asnumpy(f.mask), f.symmetric)
        elif isinstance(f, Particles):
            out[name] = Particles(be.asnumpy(f.positions), {k: be.asnumpy(v) for k, v in f.attributes.items()},
                                  f.label, f.bounds)
        elif isinstance(f, Boxes):
            out[name] = Boxes(be.asnumpy(f.lo), be.asnumpy(f.hi), None if f.level is None else be.asnumpy(f.level),
                              f.label)
    return out


def _be(a, dtype=">f4") -> bytes:
    return np.ascontiguousarray(a, dtype=dtype).tobytes()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name) or "field"


def vtk_bytes(name: str, f) -> bytes:
    """One field as a legacy binary VTK file (big-endian, as the format requires)."""
    head = [b"# vtk DataFile Version 3.0", f"nagare {name}".encode(), b"BINARY"]
    body: list[bytes] = []
    if isinstance(f, Grid2D | Grid3D):
        data = np.asarray(f.data)
        vec = f.kind == "vector"
        shape = data.shape[1:] if vec else data.shape
        dims = tuple(reversed(shape)) + (1,) * (3 - len(shape))  # VTK: x fastest
        n = int(np.prod(shape))
        head += [b"DATASET STRUCTURED_POINTS", f"DIMENSIONS {dims[0]} {dims[1]} {dims[2]}".encode(),
                 b"ORIGIN 0 0 0", f"SPACING {f.spacing} {f.spacing} {f.spacing}".encode(), f"POINT_DATA {n}".encode()]
        if vec:
            comps = [data[i].reshape(-1) for i in range(data.shape[0])]
            while len(comps) < 3:
                comps.append(np.zeros(n, data.dtype))
            head.append(f"VECTORS {_safe(name)} float".encode())
            body.append(_be(np.stack(comps, axis=1)))
        else:
            head += [f"SCALARS {_safe(name)} float 1".encode(), b"LOOKUP_TABLE default"]
            body.append(_be(data.reshape(-1)))
        if f.mask is not None:
            body.append(b"\n" + b"SCALARS solid unsigned_char 1\nLOOKUP_TABLE default\n"
                        + np.asarray(f.mask, np.uint8).reshape(-1).tobytes())
    elif isinstance(f, Particles):
        pos = np.asarray(f.positions, np.float32)
        n = len(pos)
        if pos.shape[1] == 2:
            pos = np.concatenate([pos, np.zeros((n, 1), np.float32)], axis=1)
        head += [b"DATASET POLYDATA", f"POINTS {n} float".encode()]
        body.append(_be(pos))
        body.append(f"\nVERTICES {n} {2 * n}\n".encode()
                    + _be(np.stack([np.ones(n), np.arange(n)], axis=1), ">i4"))
        if f.attributes:
            body.append(f"\nPOINT_DATA {n}\n".encode())
            for k, v in f.attributes.items():
                body.append(f"SCALARS {_safe(k)} float 1\nLOOKUP_TABLE default\n".encode() + _be(v) + b"\n")
    elif isinstance(f, Boxes):
        from .canvas import box_segments

        lo, hi = np.asarray(f.lo, np.float32), np.asarray(f.hi, np.float32)
        pts = box_segments(lo, hi)
        if pts.shape[1] == 2:
            pts = np.concatenate([pts, np.zeros((len(pts), 1), np.float32)], axis=1)
        m = len(pts) // 2
        head += [b"DATASET POLYDATA", f"POINTS {len(pts)} float".encode()]
        body.append(_be(pts))
        cells = np.stack([np.full(m, 2), 2 * np.arange(m), 2 * np.arange(m) + 1], axis=1)
        body.append(f"\nLINES {m} {3 * m}\n".encode() + _be(cells, ">i4"))
    else:
        raise ExportError(f"field {name!r} of kind {type(f).__name__} cannot be written as VTK")
    return b"\n".join(head) + b"\n" + b"".join(body) + b"\n"


def write_vtk(fields: dict, folder: str | Path, stem: str) -> list[Path]:
    folder = Path(folder)
    out = []
    for name, f in fields.items():
        payload = vtk_bytes(name, f)
        out.append(write_atomic(folder / f"{stem}_{_safe(name)}.vtk", lambda tmp, p=payload: tmp.write_bytes(p)))
    return out


def read_vtk_structured_points(path: str | Path) -> tuple[tuple[int, int, int], np.ndarray]:
    """Minimal reader for the files written above (used by the tests)."""
    raw = Path(path).read_bytes()
    lines = raw.split(b"\n")
    dims = next(tuple(int(x) for x in ln.split()[1:]) for ln in lines if ln.startswith(b"DIMENSIONS"))
    n = dims[0] * dims[1] * dims[2]
    marker = b"LOOKUP_TABLE default\n"
    start = raw.index(marker) + len(marker)
    values = np.frombuffer(raw[start:start + 4 * n], dtype=">f4")
    return dims, values.astype(np.float32).reshape(dims[2], dims[1], dims[0])


