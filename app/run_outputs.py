"""What a ``nagare run`` will write, checked before its first step.

Every output option is turned into the files it writes (the timing log's .csv and .json, a
VTKHDF dump's companion files such as amr3d's ``stem_octree.vtkhdf``, a series' companions) or,
for the options that write a file per step, a folder and the pattern of its names. Two options
that would write one file are refused (one would destroy the other), and so is an output that
would replace the checkpoint ``--resume`` reads. Then every output is locked
(engine/outputlock.py), so a second run writing any of them is refused while this one lives.

Before all that, before the preset is even built, every output's folder is checked
(:func:`check_places`): a folder that cannot exist or take files (a file in its place, /proc,
a read-only file system) and a name too long for its folder are refused in one line, so a run
never computes for nothing. A folder of ``--frames`` that holds another run's frames is
refused too (:func:`check_frames_folder`).
"""
from __future__ import annotations

import errno
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nagare.engine.atomic import describe_cause, error_errno, make_folder
from nagare.engine.errors import NagareError
from nagare.engine.fields import Grid2D, Grid3D
from nagare.engine.outputlock import OutputLocks

from .timinglog import timing_paths
from .vtkhdf import vtkhdf_targets


class OutputCollision(NagareError):
    """Two outputs of one run would write the same file."""


class OutputRefused(NagareError):
    """An output that cannot be written where it was asked, found before the run."""


# A full disk or an exhausted quota at the start is left to the writes: each says so in one line
# and the run's other outputs go on (docs/export.md); the space may also be freed while it runs.
_LEFT_TO_THE_WRITES = {errno.ENOSPC, errno.EDQUOT}
_TEMP_EXTRA = len(".") + len(".4194304-999.tmp")  # write_atomic's temporary: .NAME.PID-N.tmp beside NAME


def place_problem(path: Path, folder: bool = False) -> str | None:
    """Why ``path`` (a file, or with ``folder`` a folder to fill with files) cannot be written,
    or None. Checks its folder, or the nearest one that exists when the rest is to be made, by
    making and removing an empty folder there (what a write needs: a folder that exists, takes
    new entries and is not a file), and the name's length against that file system's limit."""
    target = Path(path)  # as given: the refusal names what the user typed
    if os.path.isdir(target) and not folder:  # (False, not an error, for a name too long to look up)
        return f"{target} is a folder, not a file"
    where = target if folder else target.parent
    existing = where
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        probe = tempfile.mkdtemp(prefix=".nagare-probe-", dir=existing)
    except OSError as exc:
        if error_errno(exc) in _LEFT_TO_THE_WRITES:
            return None
        return f"{existing} takes no new files ({describe_cause(exc)})"
    os.rmdir(probe)
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        return None
    if not folder and len(target.name.encode()) + _TEMP_EXTRA > name_max:  # its temporary's name is longer
        return (f"the file name is too long for this file system ({len(target.name.encode())} bytes; at most "
                f"{name_max - _TEMP_EXTRA}, as it is written under a temporary name .NAME.PID-N.tmp first)")
    for p in [where, *where.parents]:  # the folders still to make
        if not os.path.lexists(p) and len(p.name.encode()) > name_max:
            return f"the folder name {p.name[:16]}… is too long ({len(p.name.encode())} bytes; at most {name_max})"
    return None


def check_places(places: list[tuple[str, Path, bool]]) -> None:
    """OutputRefused (one line naming the option and the path) for the first of ``places``
    ((option, path, is a folder)) that cannot be written; see :func:`place_problem`."""
    for option, path, folder in places:
        why = place_problem(Path(path), folder)
        if why is not None:
            raise OutputRefused(f"{option} {path}: cannot write there: {why}; nothing was run")


FRAME_NAME = re.compile(r"frame_(\d{8})\.png")


def check_frames_folder(folder: Path, resume_step: int | None) -> None:
    """OutputRefused when ``folder`` holds frames of another run, which new frames would mix with
    (frames are named by step, so an old frame of a step the new run skips stays among its own).
    A new run wants no ``frame_<step>.png`` there. A ``--resume`` run continues the run its
    checkpoint was made by, up to the checkpoint's step: frames up to that step are taken as that
    run's, and it adds its own after them. A frame past that step was drawn by another run, or by
    the checkpoint's run after the checkpoint (killed later): either way not this run's, and it
    is not removed without being asked."""
    try:
        steps = sorted(int(m.group(1)) for m in map(FRAME_NAME.fullmatch, os.listdir(folder)) if m)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError:
        return  # unreadable: the writes will say what is wrong
    if resume_step is None:
        clash = steps
    else:
        clash = [s for s in steps if s > resume_step]
    if not clash:
        return
    shown = f"frame_{clash[0]:08d}.png" + (f" … frame_{clash[-1]:08d}.png" if len(clash) > 1 else "")
    n = f"{len(clash)} frame{'s' if len(clash) > 1 else ''}"
    if resume_step is None:
        raise OutputRefused(f"--frames {folder} already holds {n} of another run ({shown}): new frames would mix "
                            "with them; give an empty or new folder, or remove them (a --resume run may add to "
                            "its own run's frames)")
    raise OutputRefused(f"--frames {folder} holds {n} past step {resume_step}, the step of the checkpoint --resume "
                        f"reads ({shown}): drawn by another run, or after that checkpoint; remove them (this run "
                        "draws those steps again) or give an empty or new folder")


