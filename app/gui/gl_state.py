"""GL state VisPy sets again with every draw, left out where GL already has it.

Before each visual's draw VisPy queues its whole GL state as GLIR commands (``set_state``: blend,
depth test, cull face, blend function and equation, line width …), whether or not the previous
visual left GL that way: about two thirds of a frame's commands. Each command is a ctypes call,
and a ctypes call lets go of the GIL: with the simulation's thread running Python (amr3d's launch
loop) the UI thread waits to get it back after every one of them, and the worker waits on the UI
thread in turn. :class:`RedundantStateFilter` sits in front of a context's GLIR parser and drops a
state command whose value GL has from an earlier command, and a uniform set again to the value
its program holds (the text visuals set their atlas, scale and size uniforms with every draw).
Everything else passes as it is.

One step earlier, :func:`install_visual_state_skip` has a visual queue only the commands of its
state the filter would not drop, from a list made once per distinct state: most visuals of a frame
ask for much of the state the one before them left (the same preset), and VisPy's ``set_state``
(a deep copy of the preset, enum lookups, a command each) and filtering its output again is most
of a visual's state cost on the UI thread.

What it knows is only what went through the parser: the canvas calls :meth:`forget` where GL
is touched around it (a new frame: Qt and the imgui HUD make raw GL calls between frames; after
the HUD; before an export's render), and a ``CURRENT`` command (the context made current again,
VisPy initialises it) clears it too. A program's uniforms are set only through the parser (the HUD
draws with a program of its own) and stay with the program while the context lives, so they are
kept across frames and forgotten when the program is linked again (GL resets its uniforms then),
created or deleted.
"""
from __future__ import annotations

import numpy as np
from vispy import gloo
from vispy.gloo.glir import as_enum
from vispy.gloo.wrappers import BaseGlooFunctions
from vispy.visuals.visual import Visual

# state set by value (the same arguments leave GL as it was); glEnable/glDisable by capability
BY_VALUE = frozenset({"glBlendFuncSeparate", "glBlendEquationSeparate", "glLineWidth", "glDepthFunc",
                      "glDepthMask", "glCullFace", "glFrontFace", "glPolygonOffset", "glColorMask",
                      "glClearColor"})
# calls that change state kept above under another name: what is known of it is forgotten
ALIASES = {"glBlendFunc": "glBlendFuncSeparate", "glBlendEquation": "glBlendEquationSeparate"}


class RedundantStateFilter:
    """Wraps ``parser.parse`` (a VisPy GlirParser) to leave out state commands GL already has."""

    def __init__(self, parser):
        self._inner = parser.parse
        self.known: dict = {}
        self.uniforms: dict = {}  # program id → {uniform name: (type, value)} as GL has them
        self.dropped = 0  # commands left out so far (tests, benchmarks)
        self.passed = 0  # commands handed to the parser so far (benchmarks: GLIR commands a frame)
        self._deleted: set = set()  # program ids deleted (VisPy never reuses an id)
        parser.parse = self.parse

    @classmethod
    def install(cls, parser) -> RedundantStateFilter:
        """The filter of ``parser``, installed once (canvases may share a context's parser)."""
        existing = getattr(parser, "_nagare_state_filter", None)
        if existing is None:
            existing = parser._nagare_state_filter = cls(parser)
        return existing

    def forget(self) -> None:
        """GL may have been changed outside the parser: the next state command of each kind runs."""
        self.known.clear()

    def parse(self, commands) -> None:
        kept = [c for c in commands if self._needed(c)]
        self.passed += len(kept)
        try:
            self._inner(kept)
        except BaseException:
            # the values recorded for the commands after the failing one never reached GL (a caught
            # glTexBuffer or shader error, then the fallback path): VisPy sends them all again next draw
            self.known.clear()
            self.uniforms.clear()
            raise

    def _needed(self, command) -> bool:
        kind = command[0]
        if kind == "UNIFORM":
            return self._uniform_needed(command)
        if kind == "CURRENT":  # made current (every frame): a program keeps its uniforms
            self.known.clear()
            return True
        if kind in ("LINK", "CREATE", "DELETE"):
            self.uniforms.pop(command[1], None)
            if kind == "DELETE":
                self._deleted.add(command[1])
            elif kind == "CREATE":
                self._deleted.discard(command[1])
            return True
        if kind != "FUNC":
            return True
        state = _state_of(command)
        if state is None:
            name = command[1]
            if name in BY_VALUE:  # an argument not plainly comparable: pass it on, unknown
                self.known.pop(name, None)
            else:
                self.known.pop(ALIASES.get(name), None)
            return True
        key, value = state
        if key in self.known and self.known[key] == value:
            self.dropped += 1
            return False
        self.known[key] = value
        return True

    def _uniform_needed(self, command) -> bool:
        program, name, type_, value = command[1:5]
        if program in self._deleted:  # after its DELETE in the same batch: nothing to remember
            return True
        held = self.uniforms.setdefault(program, {})
        was = held.get(name)
        if was is not None and was[0] == type_ and np.array_equal(was[1], value):
            self.dropped += 1
            return False
        held[name] = (type_, value)
        return True


