#!/usr/bin/env python3
"""Draw the repository's folders as boxes with their import arrows: docs/architecture-imports.svg.

Reads every ``.py`` file under app/, engine/ and shaders/ (static reading with ``ast``; imports
inside functions count too), maps each module to its folder — a family or shared-mechanism folder
under engine/ is one box, engine/'s own top-level modules are the box ``engine`` — and draws one
arrow per pair of folders that import each other, labelled with the number of import statements.
Arrows that point up the house (a lower box importing a higher one) and both arrows of a two-way
pair are drawn red: ties between folders to look at (a circle between *modules* is refused in CI by
tools/import_circles_contract.py; a red pair of folders is not necessarily one).

    python3 tools/folder_graph.py            # rewrites docs/architecture-imports.svg
    python3 tools/folder_graph.py --print    # the edge list only

Standard library only, so it runs without the project's environment.
"""
from __future__ import annotations

import argparse
import ast
import math
import os
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("app", "engine", "shaders")

# The picture: the app's folders in a column on the left; the families, then the shared mechanisms,
# then engine/'s own modules and the shaders across the bottom. Each box may import what lies
# below it. (x, y) is the box's centre; wide boxes take their arrows straight from above.
BOXES = {
    "app/gui": (105, 110, 170), "app": (105, 250, 170), "app/fieldkinds": (105, 390, 170),
    "engine/amr3d": (320, 110, 142), "engine/sph": (470, 110, 142), "engine/lbm2d": (620, 110, 142),
    "engine/diffusion3d": (770, 110, 142), "engine/wave2d": (920, 110, 142), "engine/compact": (1070, 110, 142),
    "engine/decomp": (695, 280, 134), "engine/stencil": (995, 280, 134), "engine/autotune": (1160, 390, 150),
    "engine": (650, 520, 1180), "shaders": (650, 640, 400),
}
BOX_H = 46
WIDE = {"engine", "shaders"}
LEVEL = {"app/gui": 0, "app": 1, "app/fieldkinds": 2, "engine/decomp": 4, "engine/stencil": 4,
         "engine/autotune": 5, "engine": 6, "shaders": 7}  # families: 3
CAPTIONS = {
    "app/gui": "window, canvas, HUD, worker",
    "app": "CLI, headless runner, exports",
    "app/fieldkinds": "handlers per field type",
    "engine": "contract, registry, families, fields, cuda, bench",
    "engine/decomp": "multi-GPU split",
    "engine/stencil": "P2 framework",
    "engine/autotune": "P2 runtime auto-tuner",
    "shaders": "loader for cuda/ and glsl/",
    "engine/lbm2d": "P1", "engine/amr3d": "P0", "engine/compact": "P4", "engine/sph": "P3",
    "engine/diffusion3d": "P2", "engine/wave2d": "P2",
}


def modules(root: str) -> dict[str, str]:
    out = {}
    for top in PACKAGES:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(d, f)
                    name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                    out[name.removesuffix(".__init__")] = path
    return out


def imported(current: str, is_package: bool, node) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name.removeprefix("nagare.") for a in node.names]
    base = node.module or ""
    if node.level:
        parts = current.split(".") if is_package else current.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([base] if base else []))
    # ``from . import lbm2d`` names a module: count the submodule when it is one
    return [f"{base}.{a.name}".removeprefix("nagare.") for a in node.names] + [base.removeprefix("nagare.")]


def folder(module: str, known: dict[str, str]) -> str | None:
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    if parts[0] == "app":
        return f"app/{parts[1]}" if len(parts) > 2 and parts[1] in ("gui", "fieldkinds") else \
            ("app/" + parts[1] if len(parts) == 2 and parts[1] in ("gui", "fieldkinds") else "app")
    if parts[0] == "engine" and len(parts) > 1:
        sub = os.path.join(ROOT, "engine", parts[1])
        if os.path.isdir(sub):
            return f"engine/{parts[1]}"
    return parts[0]


def edges(root: str = ROOT) -> Counter:
    known = modules(root)
    count: Counter = Counter()
    for name, path in known.items():
        src = folder(name, known)
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = {folder(t, known) for t in imported(name, path.endswith("__init__.py"), node)
                       if t in known or t.split(".")[0] in PACKAGES}
            targets.discard(None)
            targets.discard(src)
            # ``from .. import registry, cuda`` inside engine/x is one statement to one folder
            for dst in targets:
                count[(src, dst)] += 1
    return count


def _level(name: str) -> int:
    return LEVEL.get(name, 3)


def _up(src: str, dst: str, count: Counter) -> bool:
    return _level(dst) < _level(src) or (dst, src) in count


