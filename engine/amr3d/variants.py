"""amr3d's variant axes: ``kernels`` (P0's ladder and beyond) and ``graph``. :func:`register` runs
once, when engine.py is imported (each family registers from its own variants.py)."""
from __future__ import annotations

from .. import registry
from . import storage

FAMILY = "amr3d"
# the kernels axis: P0's ladder (each rung adds to the previous), then what a current GPU rewards. Each
# rung's storage on a box (storage.py) and the LadderStepper rung it launches (gpu.py).
RUNG_STORAGE = {"reference": "leaves", "naive": "leaves", "split": "leaves", "mother-leaf": "mothers",
                "templates": "mothers", "sorted": "mothers", "split-apart": "apart", "naive-fused": "leaves",
                "uniform": "uniform"}
RUNG_KERNELS = {"naive": "naive", "split": "split", "mother-leaf": "split", "templates": "templates",
                "sorted": "sorted", "split-apart": "apart", "naive-fused": "naive", "uniform": "uniform"}


def _needs_box(backend, selection, preset):
    if preset is not None and not preset.is_box:
        return ("this storage needs one level of periodic leaves (P0's benchmark box); on a refined or walled tree "
                "the ladder runs per level on leaves of m³ or mother leaves)")
    return None


def tree_mothers_reason(preset) -> str | None:
    """Why a tree's levels cannot be stored as P0's mother leaves (mothers.py), or None."""
    if preset.physics.les == "csm":
        return ("physics.les = \"csm\" runs on leaves of m³ points only (its velocity gradient is taken inside "
                "each leaf); mother leaves regroup them")
    return None


def _needs_mothers(backend, selection, preset):
    if preset is not None and not preset.is_box:
        return None  # on a tree, mother leaves per level where tree_mothers_reason allows, else leaves of m³
    if preset is not None and storage.mother_shape(tuple(preset.grid.leaves)) is None:
        return f"mother leaves need an even number of leaves per axis (grid.leaves = {list(preset.grid.leaves)})"
    return None


def _csm_needs_leaves(backend, selection, preset):
    """Kobayashi's CSM takes its velocity gradient inside each leaf of m³ points (collision.py): a
    storage of mother leaves or the uniform lattice would give another coefficient, so other rungs
    would not match the reference."""
    if preset is not None and preset.physics.les == "csm":
        return ("physics.les = \"csm\" runs on leaves of m³ points only (its velocity gradient is taken inside "
                "each leaf); this storage regroups them")
    return None


def _fp32_only(backend, selection, preset):
    if preset is not None and preset.physics.precision != "fp32":
        return "the CUDA kernels are fp32 (set physics.precision = \"fp32\")"
    return None


def _mother_leaf(backend, selection, preset):
    """mother-leaf: a box with an even number of leaves per axis, or a tree without Kobayashi's CSM
    (mothers.py)."""
    reason = _fp32_only(backend, selection, preset)
    if reason is None and preset is not None:
        reason = (_needs_mothers(backend, selection, preset) or _csm_needs_leaves(backend, selection, preset)
                  if preset.is_box else tree_mothers_reason(preset))
    return reason


def _mothers_fp32(backend, selection, preset):
    """templates and sorted: mother leaves on a box (so no CSM there); on a tree mother leaves where
    the tree allows them (tree_mothers_reason: not with the CSM), else leaves of m³ per level."""
    reason = _fp32_only(backend, selection, preset) or _needs_mothers(backend, selection, preset)
    if reason is None and preset is not None and preset.is_box:
        reason = _csm_needs_leaves(backend, selection, preset)
    return reason


FP16_RUNGS = ("reference", "naive", "naive-fused", "uniform")


def _fp16_rung_reason(selection) -> str | None:
    """Why the selection's kernels cannot run with its fp16 storage (None: they can, or no fp16)."""
    if selection and selection.get("storage") == "fp16" and selection.get("kernels") not in (None, *FP16_RUNGS):
        return (f"fp16 storage runs the naive and uniform kernels (naive-fused too, and the reference), "
                f"not {selection['kernels']}")
    return None


def _with_fp16(check):
    """A kernels choice's check, and the storage it would run on: a switch of the kernels axis alone
    is checked against the storage already selected (set_variant checks the changed axes)."""
    def both(backend, selection, preset):
        return _fp16_rung_reason(selection) or (check(backend, selection, preset) if check else None)
    return both


def _fp16_check(backend, selection, preset):
    """fp16 storage: fp32 arithmetic, no CSM, and the reference (NumPy or CuPy, rounding its state
    as the kernels store it) or the naive kernels (with the fix-up fused or not; on a box also the
    uniform lattice's): on a box, and on a tree, whose level buffers then hold fp16 (tree_stepper.py)."""
    if preset is not None and preset.physics.les == "csm":
        return ("physics.les = \"csm\" runs on fp32 storage (the fp16 kernels take no coefficient array)")
    return _fp32_only(backend, selection, preset) or _fp16_rung_reason(selection)


