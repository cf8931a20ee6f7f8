"""The ``nagare`` command.

``nagare``                 the app (a window where there is a display; otherwise a bounded
                           headless run of the default preset that says where its output went)
``nagare run PRESET …``    headless run with progress, frames, dumps, timing logs, checkpoints
``nagare soak PRESET --minutes N``  a long headless run that reports memory (RSS, GPU) growth
``nagare presets``         the presets with their one-line descriptions
``nagare info``            backend, device, measured copy bandwidth (the roofline)
``nagare bench FAMILY``    the family's registered variant matrix, as a table + JSON/Markdown/PNG
``nagare bench stencil``   P2's launch-configuration table (exhaustive search vs auto-tuner)
``nagare tune show|clear`` the auto-tuner's persistent cache
``nagare stencil list|show NAME``  built-in stencils and the CUDA generated from them

Exit status: 0 done; 2 bad preset/option/checkpoint (nothing was run); 3 the run diverged;
4 the run finished but something it was asked to write was not (a summary says what);
130 Ctrl-C, 143 SIGTERM (both still write the timing log and a checkpoint).
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import time
from pathlib import Path

from nagare.engine.backend import BACKEND_CHOICES, get_backend
from nagare.engine.checkpoint import load_checkpoint
from nagare.engine.device import copy_bandwidth
from nagare.engine.errors import CheckpointError, NagareError, PresetError
from nagare.engine.families import FAMILIES, create_engine, decomposable_families
from nagare.engine.fields import Grid2D, Grid3D

from nagare import __version__

# Each command imports what it needs when it runs: the presets (pydantic, ≈0.4 s), the writers, the
# stencil compiler and the window (PyQt6, VisPy, ≈2 s) would make `nagare --help`, every usage error
# and a headless run start slowly. Only light modules are imported here.

EXIT_USAGE = 2  # bad preset, bad option, unavailable backend/variant: nothing was run


def default_preset() -> str:
    # heavy start-up import (pydantic presets, ≈0.4 s; the note above the constants)
    from nagare.engine.presets import preset_names

    names = preset_names()
    for name in ("lbm2d-cylinder", "diffusion3d"):
        if name in names:
            return name
    return names[0]


class UsageError(NagareError):
    """A command-line syntax error (argparse's), shown as one line like every other refusal."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message over several lines and exits
        sub = self.prog.removeprefix("nagare").strip()
        raise UsageError(f"{sub + ': ' if sub else ''}{message} (see `{self.prog} --help`)")


def _timings_path(text: str) -> Path:
    # heavy start-up import (it loads the presets)
    from .timinglog import timing_paths

    try:
        timing_paths(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return Path(text)


def _dump_path(text: str) -> Path:
    """--dump FILE: .npz (NumPy) or .vtkhdf (ParaView); any other suffix would be an .npz under a
    misleading name, so it is refused, as --timings refuses one."""
    if not text.endswith((".npz", ".vtkhdf")):
        raise argparse.ArgumentTypeError(f"{text!r}: expected FILE.npz (NumPy) or FILE.vtkhdf (ParaView)")
    return Path(text)


FPS_HELP = ("the app's frame cap: at most N new frames a second (default 30; up to the display's refresh "
            "rate, where it is clamped; View ▸ Frame cap changes it while running)")


def _frame_cap(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of frames per second") from None
    if not math.isfinite(v) or not 1 <= v <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected frames per second from 1 to 1000")
    return v


def _positive_seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive, finite number of seconds")
    return v


def _positive_minutes(text: str) -> float:
    try:
        return _positive_seconds(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive, finite number of minutes") from None


def _non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number ≥ 0")
    return v


def _non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v}: expected 0 (no parallel compile) or a positive number of processes")
    return v


def _kv(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected AXIS=CHOICE, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), v.strip()


RUN_OUTPUTS_HELP = """\
outputs refused together (exit 2, before the first step; docs/export.md):
  two options that would write one file: --timings T.csv writes T.json too; --dump Q.vtkhdf and
  --series S.vtkhdf also write Q_<field>.vtkhdf / S_<field>.vtkhdf beside them (amr3d: Q_octree.vtkhdf,
  S_octree.vtkhdf); --dump-dir DIR writes DIR/FAMILY_<step>.npz and --frames DIR writes
  DIR/frame_<step>.png, so --dump, --checkpoint or --timings may not take one of those names;
  an output that would replace the --resume checkpoint (--checkpoint may: it continues it);
  an output another live nagare run is writing (the refusal names its PID);
  an output whose folder cannot be made or takes no files (a file in the way, /proc, read-only),
  or whose name is too long; --frames DIR holding another run's frames (--resume: frames up to the
  checkpoint's step are its own run's).
a write that fails later (full disk, ulimit -f, a folder removed while running) is one line naming
the file, the cause and what is still there; the run goes on with its other outputs and exits with
status 4."""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="nagare", description="GPU fluid-solver laboratory.")
    p.add_argument("--version", action="version", version=f"nagare {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="more log output")
    p.add_argument("--fps", type=_frame_cap, help=FPS_HELP + "; bare `nagare` only, else `nagare gui --fps`")
    sub = p.add_subparsers(dest="command")

    r = sub.add_parser("run", help="run a preset headless", epilog=RUN_OUTPUTS_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("preset", help="a preset name (see `nagare presets`) or a path to a TOML file; "
                                  "'-' with --resume: the preset stored in the checkpoint")
    r.add_argument("--steps", type=int, help="steps to run (default: the preset's run.steps)")
    r.add_argument("--backend", choices=BACKEND_CHOICES, default="auto",
                   help="numpy, cupy, or auto (CuPy where a CUDA GPU is usable, else NumPy; default: %(default)s)")
    r.add_argument("--variant", type=_kv, action="append", default=[], metavar="AXIS=CHOICE")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a preset key, e.g. --set grid.nx=128")
    r.add_argument("--dump", type=_dump_path, metavar="FILE.npz|FILE.vtkhdf",
                   help="write the final fields (.vtkhdf: for ParaView, docs/export.md)")
    r.add_argument("--dump-every", type=int, metavar="K", help="dump into --dump-dir / a --series step every K steps")
    r.add_argument("--series", type=Path, metavar="FILE.vtkhdf",
                   help="one time-series VTKHDF file for ParaView: the fields at the start, every --dump-every K "
                        "steps (default: 10 a run) and at the end (docs/export.md)")
    r.add_argument("--dump-dir", type=Path, metavar="DIR",
                   help="write the fields as FAMILY_STEP.npz into DIR every --dump-every K steps")
    r.add_argument("--timings", type=_timings_path, metavar="FILE.csv|FILE.json",
                   help="timing log, streamed as the run goes: FILE.csv and FILE.json (metadata + the same rows) "
                        "are both written; any other suffix is refused")
    r.add_argument("--frames", type=Path, metavar="DIR", help="write PNG frames here")
    r.add_argument("--every", type=int, metavar="K", help="a frame every K steps (default: 10 frames a run), and "
                   "one of the last state")
    r.add_argument("--legend", action="store_true",
                   help="draw the colour bar (label, units, range) and the axes with units beside each --frames PNG "
                        "(a 1-D profile: axes and the legend of its curves; octree leaves: axes)")
    r.add_argument("--checkpoint", type=Path, metavar="FILE", help="write a checkpoint at the end")
    r.add_argument("--checkpoint-every", type=int, metavar="K",
                   help="with --checkpoint: also write it every K steps (each one replaces the last)")
    r.add_argument("--resume", type=Path, metavar="FILE", help="continue from a checkpoint")
    r.add_argument("--batch", type=int, help="steps per batch between host checks (default: preset)")
    r.add_argument("--gpus", type=int, metavar="N", help="split the grid into N sub-domains along its slowest axis "
                   "(one per GPU through NCCL when N GPUs are visible, else N on one device; lbm2d, diffusion3d, "
                   "wave2d; the same as --set decomp.parts=N; docs/multi-gpu.md)")
    r.add_argument("--quiet", action="store_true",
                   help="print errors only (no progress, summary or notes such as the backend fallback)")

    pr = sub.add_parser("presets", help="list presets (on a CPU with what their [cpu_overrides] change)")
    pr.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")

    i = sub.add_parser("info", help="backend, device and measured bandwidth")
    i.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    i.add_argument("--measure", action="store_true", help="measure the copy bandwidth again")

    b = sub.add_parser("bench", help="benchmark a family's variant matrix")
    b.add_argument("family", help="the engine family to measure: " + ", ".join(FAMILIES))
    b.add_argument("--backend", choices=BACKEND_CHOICES, default="auto",
                   help="numpy, cupy, or auto (CuPy where a CUDA GPU is usable, else NumPy; default: %(default)s)")
    b.add_argument("--out", help="output folder (default: bench-FAMILY-DEVICE-DATE, or …-2, …-3 when an "
                                 "earlier run that day holds results there)")
    b.add_argument("--case", action="append", help="only these cases (repeatable); the grid families (lbm2d, wave2d, "
                   "diffusion3d) also take any grid size, e.g. 2048x2048 or 128x128x64")
    b.add_argument("--min-time", type=_positive_seconds, default=0.5,
                   help="seconds measured per cell (> 0; default: %(default)s)")
    b.add_argument("--only", action="append", metavar="TEXT",
                   help="only variants whose label contains TEXT (repeatable)")
    b.add_argument("--with", dest="with_choices", action="append", metavar="AXIS=CHOICE",
                   help="add this variant choice to every measured cell (repeatable), e.g. --with graph=on: "
                        "the other choices measured together with it")
    b.add_argument("--jobs", type=_non_negative_int, default=0,
                   help="compile the matrix's kernels first in this many processes (families that "
                        "compile one module per configuration, e.g. lbm2d's temporal-blocking grid)")

    for name, text in (("tune", "the auto-tuner's cache: show | clear"),
                       ("stencil", "stencil framework: list | show NAME (the generated CUDA)")):
        x = sub.add_parser(name, help=text, add_help=False)
        x.add_argument("rest", nargs=argparse.REMAINDER)

    s = sub.add_parser("soak", help="a long headless run that reports memory growth (RSS, GPU)")
    s.add_argument("preset")
    s.add_argument("--minutes", type=_positive_minutes, required=True, help="how long to run")
    s.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    s.add_argument("--variant", type=_kv, action="append", default=[], metavar="AXIS=CHOICE")
    s.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--batch", type=int, help="steps per batch (default: the preset's run.steps_per_frame)")
    s.add_argument("--samples", type=int, default=30, help="memory samples over the run (default 30)")
    s.add_argument("--timings", type=_timings_path, metavar="FILE.csv|FILE.json",
                   help="keep the timing log here (default: a temporary one, deleted at the end)")
    s.add_argument("--json", type=Path, metavar="FILE", help="write the samples and the summary as JSON")
    s.add_argument("--max-growth-mib", type=_non_negative_float, metavar="MIB",
                   help="exit 1 when RSS (or GPU memory) grew by more than this after the warm-up")

    g = sub.add_parser("gui", help="open the app window")
    g.add_argument("preset", nargs="?")
    g.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    g.add_argument("--fps", type=_frame_cap, help=FPS_HELP)
    return p


# ---------------------------------------------------------------------------------------------
def cmd_presets(args) -> int:
    # heavy start-up import (pydantic presets)
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset, preset_names

    from . import presetinfo

    # on NumPy a preset's [cpu_overrides] change what runs: said as the window's list says it
    on_cpu = get_backend(getattr(args, "backend", "auto")).name == "numpy"
    names = preset_names()
    width = max(map(len, names))
    for name in names:
        try:
            desc = load_preset(name).description
            note = presetinfo.cpu_note(presetinfo.raw_preset(name)) if on_cpu else ""
            desc += f" ({note})" if note else ""
        except NagareError as exc:
            desc = f"(broken: {exc})"
        print(f"{name:<{width}}  {desc}")
    return 0


def cmd_info(args) -> int:
    be = get_backend(args.backend)
    info = be.device_info()
    print(f"nagare {__version__}")
    print(f"backend:   {be.name}" + (f"  (auto: {be.reason})" if be.reason else ""))
    print(f"device:    {info.name}")
    if info.multiprocessors:
        print(f"SMs:       {info.multiprocessors}   compute capability {info.compute_capability}")
        print(f"memory:    {info.memory_bytes / 2**30:.1f} GiB")
        print(f"CUDA:      runtime {info.cuda_runtime}, driver API {info.cuda_driver}, "
              f"driver {info.driver_version}; CuPy {info.cupy_version}")
    print(f"NumPy:     {info.numpy_version}")
    bw = copy_bandwidth(be, refresh=args.measure)
    print(f"bandwidth: {bw / 1e9:.1f} GB/s (large device copy, bytes read + written; the roofline)")
    return 0


def cmd_bench(args) -> int:
    # heavy start-up import (pydantic presets)
    from .bench_report import bench_command

    if args.with_choices and args.family in ("stencil", "scale"):
        raise NagareError(f"bench {args.family}: --with applies to a family's variant matrix; this bench has its own")
    if args.family == "stencil":  # P2's launch-configuration experiment (engine/stencil/bench.py)
        from nagare.engine.stencil.bench import main as stencil_bench  # heavy: the stencil compiler

        out = [] if not args.out else ["--json", f"{args.out}/stencil.json", "--markdown", f"{args.out}/stencil.md"]
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
        return stencil_bench(out)

    if args.family == "scale":  # multi-GPU weak/strong scaling (engine/decomp/bench.py, docs/multi-gpu.md)
        from nagare.engine.decomp.bench import main as scale_bench  # heavy: every decomposable family

        argv = ["--json", f"{args.out}/scale.json"] if args.out else []
        argv += [f"--only={c}" for c in args.case or []] + [f"--only={t}" for t in args.only or []]
        if args.min_time is not None:
            argv += ["--min-time", str(args.min_time)]
        return scale_bench(argv, args.backend)

    if args.family not in FAMILIES:
        raise NagareError(f"unknown family {args.family!r}; known: {', '.join(FAMILIES)}")
    return bench_command(args.family, get_backend(args.backend), args.out, args.case, args.min_time,
                         ["nagare", *sys.argv[1:]], only=args.only, jobs=args.jobs, with_choices=args.with_choices)


# Preset sections that do not change the simulation: a checkpoint may resume under other values.
NON_PHYSICS_KEYS = ("description", "extends", "variants", "view", "run", "cpu_overrides")


def _physics(preset_dict: dict) -> dict:
    return {k: v for k, v in preset_dict.items() if k not in NON_PHYSICS_KEYS}


def _first_difference(a, b, prefix: str = "") -> tuple[str, object, object] | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            d = _first_difference(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{prefix}{k}.")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):  # e.g. [[body]]: name the entry
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{prefix}{i}.")
            if d:
                return d
        return None
    return None if a == b else (prefix.rstrip("."), a, b)


def _normalised(stored: dict, preset) -> dict:
    """A checkpoint's stored preset read through today's preset model: keys added to the model since
    the checkpoint was written take their defaults (the simulation they describe is the same), so
    an older checkpoint still resumes. A stored preset today's model refuses is compared as stored."""
    # heavy start-up import (pydantic presets)
    from nagare.engine.presets import raw_dict

    try:
        return raw_dict(type(preset).model_validate(stored))
    except Exception:
        return stored


def check_checkpoint_fits(ckpt: dict, preset, resume: Path, own_preset: bool) -> None:
    """Refuse (one line) a checkpoint of another family or another preset, before the variants
    are resolved or an engine is built."""
    # heavy start-up import (pydantic presets)
    from nagare.engine.presets import raw_dict

    meta = ckpt["meta"]
    how = f"resume it with its own preset: nagare run - --resume {resume}"
    if meta["family"] != preset.engine:
        raise CheckpointError(f"{resume}: this checkpoint is for {meta['family']}, not {preset.engine} "
                              f"({preset.source}); {how}")
    diff = _first_difference(_physics(_normalised(meta["preset"], preset)), _physics(raw_dict(preset)))
    if diff is None:
        return
    key, theirs, ours = diff
    if own_preset:
        raise CheckpointError(f"{resume}: --set {key}={ours!r} changes the checkpoint's simulation ({key} = "
                              f"{theirs!r}); a checkpoint continues the same simulation (only [run], [view] and "
                              "[variants] may change on resume)")
    belongs = meta.get("preset_source") or repr(meta["preset"].get("description", "?"))
    if belongs == preset.source:
        raise CheckpointError(f"{resume}: this checkpoint was made with other settings of {belongs} (a --set?): "
                              f"{key} is {theirs!r} there, {ours!r} here; {how}")
    raise CheckpointError(f"{resume}: this checkpoint belongs to preset {belongs} (hash "
                          f"{meta.get('preset_hash', '?')}), not {preset.source} (hash {preset.content_hash}): "
                          f"{key} is {theirs!r} there, {ours!r} here; {how}")


# ---- multi-GPU (engine/decomp, docs/multi-gpu.md): --gpus N is --set decomp.parts=N ----------------
def variant_choices(args) -> dict[str, str]:
    """``--variant AXIS=CHOICE`` options as {axis: choice}; one line naming both when an axis is given
    twice with different choices, or differently by ``--set variants.AXIS=…``, or a ``--set`` key
    twice with different values (refuse_conflicting_overrides): one would win silently."""
    # heavy start-up import (pydantic presets)
    from nagare.engine.presets import parse_override, refuse_conflicting_overrides

    refuse_conflicting_overrides(getattr(args, "overrides", None) or ())
    given: dict[str, str] = {}
    for axis, choice in getattr(args, "variant", None) or ():
        if axis in given and given[axis] != choice:
            raise PresetError("--variant", axis, PresetError.NOTHING,
                              f"given twice, differently: --variant {axis}={given[axis]} and "
                              f"--variant {axis}={choice}; give each axis once")
        given[axis] = choice
    for text in getattr(args, "overrides", None) or ():
        try:
            path, value = parse_override(text)
        except PresetError:
            continue  # the loader says what is wrong with it
        if len(path) == 2 and path[0] == "variants" and path[1] in given and str(value) != given[path[1]]:
            raise PresetError("--variant", path[1], PresetError.NOTHING,
                              f"given twice, differently: --set {text.strip()} and --variant {path[1]}="
                              f"{given[path[1]]}; give it once")
    return given


def _apply_gpus(args) -> None:
    # heavy start-up import (pydantic presets)
    from nagare.engine.presets import parse_override

    gpus = getattr(args, "gpus", None)
    if gpus is None:
        return
    if gpus < 1:
        raise PresetError("--gpus", None, gpus, "expected a positive number of sub-domains")
    for text in args.overrides:  # both given: one line, not one silently winning
        try:
            path, value = parse_override(text)
        except PresetError:
            continue  # the loader says what is wrong with it
        if path == ["decomp", "parts"] and value != gpus:
            raise PresetError("--gpus", None, gpus, f"--set {text.strip()} says otherwise (--gpus N is "
                                                    "decomp.parts = N): give one of them")
    args.overrides = [*args.overrides, f"decomp.parts={gpus}"]


def _origins(args) -> dict[str, str]:
    """The overrides an option made, as the user typed that option (a refusal names `--gpus N`,
    never a `--set decomp.parts=N` nobody typed)."""
    gpus = getattr(args, "gpus", None)
    return {} if gpus is None else {f"decomp.parts={gpus}": f"--gpus {gpus}"}


def _gpus_in_message(args, exc: PresetError) -> None:
    """A refusal that --gpus N caused (the loader names it as the cause) speaks of N sub-domains,
    not of the preset key decomp.parts the option sets."""
    gpus = getattr(args, "gpus", None)
    if gpus is None or f"--gpus {gpus}" not in exc.source:
        return
    allowed = exc.allowed.replace(f"decomp.parts = {gpus}: ", "", 1)
    key = exc.key
    if key == "decomp.parts":  # a bound of the key itself, e.g. at most 64: that many sub-domains
        key, allowed = None, f"{allowed} sub-domains"
    if (key, allowed) != (exc.key, exc.allowed):
        raise PresetError(exc.source, key, exc.given, allowed) from None


def _explain_gpus(args, backend, exc) -> None:
    """--gpus on a family that is not decomposed: say that, not "unknown key decomp"."""
    if getattr(args, "gpus", None) is None or "decomp" not in str(exc):
        return
    # heavy start-up import (pydantic presets)
    from nagare.engine.presets import load_preset

    others = [o for o in args.overrides if not o.startswith("decomp.parts=")]
    try:
        family = load_preset(args.preset, others, backend=backend.name, origins=_origins(args)).engine
    except PresetError:
        return
    decomposable = decomposable_families()
    if family not in decomposable:
        raise PresetError("--gpus", None, args.gpus, f"the {family} family is not decomposed (--gpus works for "
                          f"{', '.join(sorted(decomposable))})") from None


def build_engine(args, backend, ckpt: dict | None = None):
    """The validated preset and its engine for ``run``/``soak`` (restored from ``ckpt`` if given)."""
    # heavy start-up imports (pydantic presets)
    from nagare.engine.contract import OutOfMemory
    from nagare.engine.decomp.config import DecompError
    from nagare.engine.presets import blame_refusal, load_preset, validate

    variants = variant_choices(args)
    _apply_gpus(args)  # multi-GPU: --gpus N
    if args.preset == "-" and ckpt is None:
        raise PresetError("-", None, PresetError.NOTHING,
                          "'-' is the preset stored in a checkpoint: give --resume FILE (or name a preset)")
    if ckpt is not None and args.preset == "-":
        # The stored preset already holds the values it ran with: no [cpu_overrides] again.
        stored = {k: v for k, v in ckpt["meta"]["preset"].items() if k != "cpu_overrides"}
        try:
            preset = validate(stored, f"{args.resume} (preset)", None, args.overrides, _origins(args))
        except PresetError as exc:
            _gpus_in_message(args, exc)
            raise
    else:
        try:
            preset = load_preset(args.preset, args.overrides, backend=backend.name, origins=_origins(args))
        except PresetError as exc:
            _explain_gpus(args, backend, exc)
            _gpus_in_message(args, exc)
            raise
    if ckpt is not None:
        check_checkpoint_fits(ckpt, preset, args.resume, own_preset=args.preset == "-")
        # The checkpoint's variants are defaults, not demands: a GPU run's checkpoint resumes on
        # NumPy with the NumPy choices (one log line says so).
        preset = preset.model_copy(update={"variants": {**preset.variants, **ckpt["meta"]["variants"]}})
    try:
        engine = create_engine(preset, backend, variants=variants)
    except PresetError as exc:  # a build check (amr3d: a body too small for its level) a --set may have caused
        raise blame_refusal(exc, preset.source, args.overrides, _origins(args)) from None
    except OutOfMemory as exc:  # too large for this machine: because of a --set?
        culprits = [] if ckpt is not None else _memory_culprits(args, backend, variants, preset)
        if not culprits or not str(exc).startswith(f"{preset.source}: "):
            raise
        origins = _origins(args)
        named = " and ".join(origins.get(ov, f"--set {ov.strip()}") for ov in culprits)
        raise OutOfMemory(f"{named} (on {preset.source}): {str(exc).removeprefix(f'{preset.source}: ')}") from None
    except DecompError as exc:  # the split --gpus asked for cannot be built here (NCCL without GPUs …)
        if getattr(args, "gpus", None) is None:
            raise
        transport = getattr(getattr(preset, "decomp", None), "transport", "auto")
        by = next((f"--set {o.strip()}" for o in args.overrides if o.strip().startswith("decomp.transport")),
                  f"the preset's decomp.transport = {transport!r}")
        why = f" ({by} asks for it; 'auto' runs the sub-domains on one device when fewer GPUs are " \
              "there)" if transport != "auto" else ""
        raise DecompError(f"--gpus {args.gpus} (on {preset.source}): {exc}{why}") from None
    if ckpt is not None:
        try:
            engine.restore(ckpt)
            engine.check_physical()  # finite (load_checkpoint checked it) is not enough: within the bounds
        except CheckpointError as exc:
            raise CheckpointError(f"{args.resume}: {exc}") from None
    return preset, engine


class _Estimated(Exception):
    def __init__(self, need: int):
        super().__init__(need)
        self.need = need


def _estimated_bytes(preset, backend, variants) -> int | None:
    """What the engine of ``preset`` says it needs (its memory check's figure), without allocating
    anything: the engine is built up to that check and stopped there. None if it cannot tell."""
    from nagare.engine.families import engine_class_for

    def stop_at_the_check(engine):
        raise _Estimated(engine.estimated_bytes())

    try:
        cls = engine_class_for(preset)
        type(f"{cls.__name__}Estimate", (cls,), {"_check_memory": stop_at_the_check})(preset, backend,
                                                                                      variants=variants)
    except _Estimated as done:
        return done.need
    except Exception:  # a variant of the preset that cannot be built: no figure, and no culprit found by it
        return None
    return None


def _memory_culprits(args, backend, variants, preset) -> list[str]:
    """The --set overrides a memory refusal comes from (D47's rule for a refused preset, with the
    engine's estimate as the check): those without which the preset fits; else those without
    which it needs less."""
    # heavy start-up import (pydantic presets)
    from nagare.engine.contract import available_memory
    from nagare.engine.presets import load_preset

    overrides = list(args.overrides)
    if not overrides:
        return []
    full, free = _estimated_bytes(preset, backend, variants), available_memory(backend)
    needs = {}
    for i, ov in enumerate(overrides):
        try:
            other = load_preset(args.preset, overrides[:i] + overrides[i + 1:], backend=backend.name,
                                origins=_origins(args))
        except PresetError:
            continue
        needs[ov] = _estimated_bytes(other, backend, variants)
    fits = [ov for ov, need in needs.items() if need is not None and free is not None and need <= free]
    if fits or full is None:
        return fits
    return [ov for ov, need in needs.items() if need is not None and need < full]


def cmd_run(args, argv: list[str]) -> int:
    # heavy start-up import (presets, writers)
    from .headless import RunOptions

    if args.steps is not None and args.steps < 1:
        raise PresetError("--steps", None, args.steps, "expected a positive number of steps")
    for name in ("every", "dump_every", "checkpoint_every", "batch"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise PresetError(f"--{name.replace('_', '-')}", None, v, "expected a positive integer")
    if args.dump_every and not args.dump_dir and not args.series:
        raise PresetError("--dump-every", None, args.dump_every, "needs --dump-dir DIR or --series FILE.vtkhdf")
    if args.series is not None and not args.series.name.endswith(".vtkhdf"):
        raise PresetError("--series", None, str(args.series), "expected a FILE.vtkhdf")
    if args.checkpoint_every and not args.checkpoint:
        raise PresetError("--checkpoint-every", None, args.checkpoint_every, "needs --checkpoint FILE")
    if args.every and not args.frames:
        raise PresetError("--every", None, args.every, "needs --frames DIR (it is the period of the frames)")
    if args.legend and not args.frames:
        raise PresetError("--legend", None, PresetError.NOTHING, "needs --frames DIR (it draws on the frames)")
    # heavy start-up import (writers)
    from .run_outputs import check_frames_folder, check_places, output_places

    check_places(output_places(args))  # before anything is built or run
    backend = get_backend(args.backend)
    ckpt = load_checkpoint(args.resume) if args.resume else None
    if args.frames is not None:
        check_frames_folder(args.frames, None if ckpt is None else int(ckpt["meta"]["step"]))
    preset, engine = build_engine(args, backend, ckpt)
    if args.series:
        # an octree is offered by leaf_blocks (app/vtkhdf_amr.py): asked whether it exists, not
        # copied to the host before step 1
        if not any(isinstance(engine.field(n), (Grid2D, Grid3D)) for n in engine.field_names()) \
                and getattr(engine, "leaf_blocks", None) is None:
            raise PresetError("--series", None, str(args.series),
                              f"a VTKHDF time series holds grids and octrees; {preset.source} has neither "
                              "(its profiles and particles: --dump FILE.vtkhdf at the end, or --dump-every)")
        changing = engine.fixed_layout_reason()
        if changing:
            raise PresetError("--series", None, str(args.series),
                              f"a VTKHDF time series needs one layout for every step, and {changing}; "
                              "use --dump-every K --dump-dir DIR (one file per dump)")
    steps = args.steps or preset.run.steps
    if args.dump_dir is not None and not args.dump_every:  # as --series: about 10 dumps a run
        args.dump_every = max(1, steps // 10)
    every = args.every or (max(1, steps // 10) if args.frames else None)
    opts = RunOptions(steps=steps, timings=args.timings, dump=args.dump, dump_every=args.dump_every,
                      dump_dir=args.dump_dir, frames_dir=args.frames, frame_every=every, frame_legend=args.legend,
                      checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
                      batch=args.batch or preset.run.steps_per_frame, quiet=args.quiet, argv=argv,
                      series=args.series,
                      series_every=(args.dump_every or max(1, steps // 10)) if args.series else None)
    from .run_outputs import check_collisions, lock_outputs, plan_outputs

    outputs = plan_outputs(args, engine)
    check_collisions(outputs, args.resume)
    locks = lock_outputs(outputs)
    try:
        return _run_locked(args, argv, preset, engine, backend, opts)
    finally:
        locks.release()


def _run_locked(args, argv, preset, engine, backend, opts) -> int:
    from .headless import run  # heavy start-up import (writers)

    if not args.quiet:
        sel = ", ".join(f"{k}={v}" for k, v in engine.selection.items())
        print(f"nagare: {preset.source} on {backend.name} ({backend.device_info().name}); {sel}", file=sys.stderr)
        parts, transport = getattr(engine, "parts", 1), getattr(engine, "transport", None)
        if parts > 1 and transport is not None:  # a split run says how it is split (on one device or one a GPU)
            where = ("one per GPU through NCCL" if transport.name == "nccl"
                     else f"all on this one {'GPU' if backend.is_gpu else 'CPU'}")
            print(f"nagare: the grid is split into {parts} sub-domains, {where}", file=sys.stderr)
        if backend.name == "numpy" and args.preset != "-":
            # heavy start-up import (pydantic presets)
            from .presetinfo import cpu_note

            note = cpu_note(_without_user_keys(preset.model_dump(mode="json"), args.overrides), effective=True)
            if note:  # the run is not the size the description names
                print(f"nagare: the preset's [cpu_overrides] apply ({note})", file=sys.stderr)
    return run(engine, opts)


def _without_user_keys(raw: dict, overrides: list[str]) -> dict:
    """``raw`` with the [cpu_overrides] keys that a --set also gave taken out of that table: the
    value that runs is the user's, not the preset's, and the note on the overrides names only the
    preset's own (a --set of a whole table, e.g. grid, takes the keys inside it)."""
    # heavy start-up import (pydantic presets)
    from nagare.engine.presets import parse_override

    cpu = raw.get("cpu_overrides")
    if not isinstance(cpu, dict) or not overrides:
        return raw
    given = []
    for text in overrides:
        try:
            path, _value = parse_override(text)
        except PresetError:
            continue
        keys = [str(p) for p in path]
        given.append(keys[1:] if keys[0] == "cpu_overrides" else keys)  # --set cpu_overrides.X is the user's too

    def prune(table: dict, prefix: list[str]) -> dict:
        out = {}
        for k, v in table.items():
            here = [*prefix, str(k)]
            if any(here[:len(g)] == g for g in given):
                continue  # the user's own value (or a table the user replaced)
            out[k] = prune(v, here) if isinstance(v, dict) else v
        return {k: v for k, v in out.items() if v != {}}

    return {**raw, "cpu_overrides": prune(cpu, [])}


def cmd_soak(args, argv: list[str]) -> int:
    # heavy start-up import (the headless run)
    from .soak import soak

    if args.batch is not None and args.batch < 1:
        raise PresetError("--batch", None, args.batch, "expected a positive integer")
    if args.samples < 2:
        raise PresetError("--samples", None, args.samples, "expected at least 2 samples")
    args.resume = None
    # heavy start-up import (writers)
    from .run_outputs import check_places, output_places

    check_places(output_places(args))
    backend = get_backend(args.backend)
    preset, engine = build_engine(args, backend)
    return soak(engine, minutes=args.minutes, batch=args.batch or preset.run.steps_per_frame,
                samples=args.samples, timings=args.timings, json_path=args.json,
                max_growth_mib=args.max_growth_mib, argv=argv)


def has_display() -> bool:
    """Whether a window can open: X11/Wayland on Linux and the BSDs (or a Qt platform chosen
    explicitly, e.g. QT_QPA_PLATFORM=offscreen); macOS and Windows always have one."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or os.environ.get("QT_QPA_PLATFORM"))


NO_DISPLAY_GUI = ("the app needs a display and there is none (DISPLAY and WAYLAND_DISPLAY are unset): run "
                  "`nagare gui` in a desktop session or over `ssh -X`, or run headless: `nagare run PRESET --frames "
                  "DIR` (bare `nagare` does that for the default preset)")


def headless_default(backend_name: str = "auto") -> int:
    """No display: a bounded run of the default preset with frames and a timing log."""
    preset = default_preset()
    out = Path("nagare-output") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    root = out.parent if out.parent.exists() else Path.cwd()
    if not os.access(root, os.W_OK | os.X_OK):
        print(f"nagare: no display found, so no window, and the headless run of '{preset}' cannot write its "
              f"output into {root.resolve()}/ (not writable): cd to a writable folder and run nagare again",
              file=sys.stderr)
        return 2
    # the preset's own length (its run.steps: the cylinder's street formed, the dam's column fallen),
    # as `nagare run` does, with its 10 frames; the progress line says how long is left
    print(f"nagare: no display found, so no window; running the default preset '{preset}' headless instead "
          f"(its run.steps; frames, timing log, final fields) into {out}/")
    argv = ["run", preset, "--backend", backend_name, "--frames", str(out / "frames"),
            "--timings", str(out / "timings.csv"), "--dump", str(out / "fields.npz")]
    status = main(argv)
    if status == 0:
        print(f"nagare: done. Output in {out.resolve()}/ (frames/*.png, timings.csv, timings.json, fields.npz)")
    return status


def launch_app(preset: str | None, backend: str, fps: float | None = None) -> int:
    try:
        # PyQt6 and VisPy: only the window needs them; headless runs never load them
        from .gui import launch
    except ImportError as exc:
        print(f"nagare: the desktop app cannot start ({exc}); running headless instead", file=sys.stderr)
        return headless_default(backend)
    return launch(preset, backend, fps)


class Terminated(KeyboardInterrupt):
    """SIGTERM outside the run loop (building an engine, a benchmark): stop like Ctrl-C does."""


def _raise_terminated(signum, frame):
    raise Terminated


def _sigterm_like_ctrl_c():
    """Install the SIGTERM handler; returns a function that puts the previous one back."""
    try:
        old = signal.signal(signal.SIGTERM, _raise_terminated)
    except (ValueError, AttributeError):  # not the main thread, or no SIGTERM here
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, old)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("tune", "stencil"):  # own parsers (app/tune_cmd.py, app/stencil_cmd.py)
        # heavy start-up imports (the stencil compiler, the tuner)
        from .stencil_cmd import main as stencil_main
        from .tune_cmd import main as tune_main

        return (tune_main if argv[0] == "tune" else stencil_main)(argv[1:])
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(f"nagare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    quiet = getattr(args, "quiet", False) and not args.verbose
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR if quiet else logging.WARNING,
                        format="%(message)s")
    restore = _sigterm_like_ctrl_c() if args.command not in (None, "gui") else (lambda: None)
    try:
        if args.command is None:
            return launch_app(None, "auto", args.fps) if has_display() else headless_default()
        if args.command == "gui":
            if not has_display():
                print(f"nagare: {NO_DISPLAY_GUI}", file=sys.stderr)
                return EXIT_USAGE
            return launch_app(args.preset, args.backend, args.fps)
        if args.command == "run":
            return cmd_run(args, ["nagare", *argv])
        if args.command == "soak":
            return cmd_soak(args, ["nagare", *argv])
        if args.command == "presets":
            return cmd_presets(args)
        if args.command == "info":
            return cmd_info(args)
        if args.command == "bench":
            return cmd_bench(args)
    except NagareError as exc:
        print(f"nagare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        print("nagare: interrupted" + (" (SIGTERM)" if isinstance(exc, Terminated) else ""), file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except BrokenPipeError:
        # the reader went away (`nagare presets | head`): nothing more to say to it, and no traceback;
        # stdout pointed at /dev/null so the interpreter's own flush at exit does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        restore()
    return 0


if __name__ == "__main__":
    sys.exit(main())
