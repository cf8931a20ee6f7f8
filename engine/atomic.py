"""Atomic file writes: write to a temporary file beside the target, then rename over it.

The one implementation (``nagare.app.atomic`` re-exports it). A failing write (read-only folder,
full disk, a file where a folder should be, a name too long) raises ExportError with one line
saying what and where; the target is never left half-written and no temporary file is left
behind. The temporary file is fsynced before the rename and the folder after it, so a power loss
cannot leave an empty or partial file under the final name.

A write holds the output's lock (engine/outputlock.py) while it runs, unless this process holds
it already (a run locks its outputs before its first step): a file another live process is
writing is refused in one line naming that process.

Every function that writes an output file is registered with :func:`output_writer`; the test
suite walks the package for file writes and injects a full disk and a file-size limit into every
registered writer (tests/unit/test_output_faults.py), so a writer cannot be added unseen.

Temporaries are named ``.NAME.PID.tmp``. A process killed mid-write (SIGKILL, OOM killer) cannot
remove its own; the next process's first write into the same folder removes those whose process
is gone (one scan per folder and process, so a long dump series does not rescan its folder).
"""
from __future__ import annotations

import errno
import itertools
import os
import re
from collections.abc import Callable
from pathlib import Path

from .errors import NagareError
from .outputlock import OutputBusy, OutputLock, held_here

_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)(?:-\d+)?\.tmp(?P<suffix>\.[A-Za-z0-9]+)?$")
_SEQ = itertools.count()  # temporaries of one process are unique per write: threads write the same file


class ExportError(NagareError):
    pass


OUTPUT_WRITERS: dict[str, str] = {}  # "module:qualname" → what it writes


def output_writer(what: str):
    """Register a function that writes an output file (see the module doc); returns it unchanged."""
    def register(fn):
        OUTPUT_WRITERS[f"{fn.__module__}:{fn.__qualname__}"] = what
        return fn
    return register


# What a user should read for the errors a write meets in practice (HDF5 wraps them in its own
# text, "… errno = 27, error message = 'File too large' …", so the errno is looked for there too).
_CAUSES = {
    errno.ENOSPC: "the disk is full",
    errno.EFBIG: "the file is larger than this process may write (ulimit -f)",
    errno.EROFS: "the file system is read-only",
    errno.EDQUOT: "the disk quota is exhausted",
}
_ERRNO_IN_TEXT = re.compile(r"errno\s*=\s*(\d+)")


def error_errno(exc: BaseException) -> int | None:
    """The errno of an OSError, or the one HDF5 names in the text of an h5py error."""
    err = getattr(exc, "errno", None)
    if isinstance(err, int):
        return err
    m = _ERRNO_IN_TEXT.search(str(exc))
    if m:
        return int(m.group(1))
    text = str(exc)
    for code in (errno.ENOSPC, errno.EFBIG, errno.EROFS, errno.EACCES, errno.ENAMETOOLONG):
        if os.strerror(code) in text:
            return code
    return None


def describe_cause(exc: BaseException) -> str:
    """One line saying why a write failed (never HDF5's multi-line text)."""
    code = error_errno(exc)
    if code in _CAUSES:
        return f"{_CAUSES[code]} ({os.strerror(code)})"
    if code is not None and not isinstance(exc, OSError):  # HDF5's text: the errno's own words instead
        return os.strerror(code)
    text = getattr(exc, "strerror", None) or str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_write_failure(exc: BaseException) -> bool:
    """An OSError, or an h5py error wrapping one (HDF5 reports a failed write as RuntimeError or
    ValueError with the errno in its text): the disk, not the program."""
    if isinstance(exc, OSError):
        return True
    return type(exc).__module__.split(".")[0] == "h5py" or error_errno(exc) is not None


def intact_note(path: Path, existed: bool) -> str:
    """What is still on disk after a failed write of ``path``."""
    return f"the previous {path.name} is kept unchanged" if existed else f"no {path.name} was left"


def free_bytes(folder: Path) -> tuple[int, str]:
    """(bytes a new file in ``folder`` may take, what limits it): the free space there, or the
    process's file-size limit (RLIMIT_FSIZE) where that is smaller."""
    st = os.statvfs(folder)
    free, what = st.f_bavail * st.f_frsize, "the disk is full"
    try:
        import resource  # Unix only (RLIMIT_FSIZE): Windows has no such module

        soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY and soft < free:
            free, what = soft, "the file-size limit of this process (ulimit -f) is too small"
    except (ImportError, OSError, ValueError):
        pass
    return int(free), what


