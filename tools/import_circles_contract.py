"""An import-linter contract type that forbids import circles between modules (type ``no_circles``).

import-linter's own ``acyclic_siblings`` squashes every package into one node, so it also reports
ties between *folders* that are no circle between modules (app/gui's window importing app/headless
while app/frames borrows a tick formatter from app/gui); this contract looks at the modules
themselves. A circle is a set of modules each of which reaches every other one through imports
(a strongly connected component of the import graph with more than one module); every import
counts, inside a function or under ``if TYPE_CHECKING`` too, since either still ties the modules.
``from package import module`` ties the importer to the package's ``__init__`` as well (as
tools' import-circles counts it). A module importing a package it lies in (``from
nagare.engine.stencil import stencil`` inside engine/stencil/) is not counted: the package's
``__init__`` re-exports its children by design.

Configuration (pyproject.toml, tool.importlinter)::

    contract_types = ["no_circles: import_circles_contract.NoCirclesContract"]

    [[tool.importlinter.contracts]]
    name = "no import circles between modules"
    type = "no_circles"
    containers = ["nagare"]

tools/lint-imports puts tools/ on the path so that import-linter finds this module. A broken
contract lists each circle's modules and every import between them, with its line numbers.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from importlinter.domain.helpers import module_expressions_to_modules


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _names_package(line: str, module: str) -> bool:
    """Whether the import statement ``line`` that imports ``module`` reads it as a name of its
    package (``from ..lbm2d import reference``, ``from nagare.engine.lbm2d import reference``)
    rather than by its own path (``from ..lbm2d.reference import step``)."""
    match = re.match(r"\s*from\s+([\w.]+)\s+import\b", line)
    if not match or not match.group(1).strip("."):
        return False  # "import a.b" names the module; "from .. import x" names an enclosing package
    return match.group(1).rsplit(".", 1)[-1] == module.rsplit(".", 2)[-2]


def import_edges(graph: ImportGraph, containers: Iterable[str]) -> dict[str, dict[str, set[int]]]:
    """Importer → {imported module of the containers → the line numbers of its imports}.
    ``from package import module`` ties the importer to the package too (Python runs the
    package's ``__init__`` and reads the name there); a module's import of a package it lies in
    is left out."""
    containers = tuple(containers)
    modules = {m for m in graph.modules if any(_inside(m, c) for c in containers)}
    edges: dict[str, dict[str, set[int]]] = {}
    for m in modules:
        targets: dict[str, set[int]] = {}
        for t in graph.find_modules_directly_imported_by(m):
            if t not in modules:
                continue
            package = t.rpartition(".")[0]
            for detail in graph.get_import_details(importer=m, imported=t):
                targets.setdefault(t, set()).add(detail["line_number"])
                if package in modules and _names_package(detail["line_contents"], t):
                    targets.setdefault(package, set()).add(detail["line_number"])
            targets.setdefault(t, set())
        edges[m] = {t: lines for t, lines in targets.items() if t != m and not _inside(m, t)}
    return edges


def circles(edges: dict[str, dict[str, set[int]]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted, in sorted order
    (Tarjan's algorithm, iterative: the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


class NoCirclesContract(Contract):
    type_name = "no_circles"

    containers = fields.SetField(subfield=fields.ModuleExpressionField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        roots = {m.name for m in module_expressions_to_modules(graph, sorted(self.containers),  # type: ignore
                                                               raise_if_unmatched=True)}
        edges = import_edges(graph, roots)
        found = []
        for members in circles(edges):
            imports = [(importer, imported, sorted(edges[importer][imported]))
                       for importer in members for imported in sorted(edges[importer]) if imported in members]
            found.append({"modules": members, "imports": imports})
        return ContractCheck(kept=not found, metadata={"circles": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        circles_found = check.metadata["circles"]
        output.print_error(f"{len(circles_found)} import circle{'s' if len(circles_found) != 1 else ''} "
                           "between modules:")
        output.new_line()
        for circle in circles_found:
            output.print_error("circle: " + ", ".join(circle["modules"]))
            for importer, imported, lines in circle["imports"]:
                where = ", ".join(f"l.{n}" for n in lines)
                output.print_error(f"  {importer} -> {imported} ({where})", bold=False)
            output.new_line()
