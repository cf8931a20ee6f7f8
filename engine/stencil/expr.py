"""Expression trees of a point update, built by tracing the user's Python function.

The user's function is called once with symbolic proxies: ``f[+1, 0, 0]`` on an input proxy
gives a :class:`Load`, arithmetic on nodes builds :class:`Bin`/:class:`Neg`/:class:`Call`
nodes, Python numbers become :class:`Const`. The tree keeps the user's parenthesisation and
evaluation order exactly, which is what lets the NumPy and CUDA outputs agree bit for bit.

Everything a stencil cannot express (branching on values, comparisons, ``float(x)``, unknown
types, arrays used without an offset, offsets beyond the halo, wrong number of offsets) raises
:class:`StencilError` at trace time, naming the user's file and line.
"""
from __future__ import annotations

import math
import numbers
import os
import sys
from dataclasses import dataclass

from ..errors import NagareError

AXES = ("x", "y", "z")


class StencilError(NagareError):
    """A user stencil is malformed; raised before anything is compiled."""


def _user_site() -> str:
    """file:line of the first frame outside this package (the user's expression)."""
    here = os.path.dirname(os.path.abspath(__file__))
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == here:
        f = f.f_back
    if f is None:
        return "<unknown>"
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"


class Node:
    __slots__ = ()
    __hash__ = object.__hash__

    def __add__(self, o):
        return Bin("+", self, as_node(o))

    def __radd__(self, o):
        return Bin("+", as_node(o), self)

    def __sub__(self, o):
        return Bin("-", self, as_node(o))

    def __rsub__(self, o):
        return Bin("-", as_node(o), self)

    def __mul__(self, o):
        return Bin("*", self, as_node(o))

    def __rmul__(self, o):
        return Bin("*", as_node(o), self)

    def __truediv__(self, o):
        return Bin("/", self, as_node(o))

    def __rtruediv__(self, o):
        return Bin("/", as_node(o), self)

    def __neg__(self):
        return Neg(self)

    def __pos__(self):
        return self

    def __pow__(self, p):
        # Only x**2: NumPy computes it as x*x (exact), so both backends agree; general powers
        # would round differently in NumPy's pow and CUDA's powf.
        if isinstance(p, numbers.Integral) and p == 2:
            return Bin("*", self, self)
        raise StencilError(f"{_user_site()}: only x**2 is supported in a stencil (got **{p!r}); "
                           f"write products explicitly")

    def _no(self, *_):
        raise StencilError(f"{_user_site()}: a stencil value cannot be compared or used in if/and/or/"
                           f"bool(); stencils are branch-free expressions (use nagare.engine.stencil.fmin/fmax)")

    __bool__ = __lt__ = __le__ = __gt__ = __ge__ = _no

    def __eq__(self, o):
        self._no()

    def __ne__(self, o):
        self._no()

    def __float__(self):
        raise StencilError(f"{_user_site()}: float() of a stencil value is not known at trace time; "
                           f"keep it symbolic")

    __int__ = __index__ = __float__

    def __array_ufunc__(self, *args, **kwargs):
        raise StencilError(f"{_user_site()}: NumPy functions cannot be applied to stencil values; use "
                           f"nagare.engine.stencil.sqrt/exp/sin/cos/fabs/fmin/fmax")


@dataclass(eq=False, slots=True)
class Const(Node):
    value: float


@dataclass(eq=False, slots=True)
class Param(Node):
    name: str


@dataclass(eq=False, slots=True)
class Load(Node):
    array: str
    offset: tuple[int, ...]  # x first (x, y[, z]), as P2 writes idx.ix<+1,0,0>()


@dataclass(eq=False, slots=True)
class Bin(Node):
    op: str
    a: Node
    b: Node


@dataclass(eq=False, slots=True)
class Neg(Node):
    a: Node


@dataclass(eq=False, slots=True)
class Call(Node):
    fn: str
    args: tuple[Node, ...]


FUNCTIONS = {"sqrt": 1, "exp": 1, "sin": 1, "cos": 1, "fabs": 1, "fmin": 2, "fmax": 2}


def as_node(v) -> Node:
    if isinstance(v, Node):
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        if isinstance(v, ArrayProxy):
            raise StencilError(f"{_user_site()}: array '{v._name}' used without an offset; "
                               f"write {v._name}[{', '.join(['0'] * v._ndim)}] for the centre point")
        raise StencilError(f"{_user_site()}: unsupported value {v!r} ({type(v).__name__}) in a stencil "
                           f"expression; use numbers, parameters and array[offsets]")
    value = float(v)
    if not math.isfinite(value):
        raise StencilError(f"{_user_site()}: non-finite constant {value} in a stencil expression")
    return Const(value)


def call(fn: str, *args) -> Node:
    return Call(fn, tuple(as_node(a) for a in args))


class ArrayProxy:
    """Stands for an input array while tracing; only ``a[offsets]`` is allowed on it."""

    def __init__(self, name: str, ndim: int, halo: tuple[int, ...]):
        self._name, self._ndim, self._halo = name, ndim, halo

    def __getitem__(self, idx) -> Load:
        if not isinstance(idx, tuple):
            idx = (idx,)
        site = _user_site()
        if len(idx) != self._ndim:
            raise StencilError(f"{site}: {self._name}[{', '.join(map(repr, idx))}] has {len(idx)} offset(s); "
                               f"this {self._ndim}D stencil needs {self._ndim} ({', '.join(AXES[:self._ndim])})")
        for axis, o in zip(AXES, idx):
            if isinstance(o, bool) or not isinstance(o, numbers.Integral):
                raise StencilError(f"{site}: offset {o!r} along {axis} in {self._name}[...] must be an integer "
                                   f"constant")
        for axis, o, h in zip(AXES, idx, self._halo):
            if abs(int(o)) > h:
                raise StencilError(f"{site}: offset {int(o):+d} along {axis} in {self._name}[...] is beyond the "
                                   f"declared halo {h}; raise halo or shorten the stencil")
        return Load(self._name, tuple(int(o) for o in idx))

    def _no_arith(self, *_):
        raise StencilError(f"{_user_site()}: array '{self._name}' used without an offset; write "
                           f"{self._name}[{', '.join(['0'] * self._ndim)}] for the centre point")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_arith
    __truediv__ = __rtruediv__ = __neg__ = __pow__ = __bool__ = __float__ = _no_arith


def walk(node: Node):
    """Post-order traversal (children first)."""
    if isinstance(node, Bin):
        yield from walk(node.a)
        yield from walk(node.b)
    elif isinstance(node, Neg):
        yield from walk(node.a)
    elif isinstance(node, Call):
        for a in node.args:
            yield from walk(a)
    yield node


def to_python(node: Node) -> str:
    """A readable, fully parenthesised rendering (for comments and messages)."""
    if isinstance(node, Const):
        return repr(node.value)
    if isinstance(node, Param):
        return node.name
    if isinstance(node, Load):
        return f"{node.array}[{', '.join(f'{o:+d}' if o else '0' for o in node.offset)}]"
    if isinstance(node, Bin):
        return f"({to_python(node.a)} {node.op} {to_python(node.b)})"
    if isinstance(node, Neg):
        return f"-{to_python(node.a)}"
    if isinstance(node, Call):
        return f"{node.fn}({', '.join(to_python(a) for a in node.args)})"
    raise TypeError(node)
