"""A user stencil: the point update traced once into expression trees, checked before compiling.

    from nagare.engine.stencil import stencil

    @stencil(inputs=["f"], outputs=["fn"], params=["r"], halo=1, ndim=3)
    def diffusion7(f, r):
        c = f[0, 0, 0]
        return c + r * (((f[-1, 0, 0] + f[1, 0, 0]) + (f[0, -1, 0] + f[0, 1, 0]))
                        + (f[0, 0, -1] + f[0, 0, 1]) - 6.0 * c)

Offsets are written x first, as P2's ``idx.ix<+1,0,0>()``; arrays are stored z-major
(``a[k, j, i]``, x fastest). The function takes the inputs and params by name and returns one
expression per output (a single expression, a tuple in ``outputs`` order, or a dict).
"""
from __future__ import annotations

import hashlib
import inspect
import keyword
import os
import re
from collections.abc import Callable, Sequence

from .expr import AXES, ArrayProxy, Load, Node, Param, StencilError, as_node, to_python, walk

_C_RESERVED = {"int", "float", "double", "long", "short", "char", "void", "const", "return", "for", "if",
               "while", "do", "else", "switch", "case", "default", "break", "continue", "struct", "union",
               "static", "extern", "signed", "unsigned", "auto", "register", "volatile", "goto", "sizeof",
               "typedef", "enum", "inline", "restrict", "bool", "true", "false", "new", "delete", "this",
               "template", "typename", "class", "namespace", "operator"}


def _check_names(kind: str, names: Sequence[str], where: str) -> tuple[str, ...]:
    if isinstance(names, str):
        names = (names,)
    names = tuple(names)
    for n in names:
        if not isinstance(n, str) or not n.isidentifier() or keyword.iskeyword(n):
            raise StencilError(f"{where}: {kind} name {n!r} is not a valid identifier")
        if n.startswith("nagare_") or n in _C_RESERVED:
            raise StencilError(f"{where}: {kind} name {n!r} is reserved; rename it")
    return names


class Stencil:
    def __init__(self, fn: Callable, *, inputs: Sequence[str], outputs: Sequence[str],
                 params: Sequence[str] = (), halo: int | Sequence[int] = 1, ndim: int = 3, name: str | None = None):
        self.fn = fn
        self.name = name or re.sub(r"\W", "", getattr(fn, "__name__", "")) or "stencil"
        try:
            file = inspect.getsourcefile(fn) or "<unknown>"
            line = inspect.getsourcelines(fn)[1]
        except (OSError, TypeError):
            file, line = "<unknown>", 0
        self.location = f"{os.path.basename(file)}:{line}"
        where = f"stencil '{self.name}' ({self.location})"
        if not self.name.isidentifier():
            raise StencilError(f"{where}: the stencil name must be an identifier")
        if ndim not in (2, 3):
            raise StencilError(f"{where}: ndim must be 2 or 3, got {ndim!r}")
        self.ndim = ndim
        if isinstance(halo, int):
            halo = (halo,) * ndim
        halo = tuple(int(h) for h in halo)
        if len(halo) != ndim or any(h < 0 for h in halo):
            raise StencilError(f"{where}: halo must be one integer ≥ 0 or {ndim} of them (x, y[, z]); got {halo}")
        self.halo = halo
        self.inputs = _check_names("input", inputs, where)
        self.outputs = _check_names("output", outputs, where)
        self.params = _check_names("param", params, where)
        if not self.outputs:
            raise StencilError(f"{where}: a stencil needs at least one output array")
        every = self.inputs + self.outputs + self.params
        dup = sorted({n for n in every if every.count(n) > 1})
        if dup:
            raise StencilError(f"{where}: name(s) {', '.join(dup)} declared twice (inputs, outputs and params "
                               f"must be distinct: an output cannot be read in the same sweep)")
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            raise StencilError(f"{where}: cannot read the function's signature") from None
        args = [p.name for p in sig.parameters.values()]
        kinds = {p.kind for p in sig.parameters.values()}
        if kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
            raise StencilError(f"{where}: *args/**kwargs are not allowed; name each input and param")
        declared = set(self.inputs) | set(self.params)
        if set(args) != declared:
            raise StencilError(
                f"{where}: the function takes ({', '.join(args)}) but declares inputs ({', '.join(self.inputs)}) "
                f"and params ({', '.join(self.params)}); they must be the same names"
                + (f"; missing: {', '.join(sorted(declared - set(args)))}" if declared - set(args) else "")
                + (f"; not declared: {', '.join(sorted(set(args) - declared))}" if set(args) - declared else ""))
        self.exprs = self._trace(where)
        loads = {}
        for e in self.exprs.values():
            for n in walk(e):
                if isinstance(n, Load):
                    loads[(n.array, n.offset)] = n
        self.loads = sorted(loads)  # distinct (array, offset) pairs
        try:
            self.source_text = inspect.getsource(fn)
        except (OSError, TypeError):
            self.source_text = ""

    def _trace(self, where: str) -> dict[str, Node]:
        proxies = {n: ArrayProxy(n, self.ndim, self.halo) for n in self.inputs}
        proxies.update({n: Param(n) for n in self.params})
        out = self.fn(**proxies)
        if isinstance(out, dict):
            if set(out) != set(self.outputs):
                raise StencilError(f"{where}: returned outputs {sorted(out)} but declared {list(self.outputs)}")
            values = [out[n] for n in self.outputs]
        elif isinstance(out, (tuple, list)):
            if len(out) != len(self.outputs):
                raise StencilError(f"{where}: returned {len(out)} value(s) for {len(self.outputs)} declared "
                                   f"output(s) ({', '.join(self.outputs)})")
            values = list(out)
        else:
            if len(self.outputs) != 1:
                raise StencilError(f"{where}: returned one value for {len(self.outputs)} declared outputs "
                                   f"({', '.join(self.outputs)}); return a tuple or a dict")
            values = [out]
        exprs = {}
        for name, v in zip(self.outputs, values):
            if v is None:
                raise StencilError(f"{where}: output '{name}' is None; did the function forget to return?")
            exprs[name] = as_node(v)
        return exprs

    # ---- identity and display ----------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """Changes whenever the traced update, halo or layout changes (tuning-cache key)."""
        text = repr((self.name, self.ndim, self.halo, self.inputs, self.outputs, self.params,
                     [to_python(self.exprs[o]) for o in self.outputs]))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def describe(self) -> str:
        lines = [f"stencil {self.name} ({self.ndim}D, halo {dict(zip(AXES, self.halo))}) from {self.location}",
                 f"  inputs: {', '.join(self.inputs)}   outputs: {', '.join(self.outputs)}   "
                 f"params: {', '.join(self.params) or '-'}",
                 f"  {len(self.loads)} distinct loads per point"]
        lines += [f"  {o} = {to_python(self.exprs[o])}" for o in self.outputs]
        return "\n".join(lines)

    def __repr__(self):
        return f"<Stencil {self.name} {self.ndim}D halo={self.halo} {self.inputs}->{self.outputs}>"


def stencil(*, inputs: Sequence[str], outputs: Sequence[str], params: Sequence[str] = (),
            halo: int | Sequence[int] = 1, ndim: int = 3, name: str | None = None):
    """Decorator: turn a point-update function into a :class:`Stencil`."""

    def wrap(fn):
        return Stencil(fn, inputs=inputs, outputs=outputs, params=params, halo=halo, ndim=ndim, name=name)

    return wrap