def _box_fp32(backend, selection, preset):
    return (_fp32_only(backend, selection, preset) or _needs_box(backend, selection, preset)
            or _csm_needs_leaves(backend, selection, preset))


def register() -> None:
    # The CUDA default is split, which runs on every box; presets ask for templates (P0's best), and a
    # box with an odd number of leaves on some axis falls back to split with one log line.
    registry.register_axis(FAMILY, "kernels", default={"numpy": "reference", "cupy": "split"},
                           doc="P0's ladder: naive (one kernel, runtime branches) → split (inner + shell kernels) → "
                               "mother-leaf (8 siblings as one (2m−1)³ block: half the shell) → templates (26 shell "
                               "classes × 27 directions resolved at compile time, concurrent streams); beyond P0: "
                               "sorted (the 26 classes in one launch, one class per warp), split-apart (inner blocks "
                               "and shells stored apart: whole-sector writes on HBM), naive-fused (a tree level's "
                               "fix-up inside the naive kernel) and uniform (a plain "
                               "periodic D3Q27 lattice of the same nodes: P0's break-even comparison)")
    # On CuPy the reference's fp32 reductions round differently from NumPy's (~1e-6 relative after
    # 24 steps), hence the fp32 tolerance of the kernels.
    registry.register_choice(FAMILY, "kernels", "reference",
                             doc="NumPy/CuPy gather-table reference (leafgrid.py on a box, reference.py on a tree)",
                             reference={"kernels": "reference"}, rtol=2e-5, atol=2e-6)
    for _name, _doc, _check in (
            ("naive", "§3.1 one thread per point, runtime neighbour branches", _fp32_only),
            ("split", "§3.2 inner kernel + one outer-shell kernel", _fp32_only),
            ("mother-leaf", "§3.3 split kernels on mother leaves of (2m−1)³ points: a box's 2×2×2 groups, or "
                            "each tree level's parents with provisional points where a sibling is refined",
             _mother_leaf),
            ("templates", "§3.4 inner + 26 template class kernels on 26 streams (mother leaves; on a tree with "
                          "Kobayashi's CSM, leaves of m³ per level)", _mothers_fp32),
            ("sorted", "beyond P0: the 26 class bodies in one launch sorted by class (on mother leaves as "
                       "templates)", _mothers_fp32),
            ("split-apart", "beyond P0, for HBM: split's kernels on a storage with every leaf's inner block and "
                            "shell in separate runs, so each kernel writes whole 32-byte sectors (one-level box)",
             _box_fp32),
            ("naive-fused", "beyond P0, on a tree: the naive kernel with each level's interface fix-up inside "
                            "(one pass, one store per point; on a box, where there are no interface points, naive)",
             _fp32_only),
            ("uniform", "beyond P0: the same nodes as one periodic uniform lattice, one fused kernel", _box_fp32)):
        registry.register_choice(FAMILY, "kernels", _name, backends=("cupy",), doc=_doc,
                                 reference={"kernels": "reference"}, rtol=2e-5, atol=2e-6, check=_with_fp16(_check))
    # fp16 storage (beyond P0, as lbm2d's): half the bytes of the memory-bound naive and uniform kernels
    registry.register_axis(FAMILY, "storage", default="native",
                           doc="native: f in the preset's precision; fp16: the shifted populations f − w in IEEE "
                               "half, fp32 arithmetic (half the bytes a step; with the naive, naive-fused or, on "
                               "a box, uniform kernels; on a tree the level buffers, the interface buffers fp32)")
    registry.register_choice(FAMILY, "storage", "native", doc="f in the preset's precision")
    # The reference rounds its fp32 state to fp16 storage after every step as the kernels store it;
    # the kernels' fp32 reductions round differently (the fp32 tolerance above), and a difference of
    # round-off can put a stored value on the other side of a half's rounding boundary: one unit in
    # the last place of |f − w| < 0.0625 is 2⁻¹⁵ ≈ 3.1e-5, hence atol 4e-5 (one flipped rounding).
    registry.register_choice(FAMILY, "storage", "fp16", doc="f − w in IEEE half, fp32 arithmetic",
                             reference={"kernels": "reference", "storage": "fp16"}, rtol=2e-5, atol=4e-5,
                             check=_fp16_check)
    registry.register_axis(FAMILY, "graph", default="off",
                           doc="on: every 16 steps replayed as one CUDA graph (27+ launches a step otherwise)")
    registry.register_choice(FAMILY, "graph", "off", doc="launch every kernel from the host")
    registry.register_choice(FAMILY, "graph", "on", backends=("cupy",), doc="CUDA graph of 16 steps",
                             reference={"kernels": "reference", "graph": "off"}, rtol=2e-5, atol=2e-6,
                             check=_fp32_only)
