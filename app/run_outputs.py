"""What a ``nagare run`` will write, checked before its first step.

Every output option is turned into the files it writes (the timing log's .csv and .json, a
VTKHDF dump's companion files such as amr3d's ``stem_octree.vtkhdf``, a series' companions) or,
for the options that write a file per step, a folder and the pattern of its names. Two options
that would write one file are refused (one would destroy the other), and so is an output that
would replace the checkpoint ``--resume`` reads. Then every output is locked
(engine/outputlock.py), so a second run writing any of them is refused while this one lives.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from nagare.engine.atomic import make_folder
from nagare.engine.errors import NagareError
from nagare.engine.fields import Grid2D, Grid3D
from nagare.engine.outputlock import OutputLocks

from .timinglog import timing_paths
from .vtkhdf import vtkhdf_targets


class OutputCollision(NagareError):
    """Two outputs of one run would write the same file."""


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