def temp_path(path: Path, suffix: str = "") -> Path:
    """``.NAME.PID-N.tmp`` beside ``path``, N counting this process's writes (two threads writing
    the same file each get their own; with one shared name one rename took the other's file away);
    ``suffix``, e.g. ".mp4", for writers that pick the format from the extension. A dead process's
    temporaries are removed by the next write there."""
    return path.with_name(f".{path.name}.{os.getpid()}-{next(_SEQ)}.tmp{suffix}")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's process) or cannot tell: keep its file
    return True


_SCANNED: set[str] = set()  # folders already cleaned by this process (a dump series writes often)


def remove_stale_temporaries(folder: str | Path, once: bool = False) -> list[Path]:
    """Remove ``.NAME.PID.tmp`` files in ``folder`` whose process no longer runs (best effort).
    With ``once``, a folder is scanned only on this process's first write into it."""
    removed: list[Path] = []
    if once:
        key = os.path.abspath(folder)
        if key in _SCANNED:
            return removed
        _SCANNED.add(key)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _TMP.match(entry.name)
        if m is None or _pid_alive(int(m["pid"])):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def _fsync_path(path: Path, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if directory:  # e.g. Windows cannot open a folder: nothing to sync there
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:  # some file systems cannot sync a folder; a file must sync
            raise
    finally:
        os.close(fd)


def make_folder(folder: Path) -> None:
    """mkdir -p, with "x is a file, not a folder" instead of a bare "File exists"."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        for p in (folder, *folder.parents):
            if p.exists() and not p.is_dir():
                raise NotADirectoryError(20, f"{p} is a file, not a folder") from None
        raise


def fsync_and_replace(tmp: Path, path: Path) -> None:
    """fsync ``tmp``, rename it to ``path``, fsync the folder (for writers that cannot go through
    :func:`write_atomic` in one call, e.g. a video written frame by frame)."""
    _fsync_path(tmp)
    os.replace(tmp, path)
    _fsync_path(path.parent, directory=True)


def write_atomic(path: str | Path, writer: Callable[[Path], None]) -> Path:
    """Call ``writer(tmp_path)``, fsync it, rename tmp → path, fsync the folder. Returns the path.

    ExportError (one line: the file, the cause, what is still there) if it cannot be written,
    or if another live process is writing ``path``."""
    path = Path(path)
    tmp = temp_path(path)
    existed = os.path.lexists(path)
    lock = None
    try:
        make_folder(path.parent)
        if not held_here(path):
            lock = OutputLock(path).acquire()
        remove_stale_temporaries(path.parent, once=True)
        writer(tmp)
        _fsync_path(tmp)
        os.replace(tmp, path)
        _fsync_path(path.parent, directory=True)
    except OutputBusy as exc:
        raise ExportError(f"cannot write {path}: {exc}") from None
    except BaseException as exc:  # also Ctrl-C mid-write: no temporary file left behind
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if isinstance(exc, Exception) and is_write_failure(exc):
            raise ExportError(f"cannot write {path}: {describe_cause(exc)}; {intact_note(path, existed)}") from None
        raise
    finally:
        if lock is not None:
            lock.release()
    return path


def write_atomic_group(items: list[tuple[Path, Callable[[Path], None]]]) -> list[Path]:
    """Files that belong together (a timing log's .csv and .json): every one is written to its
    temporary file and fsynced before any is renamed into place, so a failure leaves all of the
    previous ones (ExportError naming the file that failed and saying what is kept)."""
    paths = [Path(p) for p, _w in items]
    existed = [os.path.lexists(p) for p in paths]
    tmps: list[Path] = []
    locks: list[OutputLock] = []
    current = paths[0]
    try:
        for path, (_p, writer) in zip(paths, items):
            current = path
            make_folder(path.parent)
            if not held_here(path):
                locks.append(OutputLock(path).acquire())
            remove_stale_temporaries(path.parent, once=True)
            tmp = temp_path(path)
            tmps.append(tmp)
            writer(tmp)
            _fsync_path(tmp)
        for tmp, path in zip(tmps, paths):
            current = path
            os.replace(tmp, path)
        for folder in dict.fromkeys(p.parent for p in paths):
            _fsync_path(folder, directory=True)
    except OutputBusy as exc:
        raise ExportError(f"cannot write {current}: {exc}") from None
    except BaseException as exc:
        for tmp in tmps:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
        if isinstance(exc, Exception) and is_write_failure(exc):
            names = " and ".join(p.name for p in paths)
            kept = (f"the previous {names} are kept unchanged" if all(existed)
                    else f"no {names} were left" if not any(existed) else "the files of that name are kept unchanged")
            raise ExportError(f"cannot write {current}: {describe_cause(exc)}; {kept}") from None
        raise
    finally:
        for lock in locks:
            lock.release()
    return paths


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))