def _arrow(src: str, dst: str, count: Counter, lane: dict) -> tuple[str, float, float]:
    """The path of one arrow and where its label goes."""
    (x1, y1, w1), (x2, y2, w2) = BOXES[src], BOXES[dst]
    h = BOX_H / 2
    if dst in WIDE and src.startswith("app"):
        # down the left margin, one lane per arrow, into the wide box's left end
        k = lane.setdefault("margin", 0)
        lane["margin"] += 1
        lx = 8 + 7 * k
        ex = x2 - w2 / 2
        return (f"M{x1 - w1 / 2:.0f},{y1 + 6 * (k % 3) - 6:.0f} L{lx},{y1 + 6 * (k % 3) - 6:.0f} "
                f"L{lx},{y2 + 8 * k - 14:.0f} L{ex:.0f},{y2 + 8 * k - 14:.0f}", lx + 9, (y1 + y2) / 2 + 10 * k)
    if dst in WIDE:
        k = lane.setdefault(dst, 0)
        lane[dst] += 1
        sx = x1 + (6 if src != "engine" else 0)
        return f"M{sx:.0f},{y1 + h:.0f} L{sx:.0f},{y2 - h:.0f}", sx + 10, (y1 + h + y2 - h) / 2 + (k % 3) * 14
    if src.startswith("app") and dst.startswith("app"):
        # within the app column: curves to the right of it, one side per direction
        sx, ex = x1 + w1 / 2, x2 + w2 / 2
        bulge = 45 if y2 > y1 else 85
        cx = max(sx, ex) + bulge
        return (f"M{sx:.0f},{y1:.0f} Q{cx:.0f},{(y1 + y2) / 2:.0f} {ex:.0f},{y2:.0f}",
                (sx + ex) / 4 + cx / 2, (y1 + y2) / 2 + 4)
    down = y2 > y1
    sy = y1 + (h if down else -h) if abs(y2 - y1) > BOX_H else y1
    ey = y2 - (h if down else -h) if abs(y2 - y1) > BOX_H else y2
    sx, ex = x1, x2
    if abs(y2 - y1) <= BOX_H:  # side by side
        sx, ex = (x1 + w1 / 2, x2 - w2 / 2) if x2 > x1 else (x1 - w1 / 2, x2 + w2 / 2)
    mx, my = (sx + ex) / 2, (sy + ey) / 2
    dx, dy = ex - sx, ey - sy
    length = math.hypot(dx, dy) or 1.0
    cx, cy = mx - dy / length * 22, my + dx / length * 22
    return (f"M{sx:.0f},{sy:.0f} Q{cx:.0f},{cy:.0f} {ex:.0f},{ey:.0f}",
            0.25 * sx + 0.5 * cx + 0.25 * ex, 0.25 * sy + 0.5 * cy + 0.25 * ey - 3)


def svg(count: Counter) -> str:
    width, height = 1260, 700
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
           '<defs>'
           '<marker id="down" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
           '<marker id="up" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#c0392b"/></marker>'
           '</defs>',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           '<text x="250" y="26" font-size="16" font-weight="bold">nagare: folders and their imports</text>',
           '<text x="250" y="46" font-size="11" fill="#555">arrow = "imports" (label: import statements, '
           'inside functions included); red = points up the house or both ways.</text>',
           '<text x="250" y="62" font-size="11" fill="#555">Generated from the code by tools/folder_graph.py; '
           'engine/families.py finds the families by name (importlib), so no arrow leads to them.</text>']
    lane: dict = {}
    order = sorted(count.items(), key=lambda kv: (kv[0][1] in WIDE, BOXES[kv[0][0]][0], kv[0]))
    for (src, dst), n in order:
        if src not in BOXES or dst not in BOXES:
            continue
        path, lx, ly = _arrow(src, dst, count, lane)
        colour, marker = ("#c0392b", "up") if _up(src, dst, count) else ("#555", "down")
        stroke = 0.8 + 0.5 * math.log2(n)
        out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-opacity="0.65" '
                   f'stroke-width="{stroke:.1f}" marker-end="url(#{marker})"/>')
        out.append(f'<text x="{lx:.0f}" y="{ly:.0f}" font-size="10" fill="{colour}" '
                   f'text-anchor="middle">{n}</text>')
    for name, (x, y, w) in BOXES.items():
        fill = "#eaf2fb" if name.startswith("app") else ("#fdf2e3" if name == "shaders" else "#eef7ee")
        out.append(f'<rect x="{x - w / 2:.0f}" y="{y - BOX_H / 2:.0f}" width="{w}" height="{BOX_H}" rx="6" '
                   f'fill="{fill}" stroke="#333"/>')
        out.append(f'<text x="{x:.0f}" y="{y - 4:.0f}" font-size="13" text-anchor="middle" '
                   f'font-weight="bold">{name}</text>')
        out.append(f'<text x="{x:.0f}" y="{y + 12:.0f}" font-size="9.5" text-anchor="middle" '
                   f'fill="#444">{CAPTIONS.get(name, "")}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true", help="print the edges instead of writing the SVG")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "architecture-imports.svg"))
    args = ap.parse_args()
    count = edges()
    if args.print:
        for (src, dst), n in sorted(count.items(), key=lambda kv: (_level(kv[0][0]), kv[0])):
            print(f"{src:20s} -> {dst:20s} {n:4d}{'  (up or two-way)' if _up(src, dst, count) else ''}")
        return
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(svg(count))
    print(f"wrote {os.path.relpath(args.out, ROOT)} ({len(count)} arrows)")


if __name__ == "__main__":
    main()
