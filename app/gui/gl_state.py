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
from vispy.gloo.glir import as_enum

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
        name, args = command[1], command[2:]
        if name in ("glEnable", "glDisable") and len(args) == 1:
            key, value = ("enabled", as_enum(args[0])), name == "glEnable"
        elif name in BY_VALUE:
            try:
                key, value = name, tuple(as_enum(a) for a in args)
                hash(value)
            except (TypeError, ValueError):  # an argument not plainly comparable: pass it on, unknown
                self.known.pop(name, None)
                return True
        else:
            self.known.pop(ALIASES.get(name), None)
            return True
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
