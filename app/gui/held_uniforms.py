"""Uniforms a visual sets only when their value changes.

A gloo program turns every assignment of a uniform into a GLIR command, the same value or not,
and the canvas' visuals are handed the same size, colour range or sprite scale with most packets
and frames. The canvas' state filter drops such a command before GL (gl_state.py), but building
it, queueing it and filtering it is the UI thread's time every frame. :class:`HeldUniforms` keeps
what a visual last gave its shared program and passes a value on only when it differs.

It must be the only writer of the names it is used for: a value set around it would be taken for
one it still holds.
"""
from __future__ import annotations

import numpy as np

_UNSET = object()


class HeldUniforms:
    """The uniforms of one shared program (a visual's MultiProgram) as last set through here."""

    def __init__(self, program):
        self._program = program
        self._values: dict = {}

    def set(self, name: str, value, by_identity: bool = False) -> bool:
        """``program[name] = value`` unless it holds that value (``by_identity``: that object, for a
        texture or an array VisPy uploads as one); True when it was set."""
        held = self._values.get(name, _UNSET)
        if held is not _UNSET and (held is value if by_identity else np.array_equal(held, value)):
            return False
        self._program[name] = value
        # a copy: an array the caller changes in place afterwards is not taken for the value held
        self._values[name] = value if by_identity else np.array(value, copy=True)
        return True