@dataclass
class Output:
    option: str  # e.g. "--dump q.vtkhdf"
    files: dict[Path, str] = field(default_factory=dict)  # file → what it is, when not the option's own path
    folder: Path | None = None  # options that write one file per step: their folder …
    pattern: re.Pattern | None = None  # … and the names they write there
    pattern_text: str = ""

    def owns(self, path: Path) -> bool:
        real = _real(path)
        if real in {_real(f) for f in self.files}:
            return True
        return (self.folder is not None and real.parent == _real(self.folder)
                and bool(self.pattern.fullmatch(real.name)))

    def describe(self, path: Path) -> str:
        """'--dump q.vtkhdf (its companion q_octree.vtkhdf: the octree)' for a companion file."""
        for f, what in self.files.items():
            if _real(f) == _real(path) and what:
                return f"{self.option} (which also writes {f}: {what})"
        if self.folder is not None and self.owns(path):
            return f"{self.option} (which writes {self.pattern_text} there)"
        return self.option


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _vtkhdf_fields(engine, series: bool) -> dict:
    """The engine's fields (device views; nothing copied) plus its octree, as the writers see them."""
    fields = {k: f for k, f in engine.fields().items() if not series or isinstance(f, (Grid2D, Grid3D))}
    if getattr(engine, "leaf_blocks", None) is not None:
        fields["octree"] = None
    return fields


def _companions(targets: dict[str, Path], path: Path) -> dict[Path, str]:
    out = {path: ""}
    for name, target in targets.items():
        if target != path:
            out[target] = "the octree's leaves" if name == "octree" else f"the field {name}"
    return out


def output_places(args) -> list[tuple[str, Path, bool]]:
    """(option, path, is a folder) for every output ``nagare run`` or ``nagare soak`` was asked
    for; the files an option writes beside its own lie in the same folder."""
    places = []
    for name, flag in (("timings", "--timings"), ("dump", "--dump"), ("series", "--series"),
                       ("checkpoint", "--checkpoint"), ("json", "--json")):
        path = getattr(args, name, None)
        if path is not None:
            places.append((flag, Path(path), False))
    if getattr(args, "timings", None) is not None:  # its other half: the same folder, a name of its own
        csv_path, json_path = timing_paths(args.timings)
        places.append(("--timings", json_path if _real(csv_path) == _real(args.timings) else csv_path, False))
    for name, flag in (("dump_dir", "--dump-dir"), ("frames", "--frames")):
        path = getattr(args, name, None)
        if path is not None:
            places.append((flag, Path(path), True))
    return places


def plan_outputs(args, engine) -> list[Output]:
    """The outputs ``nagare run`` was asked for, with every file each one writes."""
    outs: list[Output] = []
    if args.timings is not None:
        csv_path, json_path = timing_paths(args.timings)
        other = json_path if _real(csv_path) == _real(args.timings) else csv_path
        outs.append(Output(f"--timings {args.timings}", {Path(args.timings): "", other: "the other half of the log"}))
    if args.dump is not None:
        files = {args.dump: ""}
        if str(args.dump).endswith(".vtkhdf"):
            files = _companions(vtkhdf_targets(_vtkhdf_fields(engine, False), args.dump), args.dump)
        outs.append(Output(f"--dump {args.dump}", files))
    if args.series is not None:
        outs.append(Output(f"--series {args.series}",
                           _companions(vtkhdf_targets(_vtkhdf_fields(engine, True), args.series, series=True),
                                       args.series)))
    if args.dump_dir is not None and (args.dump_every or 0):
        outs.append(Output(f"--dump-dir {args.dump_dir}", folder=args.dump_dir,
                           pattern=re.compile(rf"{re.escape(engine.family)}_\d{{8}}\.npz"),
                           pattern_text=f"{engine.family}_<step>.npz"))
    if args.frames is not None:
        outs.append(Output(f"--frames {args.frames}", folder=args.frames, pattern=re.compile(r"frame_\d{8}\.png"),
                           pattern_text="frame_<step>.png"))
    if args.checkpoint is not None:
        outs.append(Output(f"--checkpoint {args.checkpoint}", {args.checkpoint: ""}))
    return outs


def check_collisions(outs: list[Output], resume: Path | None = None) -> None:
    """OutputCollision (one line naming both options) if two outputs would write one file, an
    output's file is another's folder, or an output would replace the checkpoint being resumed."""
    for i, a in enumerate(outs):
        for b in outs[i + 1:]:
            for x, y in ((a, b), (b, a)):
                for f in x.files:
                    if y.owns(f):
                        raise OutputCollision(f"{a.describe(f)} and {b.describe(f)} would both write {f}: one "
                                              "would destroy the other; give them different names")
            for x, y in ((a, b), (b, a)):
                if x.folder is not None and any(_real(f) == _real(x.folder) for f in y.files):
                    raise OutputCollision(f"{y.option} names the folder {x.option} writes into; give the file "
                                          "another name")
    if resume is not None:
        for o in outs:
            if o.option.startswith("--checkpoint"):
                continue  # continuing a checkpoint in place is what --checkpoint with --resume is for
            if o.owns(resume):
                raise OutputCollision(f"{o.describe(resume)} would replace {resume}, the checkpoint --resume "
                                      "reads; write it elsewhere")


def lock_outputs(outs: list[Output]) -> OutputLocks:
    """Lock every output (files, and the folders of per-step outputs); OutputBusy names the live
    run that holds one. The folders are made here so their locks have a place."""
    locks = OutputLocks()
    for o in outs:
        for f in [*o.files, *([o.folder] if o.folder is not None else [])]:
            try:
                make_folder(_real(f).parent)
            except OSError:
                pass  # the write itself will say why
            locks.acquire(f, f"{o.option}" + (f" ({f})" if o.folder is None and len(o.files) > 1 else ""))
    return locks
