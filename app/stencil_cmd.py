"""``nagare stencil list|show``: the stencil framework's built-in stencils and their generated CUDA."""
from __future__ import annotations

import argparse
import importlib
import sys

from nagare.engine.errors import NagareError
from nagare.engine.stencil import Stencil, StencilError, generate
from nagare.engine.stencil.library import LIBRARY


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nagare stencil", description="Show stencils and the CUDA generated from them.")
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="the built-in stencils")
    s = sub.add_parser("show", help="print a stencil's traced update and its generated CUDA source")
    s.add_argument("name", help="a built-in stencil (see `nagare stencil list`) or module:attribute")
    s.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    s.add_argument("--boundary", choices=("periodic", "fixed"), default="periodic")
    return p


def resolve(name: str):
    if name in LIBRARY:
        return LIBRARY[name]
    if ":" not in name:
        raise StencilError(f"unknown stencil {name!r}; built-in: {', '.join(sorted(LIBRARY))}; "
                           f"or give module:attribute")
    mod_name, attr = name.split(":", 1)
    try:
        obj = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as exc:
        raise StencilError(f"cannot load stencil {name!r}: {exc}") from None
    if not isinstance(obj, Stencil):
        raise StencilError(f"{name} is a {type(obj).__name__}, not a stencil (decorate it with @stencil(...))")
    return obj


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.action == "list":
            for name, st in sorted(LIBRARY.items()):
                # the docstring's first paragraph, whole (its first line alone stopped mid-sentence)
                summary = " ".join((st.fn.__doc__ or "").strip().split("\n\n")[0].split())
                print(f"{name:12s} {st.ndim}D  {', '.join(st.inputs)} -> {', '.join(st.outputs)}  {summary}")
            return 0
        st = resolve(args.name)
        print("/*\n" + st.describe() + "\n*/")
        print(generate(st, args.dtype, args.boundary), end="")
        return 0
    except NagareError as exc:
        print(f"nagare: {exc}", file=sys.stderr)
        return 2