_UNKNOWN = object()


def _state_of(command) -> tuple | None:
    """(key, value) of a FUNC command that sets state the filter keeps, else None."""
    name, args = command[1], command[2:]
    if name in ("glEnable", "glDisable") and len(args) == 1:
        return ("enabled", as_enum(args[0])), name == "glEnable"
    if name in BY_VALUE:
        try:
            value = tuple(as_enum(a) for a in args)
            hash(value)
        except (TypeError, ValueError):
            return None
        return name, value
    return None


class _Recorder(BaseGlooFunctions):
    """VisPy's set_state writing its commands into a list instead of a canvas' queue."""

    def __init__(self):
        self.commands: list = []

    @property
    def glir(self):
        return self

    def command(self, *args) -> None:
        self.commands.append(args)


# a visual's gl_state (as a hashable key) → [(command, its (key, value) for the filter or None)] that
# set_state queues for it
_STATE_COMMANDS: dict = {}


def _state_plan(state: dict) -> list | None:
    try:
        key = tuple(sorted(state.items()))
        hash(key)
    except TypeError:
        return None
    plan = _STATE_COMMANDS.get(key)
    if plan is None:
        rec = _Recorder()
        rec.set_state(**state)
        plan = _STATE_COMMANDS[key] = [(c, _state_of(c) if c[0] == "FUNC" else None) for c in rec.commands]
    return plan


def state_commands(state: dict) -> list | None:
    """The GLIR commands ``gloo.set_state(**state)`` queues (the same for the same arguments),
    None when the state has a value that cannot be a dictionary key."""
    plan = _state_plan(state)
    return None if plan is None else [c for c, _ in plan]


def install_visual_state_skip() -> None:
    """Wrap VisPy's ``Visual._configure_gl_state`` (once per process): on a canvas with a filter a
    visual queues the commands of its state (made once per distinct state, :func:`state_commands`)
    less those the filter would drop, instead of running VisPy's ``set_state`` every draw. While a
    state command is still queued (it may change what GL has before this one runs) all of them are
    queued and the filter sorts them out at the parse; elsewhere VisPy's set_state runs as before."""
    if getattr(Visual._configure_gl_state, "_nagare_skip", False):
        return
    inner = Visual._configure_gl_state

    def configure_gl_state(self):
        canvas = gloo.get_current_canvas()
        f = None if canvas is None else getattr(canvas.context.shared.parser, "_nagare_state_filter", None)
        plan = None if f is None else _state_plan(self._vshare.gl_state)
        if plan is None:
            inner(self)
            return
        glir = canvas.context.glir
        queued = getattr(getattr(glir, "_shared", None), "_commands", None)  # VisPy's queue (private)
        if queued is None or any(c[0] == "FUNC" for c in queued):
            for c, _ in plan:
                glir.command(*c)
            return
        known = f.known
        for c, state in plan:
            if state is not None and known.get(state[0], _UNKNOWN) == state[1]:
                f.dropped += 1  # GL has it: the filter would leave it out
            else:
                glir.command(*c)

    configure_gl_state._nagare_skip = True
    configure_gl_state.vispy = inner  # VisPy's own (tests compare the two)
    Visual._configure_gl_state = configure_gl_state
