"""Locks on outputs, so two processes never write one file at once.

A lock is the file ``.NAME.lock`` beside the output ``NAME`` (for a folder output, beside the
folder), held with ``flock`` for as long as the output is being written. It records the holder's
PID, its start time and its command line, so a refusal can say which run holds it.

``flock`` rather than an O_EXCL file judged by its PID: the kernel drops the lock when its process
dies, however it dies (SIGKILL, the OOM killer, a power cut), so a lock left by a dead process is
taken over by the next run without guessing from a PID that may have been reused. The file itself
may outlive its holder; it is harmless, and rewritten by the next holder.

Where no lock can be made (a read-only folder, no ``fcntl`` on this system) the output is written
unlocked: the write itself then fails or succeeds on its own and is reported as such.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from .errors import NagareError

try:
    import fcntl
except ImportError:  # Windows: no flock; outputs are written unlocked there
    fcntl = None


class OutputBusy(NagareError):
    """Another live process is writing this output."""


def lock_path(path: str | Path) -> Path:
    real = Path(os.path.realpath(path))
    return real.with_name(f".{real.name}.lock")


def _start_time(pid: int) -> str:
    """The process's start time as the kernel counts it (jiffies since boot; /proc), or ''."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def _holder(fd: int) -> str:
    """'PID 1234 (nagare run …, started 22:10:03)' from a lock file's contents."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").splitlines()
        pid = int(text[0].split()[0])
    except (OSError, ValueError, IndexError):
        return "another process"
    started = text[1] if len(text) > 1 else ""
    command = text[2] if len(text) > 2 else ""
    details = ", ".join(x for x in (command[:80], f"started {started}" if started else "") if x)
    return f"PID {pid}" + (f" ({details})" if details else "")


_HELD: dict[str, OutputLock] = {}  # lock file → this process's lock on it


class OutputLock:
    """The lock on one output; ``acquire()`` raises OutputBusy naming the live holder."""

    def __init__(self, path: str | Path, what: str = ""):
        self.path = Path(path)
        self.what = what or str(path)
        self.file = lock_path(path)
        self.fd: int | None = None
        self.took_over: str | None = None  # the dead holder whose lock was taken over

    def acquire(self) -> OutputLock:
        if fcntl is None:
            return self
        for _attempt in range(5):
            try:
                fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return self  # nowhere to put a lock (read-only, no folder): the write says why
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _holder(fd)
                os.close(fd)
                raise OutputBusy(f"{self.what} is being written by another run, {holder}: wait for it to end "
                                 "or write elsewhere") from None
            try:  # the holder may have removed the file between our open and flock: lock the file on disk
                same = os.path.samestat(os.fstat(fd), os.stat(self.file))
            except OSError:
                same = False
            if not same:
                os.close(fd)
                continue
            left = _holder(fd)
            if os.fstat(fd).st_size and not left.startswith(f"PID {os.getpid()} "):
                self.took_over = left
            try:
                record = (f"{os.getpid()} {_start_time(os.getpid())}\n{time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                          f"{' '.join(sys.argv)[:400]}\n").encode()
                os.ftruncate(fd, 0)
                os.pwrite(fd, record, 0)
            except OSError:
                pass  # a full disk: the lock holds all the same, only the holder's name is missing
            self.fd = fd
            _HELD[str(self.file)] = self
            return self
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        _HELD.pop(str(self.file), None)
        try:
            if os.path.samestat(os.fstat(self.fd), os.stat(self.file)):
                os.unlink(self.file)  # still held: no other process can be waiting on this file's lock
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False


def held_here(path: str | Path) -> bool:
    """Whether this process already holds the lock on ``path`` (a run locks its outputs up front)."""
    return str(lock_path(path)) in _HELD


class OutputLocks:
    """The locks of every output of a run, taken together before the first step."""

    def __init__(self):
        self.locks: list[OutputLock] = []

    def acquire(self, path: str | Path, what: str) -> OutputLock | None:
        if held_here(path):
            return None
        try:
            lock = OutputLock(path, what).acquire()
        except OutputBusy:
            self.release()
            raise
        self.locks.append(lock)
        return lock

    def release(self) -> None:
        while self.locks:
            self.locks.pop().release()
