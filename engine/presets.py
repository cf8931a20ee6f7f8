"""Presets: TOML files validated into typed configs before anything runs.

A preset names its engine family (``engine = "lbm2d"``), carries a one-line ``description``,
physics sections defined by the family's pydantic model, ``[variants]`` and ``[view]`` defaults,
an optional ``extends = "other.toml"`` (merged key by key, the extending file wins) and an
optional ``[cpu_overrides]`` table merged in when the run uses the NumPy backend (so the default
showcase picks a size a laptop can animate).

Every problem is reported as one :class:`PresetError` line naming the file, the key, the given
value and what is allowed — or, where overrides (``--set``) caused it, those overrides instead of
the file (:func:`validate`).
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import stat
import sys
import tomllib
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from . import registry
from .errors import PresetError
from .families import FAMILIES, preset_model

NOTHING = PresetError.NOTHING
PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"


def applies_when(conditions: dict[str, list | tuple]) -> dict:
    """``json_schema_extra`` of a field that matters only for some values of other keys, e.g.
    ``Field(1.1, json_schema_extra=applies_when({"physics.problem": ["navier-stokes"]}))``: a form
    shows it only while every named key holds one of the listed values
    (:meth:`PresetBase.inapplicable_keys`). The field is still validated and kept as given."""
    return {"applies_when": {k: list(v) for k, v in conditions.items()}}


class Strict(BaseModel):
    """Unknown keys are errors; values are never silently coerced from strings."""

    # Validation goes through JSON in strict mode (see validate()): "64" is not an integer, 64.0 is
    # not an integer, true is not a number; lists are accepted for tuples; inf/NaN are refused.
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _no_subnormal(cls, value):
        # A subnormal float (0 < |v| < 2.2e-308) is never a meant value and overflows the first
        # division it meets (a wave2d dx of 1e-310 gave a math domain error, not a message).
        for v in (value if isinstance(value, (tuple, list)) else (value,)):
            for x in (v if isinstance(v, (tuple, list)) else (v,)):
                if isinstance(x, float) and x != 0 and abs(x) < sys.float_info.min:
                    raise ValueError(f"{x!r} is a subnormal number (0 < |v| < {sys.float_info.min:.4g}); "
                                     "use 0 or a normal value")
        return value


class ViewConfig(Strict):
    field: str | None = Field(None, description="field shown first (default: the engine's first)")
    colormap: Literal["viridis", "inferno", "magma", "plasma", "coolwarm", "rdbu", "gray", "turbo"] = "viridis"
    range: tuple[float, float] | None = Field(None, description="fixed colour range; omit for auto")
    slice_axis: Literal["x", "y", "z"] = "z"
    overlays: list[str] = Field(default_factory=list)
    planes: list[Literal["x", "y", "z"]] | None = Field(
        None, description="3D grids: the slice planes shown first (default: all three); e.g. [\"z\"] so a "
                          "body stays visible")
    leaves: bool = Field(True, description="3D grids: draw the octree leaves (Boxes) at first")
    particles_overlay: bool = Field(True, description="2D grids: draw the engine's particles (lbm2d's tracers) "
                                                      "over the field, in the window at first and in headless frames")


class RunConfig(Strict):
    steps: int = Field(500, ge=1, description="steps of a headless run when --steps is not given")
    steps_per_frame: int = Field(10, ge=1, description="steps advanced between displayed frames when the app "
                                                        "runs paced (`paced`); else the batch it steps at a time")
    paced: bool = Field(False, description="the app starts at steps_per_frame steps a frame (Run ▸ Speed), not "
                                           "as fast as it runs: for solvers so fast that frames at full speed "
                                           "skip the motion (a standing wave, a decay)")
    pause_at_end: bool = Field(False, description="the app pauses once at `steps` (a test problem with an end "
                                                  "time: its comparison holds there); Space runs on")


class PresetBase(Strict):
    """Fields every preset has; each family subclasses it with its physics sections."""

    engine: str
    description: str = Field(min_length=1, max_length=200)
    extends: str | None = None
    variants: dict[str, str | int | bool] = Field(default_factory=dict)
    view: ViewConfig = Field(default_factory=ViewConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    cpu_overrides: dict[str, Any] = Field(default_factory=dict)

    # Alternative ways to give one thing (lbm2d: grid.n or grid.nx/ny; physics.tau or .reynolds):
    # giving both in one place is an error, but a file that extends another, or [cpu_overrides],
    # replaces the other side instead of conflicting with it.
    exclusive_keys: ClassVar[tuple[tuple[tuple[str, ...], ...], ...]] = ()

    # Filled in by the loader, never from TOML:
    _source: str = PrivateAttr("<memory>")
    _content_hash: str = PrivateAttr("")

    @property
    def source(self) -> str:
        return self._source

    @classmethod
    def absolute_paths(cls, raw: dict, folder: Path) -> None:
        """Make the relative file paths of one preset file's raw dict absolute against ``folder``
        (the file's own), in place. Families with file-valued keys override it; none by default."""

    def derived_fields(self) -> dict[tuple[str, ...], str]:
        """Fields whose value this preset computed from others ({key path: from what}): a form
        that shows them must not send an untouched one back (it would contradict an edit of its
        source). None by default."""
        return {}

    @classmethod
    def inapplicable_keys(cls, values: dict) -> set[tuple[str, ...]]:
        """Key paths that do not apply to the preset ``values`` (a raw dict, as ``raw_dict`` gives
        or a form holds): the fields whose own declaration (:func:`applies_when`) names values of
        other keys that ``values`` does not hold. A parameter form hides them (the Navier–Stokes
        knobs of a 1D advection preset); nothing is dropped from the preset."""
        out: set[tuple[str, ...]] = set()
        for name, finfo in cls.model_fields.items():
            ann = finfo.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                fields = [((name, sub), sinfo) for sub, sinfo in ann.model_fields.items()]
            else:
                fields = [((name,), finfo)]
            for key, info in fields:
                extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
                cond = extra.get("applies_when") or {}
                if any(cls._value(values, path) not in allowed for path, allowed in cond.items()):
                    out.add(key)
        return out

    @classmethod
    def _value(cls, values: dict, dotted: str):
        """``values``' value at a dotted key, or the model's default where ``values`` leaves it out
        (a preset that does not name a key runs with its default)."""
        got = _get(values, dotted)
        if got is not NOTHING:
            return got
        model: Any = cls
        for part in dotted.split("."):
            info = getattr(model, "model_fields", {}).get(part)
            if info is None:
                return NOTHING
            default = info.get_default(call_default_factory=True)
            model = info.annotation
        return default

    @property
    def content_hash(self) -> str:
        return self._content_hash

    @field_validator("description")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if "\n" in v:
            raise ValueError("description must be one line")
        return v


# ---------------------------------------------------------------------------------------------
def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def resolve_path(name_or_path: str | Path, relative_to: Path | None = None) -> Path:
    """A path (absolute, or relative to ``relative_to`` / the cwd) or a preset name."""
    p = Path(name_or_path)
    candidates = []
    if relative_to is not None and not p.is_absolute():
        candidates.append(relative_to / p)
    candidates.append(p)
    if p.suffix != ".toml":
        candidates.append(PRESET_DIR / f"{p}.toml")
    else:
        candidates.append(PRESET_DIR / p.name)
    other = None
    for c in candidates:
        kind = _file_kind(c)
        if kind == "file":
            return c.resolve()
        if kind is not None and other is None:
            other = kind
    if other is not None:  # a FIFO, device or folder and no preset file: reading a FIFO blocks forever
        raise PresetError(str(name_or_path), None, NOTHING,
                          f"is a {other}, not a regular file; a preset is a TOML file")
    raise PresetError(str(name_or_path), None, NOTHING,
                      f"no such preset file or name; known presets: {', '.join(preset_names())}")


def _file_kind(path: Path) -> str | None:
    """'file' for a regular file (symlinks followed), what else it is, or None when absent."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


def _read_toml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PresetError(str(_display_path(path)), None, NOTHING,
                          f"cannot be read ({exc.__class__.__name__}: {exc})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(str(_display_path(path)), None, NOTHING, f"is not valid TOML ({exc})") from None


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _absolute_paths(raw: dict, engine, folder: Path) -> None:
    """Relative file paths a preset file names (its family's ``PresetBase.file_paths`` hook, e.g.
    amr3d's STL bodies) made absolute against that file's folder, in place — before it is merged
    with what it extends, so each path is read where the file that wrote it lies, and a
    checkpoint stores a path that resolves from anywhere."""
    if not isinstance(engine, str):
        return
    if engine not in FAMILIES:
        return
    preset_model(engine, str(folder)).absolute_paths(raw, folder)


def load_raw(path: Path, _chain: tuple[Path, ...] = ()) -> dict:
    """Read a preset and everything it extends, merged (the extending file wins)."""
    if path in _chain:
        cycle = " -> ".join(p.name for p in (*_chain, path))
        raise PresetError(str(_display_path(_chain[-1])), "extends", path.name,
                          f"extends cycle ({cycle}); remove one link")
    raw = _read_toml(path)
    parent = raw.get("extends")
    if parent is None:
        _absolute_paths(raw, raw.get("engine"), path.parent)
        return raw
    if not isinstance(parent, str):
        raise PresetError(str(_display_path(path)), "extends", parent,
                          "expected the name or path of another preset (a string)")
    try:
        parent_path = resolve_path(parent, relative_to=path.parent)
    except PresetError as exc:
        allowed = exc.allowed if "not a regular file" in exc.allowed else \
            f"no such preset; known presets: {', '.join(preset_names())}"
        raise PresetError(str(_display_path(path)), "extends", parent, allowed) from None
    base = load_raw(parent_path, (*_chain, path))
    _absolute_paths(raw, raw.get("engine", base.get("engine")), path.parent)
    drop_replaced_alternatives(base, raw)
    # The parent's [cpu_overrides] must not beat a value the extending file sets itself
    # (precedence: file ← cpu_overrides ← --set, and the extending file is "the file").
    if isinstance(base.get("cpu_overrides"), dict):
        _prune(base["cpu_overrides"], {k: v for k, v in raw.items() if k != "cpu_overrides"})
    return deep_merge(base, raw)


def _get(d: dict, dotted: str):
    node: Any = d
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return NOTHING
        node = node[part]
    return node


def _delete(d: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    node: Any = d
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def drop_replaced_alternatives(base: dict, over: dict) -> None:
    """Where ``over`` (an extending file, [cpu_overrides]) gives one side of an exclusive pair,
    remove the other side from ``base`` (and its [cpu_overrides]) so the two do not conflict."""
    engine = over.get("engine", base.get("engine"))
    if not isinstance(engine, str) or engine not in FAMILIES:
        return
    for sides in preset_model(engine).exclusive_keys:
        for side in sides:
            if not any(_get(over, k) is not NOTHING for k in side):
                continue
            for other in sides:
                if other == side:
                    continue
                for k in other:
                    if _get(over, k) is NOTHING:
                        _delete(base, k)
                        if isinstance(base.get("cpu_overrides"), dict):
                            _delete(base["cpu_overrides"], k)


def drop_sides_overrides_replace(raw: dict, overrides, model) -> dict:
    """``raw`` without the side of an exclusive pair that the overrides replace whole: ``--set
    grid.nx=64 --set grid.ny=48`` on a preset with ``grid.n`` gives a 64 × 48 grid (grid.n, from the
    file or its [cpu_overrides], goes). One key of a side alone replaces nothing (the pair's check
    says what to give), so a grid is never half from the file and half from the command line."""
    given = set()
    for text in overrides:
        path, _ = parse_override(text)
        if all(isinstance(p, str) for p in path):
            given.add(".".join(path))
    whole = [side for sides in model.exclusive_keys for side in sides if all(k in given for k in side)]
    if not whole:
        return raw
    out = copy.deepcopy(raw)
    for sides in model.exclusive_keys:
        for side in sides:
            if side in whole:
                for other in sides:
                    if other != side:
                        for k in other:
                            _delete(out, k)
                            if isinstance(out.get("cpu_overrides"), dict):
                                _delete(out["cpu_overrides"], k)
    return out


def _prune(overrides: dict, values: dict) -> None:
    """Remove from ``overrides`` every leaf key that ``values`` sets."""
    for k in list(overrides):
        if k not in values:
            continue
        if isinstance(overrides[k], dict) and isinstance(values[k], dict):
            _prune(overrides[k], values[k])
            if not overrides[k]:
                del overrides[k]
        else:
            del overrides[k]


_PART = re.compile(r"^([^\[\]]+)((?:\[\d+\])*)$")


def parse_override(text: str, source: str = "--set") -> tuple[list[str | int], Any]:
    """``grid.nx=128`` → (["grid", "nx"], 128); ``body[0].level=3`` → (["body", 0, "level"], 3): an
    index picks an element of a list of tables. Values are TOML literals; bare words are strings."""
    if "=" not in text:
        raise PresetError(source, None, text, "expected KEY=VALUE, e.g. grid.nx=128")
    key, value_text = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise PresetError(source, key, text, "expected a dotted key such as physics.tau")
    path: list[str | int] = []
    for part in key.split("."):
        m = _PART.match(part)
        if m is None:
            raise PresetError(source, key, text, "expected a dotted key such as physics.tau or body[0].level")
        path.append(m.group(1))
        path.extend(int(i) for i in re.findall(r"\d+", m.group(2)))
    try:
        value = tomllib.loads(f"v = {value_text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = value_text.strip()
    return path, value


def override_key(path: list[str | int]) -> str:
    """The key an override path names, as a message writes it: ``body[0].level``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


_MISSING = object()


def _at(value: Any, rest: list[str]) -> Any:
    """The part of an override's value at the dotted path ``rest`` below it, or _MISSING."""
    for part in rest:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def refuse_conflicting_overrides(overrides: list[str] | tuple[str, ...], source: str = "--set") -> None:
    """One line naming both when two overrides set the same key to different values, or a later one
    replaces a table that an earlier one set a key of (``--set grid.n=64 --set "grid={m=9}"``): the
    later would win silently. The same value twice, or a key below a table given before and not
    named in it (``--set "grid={n=64}" --set grid.m=9``), is no conflict."""
    parsed = []
    for text in overrides:
        try:
            parsed.append((text.strip(), *parse_override(text, source)))
        except PresetError:
            continue  # apply_overrides says what is wrong with it
    for j, (text_j, path_j, value_j) in enumerate(parsed):
        for text_i, path_i, value_i in parsed[:j]:
            if path_i[:len(path_j)] == path_j:      # the later sets the same key or a table above it
                clash = _at(value_j, path_i[len(path_j):]) != value_i
            elif path_j[:len(path_i)] == path_i:    # the later sets a key inside a table given before
                below = _at(value_i, path_j[len(path_i):])
                clash = below is not _MISSING and below != value_j
            else:
                continue
            if clash:
                raise PresetError(source, ".".join(path_j), NOTHING,
                                  f"given twice, differently: {source} {text_i} and {source} {text_j} (the later "
                                  "would replace the earlier silently); give it once")


def apply_overrides(raw: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """``raw`` with ``overrides`` applied in order (a later one wins: code composes a base list and
    its changes; a user's command line is checked by refuse_conflicting_overrides first). An index
    (``body[0].level``) edits that element of a list of tables; one the list does not have is refused."""
    out = copy.deepcopy(raw)
    for text in overrides:
        path, value = parse_override(text)
        node: Any = out
        for depth in range(len(path) - 1):
            node = _step_into(node, path, depth, value, text)
        last = path[-1]
        if isinstance(last, int):
            _check_index(node, path, len(path) - 1, value, text)
        node[last] = value
    return out


def _check_index(node: Any, path: list, depth: int, value: Any, text: str) -> None:
    above = override_key(path[:depth])
    if not isinstance(node, list):
        raise PresetError(f"--set {text.strip()}", override_key(path), value,
                          f"'{above}' is not a list, so it has no item [{path[depth]}]")
    if not 0 <= path[depth] < len(node):
        raise PresetError(f"--set {text.strip()}", override_key(path), value,
                          f"'{above}' has {len(node)} item{'s' if len(node) != 1 else ''} "
                          f"(indices 0 to {len(node) - 1})" if node else f"'{above}' is empty")


def _step_into(node: Any, path: list, depth: int, value: Any, text: str) -> Any:
    part = path[depth]
    if isinstance(part, int):
        _check_index(node, path, depth, value, text)
        if not isinstance(node[part], dict):
            raise PresetError(f"--set {text.strip()}", override_key(path), value,
                              f"'{override_key(path[:depth + 1])}' is a value, not a table")
        return node[part]
    if isinstance(path[depth + 1], int):
        return node.get(part) if isinstance(node, dict) else None
    if isinstance(node.get(part), list):
        raise PresetError(f"--set {text.strip()}", override_key(path), value,
                          f"'{part}' is a list of tables; name an item, e.g. {part}[0].{path[depth + 1]}")
    if not isinstance(node.get(part, {}), dict):
        raise PresetError(f"--set {text.strip()}", override_key(path), value, f"'{part}' is a value, not a section")
    return node.setdefault(part, {})


_UNION_TAGS = {"str", "int", "float", "bool"}


def _friendly(err: dict, model: type[BaseModel]) -> tuple[str, Any, str]:
    locs = list(err["loc"])
    if len(locs) > 1 and locs[-1] in _UNION_TAGS:  # pydantic names the union member tried
        locs.pop()
    err = dict(err, loc=tuple(locs))
    loc = ".".join(str(x) for x in locs)
    kind = err["type"]
    given = err.get("input", NOTHING)
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, err["loc"][:-1])
        return loc, given, "unknown key" + (f"; allowed keys here: {', '.join(allowed)}" if allowed else "")
    if kind == "missing" and err["loc"] and isinstance(err["loc"][-1], int):
        return ".".join(str(x) for x in err["loc"][:-1]), NOTHING, f"too few items (item {err['loc'][-1]} is missing)"
    if kind == "missing":
        return loc, NOTHING, "required key is missing"
    if not err["loc"] or (kind == "value_error" and isinstance(given, dict)):
        given = NOTHING  # a check across several keys (of the preset, of one table): its message names them
    msg = err["msg"]
    msg = msg[0].lower() + msg[1:] if msg else msg
    msg = msg.replace("input should be", "expected").replace("value error, ", "")
    # pydantic writes 1e-12 as 0.000000000001 and 1e12 as 1000000000000
    msg = re.sub(r"(?<![\d.])(\d+\.\d{7,}|\d{10,})(?![\d.])", lambda m: f"{float(m.group()):g}", msg)
    return loc, given, msg


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    m: Any = model
    for part in loc:
        f = getattr(m, "model_fields", {}).get(part)
        if f is None:
            return []
        m = f.annotation
    return list(getattr(m, "model_fields", {}).keys())


def validate(raw: dict, source: str, backend: str | None = None,
             overrides: list[str] | tuple[str, ...] = (), origins: dict[str, str] | None = None) -> PresetBase:
    """Validate a merged preset dict. Order of precedence: file ← [cpu_overrides] (NumPy
    backend) ← ``overrides`` (``--set``), so the command line always wins.

    A refusal names its cause: the file, or the override(s) without which the preset passes that
    check — ``--set KEY=VALUE``, or how ``origins`` says the command line gave it ({override text:
    e.g. "--gpus 4"} for an override an option made)."""
    try:
        return _validate(raw, source, backend, overrides)
    except PresetError as exc:
        if exc.source != source or not overrides:
            raise  # a malformed --set says so itself; with no override the file is the cause
        culprits = _culprits(exc, raw, source, backend, list(overrides))
        if not culprits:
            raise
        raise _blamed(exc, culprits, raw, source, list(overrides), origins or {}) from None


def _validate(raw: dict, source: str, backend: str | None, overrides) -> PresetBase:
    engine = apply_overrides(raw, overrides).get("engine")
    if engine is None:
        raise PresetError(source, "engine", NOTHING, "required key is missing; name an engine family")
    if not isinstance(engine, str):
        raise PresetError(source, "engine", engine,
                          f"expected the name of an engine family (a string); allowed: {', '.join(FAMILIES)}")
    model = preset_model(engine, source)
    cpu = apply_overrides(raw, overrides).get("cpu_overrides", {})  # --set cpu_overrides.X counts too
    runs_cpu = backend == "numpy" and isinstance(cpu, dict) and bool(cpu)
    # the variant that runs takes the --set; a side of an exclusive pair they replace whole goes first
    replaced = drop_sides_overrides_replace(raw, overrides, model)
    candidates = [("", apply_overrides(replaced, overrides) if not runs_cpu else raw)]
    if isinstance(cpu, dict) and cpu:
        # Validate the NumPy-backend variant too, whichever backend runs, so a broken override
        # is caught on a GPU machine as well. The command line's --set applies to the variant that
        # runs; the other one is checked as the file (and any --set cpu_overrides.X) gives it: a dt
        # the CPU grid allows may exceed the GPU grid's stability limit, and the other way round.
        base = copy.deepcopy(replaced if runs_cpu else raw)
        if runs_cpu:
            cpu = apply_overrides(replaced, overrides).get("cpu_overrides", {})
        drop_replaced_alternatives(base, cpu)
        merged = deep_merge(base, cpu)
        candidates.append(("cpu_overrides.", apply_overrides(merged, overrides) if runs_cpu else merged))
    validated = {}
    for prefix, data in candidates:
        try:
            validated[prefix] = model.model_validate_json(json.dumps(data, default=str), strict=True)
        except ValidationError as exc:
            key, given, allowed = _friendly(exc.errors()[0], model)
            if prefix and not key.startswith(prefix):
                key = prefix + key if key else prefix.rstrip(".")
            raise PresetError(source, key, given, allowed) from None
    preset = validated["cpu_overrides." if runs_cpu else ""]
    _check_variants(preset, source)
    preset._source = source
    dumped = json.dumps(preset.model_dump(mode="json"), sort_keys=True, default=str)
    preset._content_hash = hashlib.sha256(dumped.encode()).hexdigest()[:16]
    return preset


def _refusal(raw: dict, source: str, backend: str | None, overrides) -> PresetError | None:
    """The refusal of ``raw`` under ``overrides``, or None when it passes."""
    try:
        _validate(raw, source, backend, overrides)
    except PresetError as exc:
        return exc
    return None


def _check(exc: PresetError | None) -> tuple | None:
    """Which check a refusal is, whatever values it quotes: its key and its words."""
    if exc is None:
        return None
    return exc.key, re.sub(r"-?\d+(?:\.\d*)?(?:e[+-]?\d+)?", "#", exc.allowed)


def _culprits(exc: PresetError, raw: dict, source: str, backend: str | None, overrides: list[str]) -> list[str]:
    """The overrides that ``exc`` (a refusal said of the file) comes from, or none when it is the
    file's: each override without which this check passes (a value it set, a table it made, one
    side of a check across keys); else one that gave the refused key; else, when the file alone
    passes, those that change what the check says (two that each break it)."""
    said, check = str(exc), _check(exc)
    without = [_refusal(raw, source, backend, overrides[:i] + overrides[i + 1:]) for i in range(len(overrides))]
    strong = [ov for ov, other in zip(overrides, without) if _check(other) != check]
    if strong:
        return strong
    weak = [ov for ov, other in zip(overrides, without) if str(other) != said]
    keys = {exc.key or "", (exc.key or "").removeprefix("cpu_overrides.")}  # as the NumPy variant names it too
    gave = [ov for ov in weak if any(key == _dotted_key(ov) or key.startswith(_dotted_key(ov) + ".") for key in keys)]
    if gave:
        return gave
    if _check(_refusal(raw, source, backend, [])) == check:
        return []
    return weak or overrides


def _blamed(exc: PresetError, culprits: list[str], raw: dict, source: str, overrides: list[str],
            origins: dict[str, str]) -> PresetError:
    """``exc`` said of the override(s) that caused it, naming the preset they were applied to."""
    names = [origins.get(ov, f"--set {ov.strip()}") for ov in culprits]
    key = exc.key
    to_cpu = any(parse_override(ov)[0][0] == "cpu_overrides" for ov in culprits)
    on = source
    if key and key.startswith("cpu_overrides") and not to_cpu:
        # the NumPy variant ([cpu_overrides] merged in) refused the --set: name the key as typed
        key = key.removeprefix("cpu_overrides").lstrip(".") or None
        if exc.given is NOTHING:  # a check across keys: say so where values it names come from [cpu_overrides]
            without = _refusal(raw, source, None, overrides)  # the overrides on the file without them
            if without is None or without.allowed != exc.allowed:
                on = f"{source} with its [cpu_overrides], as a NumPy run takes it"
    for ov in culprits:  # pydantic's body.0.level as the override wrote it: body[0].level
        dotted = _dotted_key(ov)
        if key and (key == dotted or key.startswith(dotted + ".")):
            key = override_key(parse_override(ov)[0]) + key[len(dotted):]
    return PresetError(f"{' and '.join(names)} (on {on})", key, exc.given, exc.allowed)


def _dotted_key(override: str) -> str:
    """An override's key as pydantic's error locations write it: ``body.0.level``."""
    return ".".join(str(p) for p in parse_override(override)[0])


def blame_refusal(exc: PresetError, source: str, overrides: list[str] | tuple[str, ...],
                  origins: dict[str, str] | None = None) -> PresetError:
    """A refusal of a validated preset (an engine's build check, e.g. amr3d's body resolution) said
    of ``source``, said instead of the override(s) that set its key, a table above it or a key
    inside it; ``exc`` itself when none did. (The loader's own refusals are attributed by
    :func:`validate`, which can try the preset without each override; a build is too costly for that.)"""
    if exc.source != source or not exc.key:
        return exc
    key = re.sub(r"\[(\d+)\]", r".\1", exc.key)  # body[0].diameter as body.0.diameter
    gave = []
    for ov in overrides:
        try:
            k = _dotted_key(ov)
        except PresetError:
            continue
        if key == k or key.startswith(k + ".") or k.startswith(key + "."):
            gave.append(origins.get(ov, f"--set {ov.strip()}") if origins else f"--set {ov.strip()}")
    if not gave:
        return exc
    return PresetError(f"{' and '.join(gave)} (on {source})", exc.key, exc.given, exc.allowed)


def _check_variants(preset: PresetBase, source: str) -> None:
    """Variant defaults must name registered axes and choices (availability is checked later)."""
    axes = registry.axes(preset.engine)
    for axis, value in preset.variants.items():
        if axis not in axes:
            raise PresetError(source, f"variants.{axis}", value,
                              f"unknown variant axis; allowed: {', '.join(axes) or 'none'}")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if text not in axes[axis].choices:
            raise PresetError(source, f"variants.{axis}", value, f"allowed: {', '.join(axes[axis].choices)}")


def load_preset(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = (),
                backend: str | None = None, origins: dict[str, str] | None = None) -> PresetBase:
    """A preset by name or path with ``overrides`` (``--set`` texts) applied; ``origins`` as in
    :func:`validate`."""
    path = resolve_path(name_or_path)
    return validate(load_raw(path), str(_display_path(path)), backend, overrides, origins)


def _display_path(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def raw_dict(preset: PresetBase) -> dict:
    return preset.model_dump(mode="json")
