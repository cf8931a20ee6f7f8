"""Exports from the app: PNG frames, MP4 video, fields for ParaView (VTKHDF through h5py,
nagare.app.vtkhdf; the legacy VTK writer below stays for older readers), checkpoints.

Every write is atomic (temporary file beside the target, then rename: nagare.app.atomic), and a
failing write raises :class:`ExportError` with one line; the window shows it and the run goes on.
"""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
from nagare.app import atomic
from nagare.app.atomic import ExportError, describe_cause, free_bytes, output_writer, write_atomic
from nagare.app.fieldkinds import FieldTypeError, handler_for, host_copies
from nagare.app.fieldkinds.vtkio import safe_name
from nagare.app.vtkhdf import write_vtkhdf, write_vtkhdf_described
from nagare.engine.checkpoint import save_checkpoint
from nagare.engine.outputlock import OutputBusy, OutputLock
from PIL import Image

__all__ = ["ExportError", "save_png", "VideoRecorder", "write_vtk", "write_vtkhdf", "write_vtkhdf_described",
           "write_checkpoint", "host_copies"]


@output_writer("a PNG picture of the view")
def save_png(rgba: np.ndarray, path: str | Path) -> Path:
    img = Image.fromarray(np.ascontiguousarray(rgba[..., :3]), "RGB")
    return write_atomic(path, lambda tmp: img.save(tmp, format="PNG"))


def write_checkpoint(ckpt: dict, path: str | Path) -> Path:
    """The engine's checkpoint (engine/checkpoint.py: atomic, ExportError in one line)."""
    return save_checkpoint(ckpt, Path(path))


DEFAULT_VIDEO_FPS = 30  # an MP4's playback rate unless the user picks another (Export dock)


FULL_BYTES = 1 << 20  # free space below which a recording that stopped met a full disk (a few frames)


@output_writer("an MP4 video")
class VideoRecorder:
    """MP4 (H.264 through imageio-ffmpeg's bundled ffmpeg) written to a temp file, renamed on stop.

    Frames must keep one size; H.264 with yuv420p needs even sides, so frames are cropped to
    the first frame's even size. The window appends one frame per published frame; the video
    plays them at ``fps``. The output is locked (engine/outputlock.py) from the start to the
    end of the recording: a file another live process is writing is refused.
    """

    def __init__(self, path: str | Path, fps: int = DEFAULT_VIDEO_FPS):
        self.path = Path(path)
        self.fps = fps
        self.missed = 0  # published frames that left the worker's slots before they were recorded
        self.t_start = time.perf_counter()
        # the engine's temporary naming (.NAME.PID.tmp.mp4: ffmpeg picks the container from the
        # extension), so a recording cut by a kill is removed by the next write into the folder
        self.tmp = atomic.temp_path(self.path, ".mp4")
        self.frames = 0
        self._size: tuple[int, int] | None = None
        self._writer = None
        self._lock: OutputLock | None = None
        try:
            atomic.make_folder(self.path.parent)
            atomic.remove_stale_temporaries(self.path.parent)
            if not os.access(self.path.parent, os.W_OK):
                raise PermissionError(13, "Permission denied")
            self._lock = OutputLock(self.path).acquire()
        except OutputBusy as exc:
            raise ExportError(f"cannot record to {self.path}: {exc}") from None
        except OSError as exc:
            raise ExportError(f"cannot record to {self.path}: {describe_cause(exc)}") from None

    def append(self, rgba: np.ndarray) -> None:
        import imageio.v2 as imageio  # imageio + ffmpeg (optional at run time): only a recording needs them

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
            cause, kept = self._cause(exc), self._kept()  # before abort() frees the temporary's space
            self.abort()
            raise ExportError(f"video recording to {self.path} stopped: {cause}; {kept}") from None
        self.frames += 1

    def summary(self) -> str:
        """What the video is: "120 frames at 30 frames/s (4.00 s of video) from 12.3 s of run"."""
        elapsed = time.perf_counter() - self.t_start
        text = (f"{self.frames} frame{'s' if self.frames != 1 else ''} at {self.fps} frames/s "
                f"({self.frames / self.fps:.2f} s of video) from {elapsed:.1f} s of run, one per published frame")
        return text + (f"; {self.missed} published frames were missed" if self.missed else "")

    def close(self) -> Path | None:
        """Finish the file and rename it into place; None if no frame was recorded. A failure
        leaves a previous file of that name as it was."""
        if self._writer is None:
            self._release()
            return None
        try:
            self._writer.close()
            self._writer = None
            atomic.fsync_and_replace(self.tmp, self.path)
        except Exception as exc:  # ffmpeg's own failure (its disk full) comes as another exception type
            cause, kept = self._cause(exc), self._kept()
            self.abort()
            raise ExportError(f"cannot write {self.path}: {cause}; {kept}") from None
        self._release()
        return self.path

    def _kept(self) -> str:
        return (f"the previous {self.path.name} is kept unchanged" if os.path.lexists(self.path)
                else f"no {self.path.name} was left")

    def _cause(self, exc: BaseException) -> str:
        """Why the video could not be written, in one line. ffmpeg writes the file in its own process,
        so its full disk reaches this one as a broken pipe, its own words going to the terminal: a
        folder with less than FULL_BYTES left, or a file at the file-size limit ffmpeg inherits, says
        why; anything else is the error's first line."""
        try:
            free, what = free_bytes(self.path.parent)
            size = self.tmp.stat().st_size if self.tmp.exists() else 0
        except OSError:
            return describe_cause(exc)
        if what.startswith("the disk is full"):
            if free < FULL_BYTES:
                return describe_cause(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        elif size + FULL_BYTES > free:  # free: the size limit itself
            return describe_cause(OSError(errno.EFBIG, os.strerror(errno.EFBIG)))
        return describe_cause(exc)

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def abort(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:
                pass
            self._writer = None
        self.tmp.unlink(missing_ok=True)
        self._release()


# ---- VTK (legacy binary: ParaView, VisIt and the vtk package read it) --------------------------------
# The fields come from nagare.app.fieldkinds.host_copies (run on the simulation thread); each field
# type's ``vtk`` handler writes its dataset, this module only frames the file.
def vtk_bytes(name: str, f) -> bytes:
    """One field (host arrays) as a legacy binary VTK file (big-endian, as the format requires)."""
    try:
        write = handler_for("vtk", f)
    except FieldTypeError as exc:
        raise ExportError(f"field {name!r} cannot be written as VTK: {exc}") from None
    head, body = write(name, f)
    head = [b"# vtk DataFile Version 3.0", f"nagare {name}".encode(), b"BINARY", *head]
    return b"\n".join(head) + b"\n" + b"".join(body) + b"\n"


@output_writer("legacy VTK files")
def write_vtk(fields: dict, folder: str | Path, stem: str) -> list[Path]:
    folder = Path(folder)
    out = []
    for name, f in fields.items():
        payload = vtk_bytes(name, f)
        out.append(write_atomic(folder / f"{stem}_{safe_name(name)}.vtk", lambda tmp, p=payload: tmp.write_bytes(p)))
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


