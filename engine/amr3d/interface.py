"""Host data that joins P0's one-level kernel ladder across the levels of an octree.

On the GPU each level is its own leaf grid (f_l[q, leaf, k, j, i], leaves of that level only), so
the ladder's kernels (naive, split, templates, sorted: shaders/cuda/amr3d/ladder.cu) run on a level
unchanged, with a neighbour row that names the same-level neighbour in each of the 26 directions
and the leaf itself where the neighbour is coarser, finer or beyond a wall. A point whose pull
sources all lie in its own leaf or a same-level neighbour is then exact; the others — the
*interface points* — are recomputed by one fix-up kernel that pulls through gather descriptors
built from the same classification as the reference's tables (``tables.point_tables``). Only
interface points get descriptors, so building them costs a fraction of the reference's tables.

Index conventions (int64), all relative to one level's arrays:
- point id   p = (leaf − lo) · m³ + (k · m + j) · m + i
- buffer     q · (n · m³) + p
- ``desc[q, r]`` ≥ 0: buffer index in the level's own current buffer; < 0: −1 − j, j < Q · UF an
  entry of the fine buffer, else entry j − Q · UF of the interpolated buffer (Q · U entries), beyond
  it entry j − Q · UF − Q · U of the link buffer (interpolated bounce-back at bodies).
- fine buffer  (Q, UF): level l+1 points ``fine_pts`` rescaled l+1 → l, flat q · UF + slot
- coarse buffer (Q, UC): level l−1 points ``coarse_pts`` time-interpolated and rescaled l−1 → l
- interpolated buffer (Q, U): all 27 populations interpolated at each of the U distinct source
  positions inside coarser leaves, Σ_s ``interp_w[u, s]`` · coarse[q, ``interp_slot[u, s]``] in the
  order s = 0 … S−1 (the reference's); a position serves up to 27 (point, direction) pairs, so this
  reads each stencil once instead of once per pair
- restriction  level l point ``restrict_dst`` ← level l+1 point ``restrict_src`` rescaled
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import d3q27, group_desc, tables
from .distinct_rows import unique_rows
from .ladder import shared_copies
from .tree import SELF_SLOT, Forest


@dataclass
class LevelCoupling:
    level: int
    lo: int
    n: int
    nbr: np.ndarray  # (n, 27) int32: same-level neighbour (level-relative), itself elsewhere
    fix_pts: np.ndarray  # (R,) interface point ids
    desc: np.ndarray  # (27, R)
    fine_pts: np.ndarray  # (UF,) point ids of level + 1
    coarse_pts: np.ndarray  # (UC,) point ids of level − 1
    interp_slot: np.ndarray  # (U, S) into coarse_pts
    interp_w: np.ndarray  # (U, S)
    restrict_dst: np.ndarray  # (Rr,) point ids of this level
    restrict_src: np.ndarray  # (Rr,) point ids of level + 1
    # interpolated bounce-back (boundaries.py): link buffer k = w1[k] · cur[i1[k]] + w2[k] · cur[i2[k]]
    link_i1: np.ndarray = None
    link_i2: np.ndarray = None
    link_w1: np.ndarray = None
    link_w2: np.ndarray = None
    # the level's storage (mothers.py): 0 = leaves of the forest's m³, the ids above in leaf space;
    # else blocks of block³ points (P0's mother leaves), n of them, every id above in that storage,
    # ``leaf_map`` taking each level-relative leaf point id to its storage id, and the last
    # ``n_prov`` restriction pairs the provisional points (filled from the next finer level)
    block: int = 0
    leaf_map: np.ndarray = None
    n_prov: int = 0
    # (not a field) the arrays built on a device (group_desc.descriptors with CuPy): desc,
    # fine_pts, coarse_pts, interp_slot, interp_w there, equal to the fields above (the first
    # stepper takes them instead of uploading the fields again, then drops them); None where built
    # on the host or once taken
    device = None
    # (not fields) the arrays of LAZY_ARRAYS left on the device (group_desc.level_descriptors with
    # CuPy): {name: device array} until read back at their first host use (keep_on_device)
    _lazy = None
    _to_host = None
    _desc_range = None

    def __post_init__(self):
        for name in ("link_i1", "link_i2"):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(0, np.int64))
        for name in ("link_w1", "link_w2"):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(0))

    def keep_on_device(self, arrays: dict, to_host, desc_bounds: tuple[int, int]) -> None:
        """``arrays`` {name of LAZY_ARRAYS: its array on a device} stand for those fields: each is
        ``to_host(array)`` at its first host use, its shape known before (shape_of). ``desc_bounds``:
        the descriptors' (min, max) over 0 and the entries. A CuPy stepper takes the device copies,
        their shapes and desc_bounds, so a regrid reads none of them back."""
        self._lazy, self._to_host, self._desc_range = dict(arrays), to_host, desc_bounds

    def held_on_device(self) -> tuple:
        """The LAZY_ARRAYS not read back yet."""
        return tuple(self._lazy or ())

    def device_copy(self, name: str):
        """A field of LAZY_ARRAYS as its device array while it is not read back (else None): for a
        check on the device that must not bring the array to the host."""
        return (self._lazy or {}).get(name)

    def shape_of(self, name: str) -> tuple:
        """The shape of a field of LAZY_ARRAYS, without reading it back."""
        lazy = self._lazy or {}
        return tuple(lazy[name].shape) if name in lazy else getattr(self, name).shape

    def size_of(self, name: str) -> int:
        return math.prod(self.shape_of(name))

    def desc_bounds(self) -> tuple[int, int]:
        """(min, max) of 0 and the descriptors (the fix-up's index width)."""
        if self._desc_range is None:
            d = self.desc
            self._desc_range = (int(d.min(initial=0)), int(d.max(initial=0)))
        return self._desc_range

    @property
    def n_fix(self) -> int:
        return int(self.fix_pts.size)

    @property
    def stencil(self) -> int:
        return int(self.shape_of("interp_w")[1])

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.nbr, self.fix_pts, self.desc, self.fine_pts, self.coarse_pts,
                                      self.interp_slot, self.interp_w, self.restrict_dst, self.restrict_src))


@lru_cache(maxsize=8)
def crossing_slots(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Shell points (S, 3) of a leaf and, per point, the neighbour slots its 27 pull directions
    cross (S, 27) bool — the slot the ladder kernels read for that direction (ladder.cu source_of).
    Kept per m (read-only): every level of every regrid asks for it."""
    shell = tables.shell_points(m)
    cross = np.zeros((len(shell), 27), bool)
    for q in range(d3q27.Q):
        s = shell - d3q27.C[q][None, :]
        n = np.where(s < 0, -1, np.where(s > m - 1, 1, 0))
        cross[np.arange(len(shell)), (n[:, 2] + 1) * 9 + (n[:, 1] + 1) * 3 + (n[:, 0] + 1)] = True
    shell.flags.writeable = False
    cross.flags.writeable = False
    return shell, cross


@lru_cache(maxsize=8)
def _crossing_bits(m: int) -> np.ndarray:
    """(S,) int32: crossing_slots' table as one bit per slot (bit s: the point's pulls cross slot s)."""
    out = (crossing_slots(m)[1].astype(np.int32) << np.arange(27, dtype=np.int32)).sum(axis=1, dtype=np.int32)
    out.flags.writeable = False
    return out


def level_neighbours(forest: Forest, lv: int) -> tuple[np.ndarray, np.ndarray]:
    """(nbr (n, 27) int32 level-relative, same (n, 27) bool) for the leaves of one level."""
    sl = forest.level_slice(lv)
    nt = forest.neighbours
    leaf, dl, out = nt.leaf[sl], nt.dlevel[sl], nt.outside[sl]
    same = (dl == 0) & ~out & (leaf >= 0)
    same[:, SELF_SLOT] = True
    own = np.arange(sl.stop - sl.start)[:, None]
    nbr = np.where(same, leaf - sl.start, own)
    return nbr.astype(np.int32), same


def level_copies(forest: Forest, lv: int) -> tuple[np.ndarray, np.ndarray]:
    """(dst, src) level-relative point ids: the copies of shared nodes of level lv and their
    owners' copies (ladder.shared_copies; Kobayashi's CSM gives every copy its owner's C)."""
    nbr, same = level_neighbours(forest, lv)
    return shared_copies(nbr, same, forest.m)


def forest_copies(forest: Forest) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """level_copies of every level, as state point ids (leaf · m³ + local, leaves global): one
    shared_copies pass over the whole forest instead of one a level (a regrid's synchronisation
    asks for all of them). The same pairs in the same order: a copy's owner is a same-level leaf,
    and the owner rule (the lowest point id) orders a level's ids alike when shifted by its start."""
    nt = forest.neighbours
    same = (nt.dlevel == 0) & ~nt.outside & (nt.leaf >= 0)
    same[:, SELF_SLOT] = True
    own = np.arange(forest.n_leaves)[:, None]
    dst, src = shared_copies(np.where(same, nt.leaf, own), same, forest.m)
    m3 = forest.m ** 3
    cuts = np.searchsorted(dst, [forest.level_slice(lv).stop * m3 for lv in forest.levels])
    out, start = {}, 0
    for lv, stop in zip(forest.levels, cuts):
        out[lv] = dst[start:stop], src[start:stop]
        start = stop
    return out


def interface_points(forest: Forest, lv: int) -> tuple[np.ndarray, np.ndarray]:
    """(leaves (R,) global, ijk (R, 3)) of the level's interface points: shell points with a pull
    direction that crosses into a slot without a same-level leaf."""
    sl = forest.level_slice(lv)
    _, same = level_neighbours(forest, lv)
    shell = crossing_slots(forest.m)[0]
    # (n, S): a crossed slot without a same-level leaf, as 27-bit masks (the leaf's missing slots
    # and the point's crossed ones) instead of an (n, S, 27) temporary or a BLAS product
    missing = ((~same).astype(np.int32) << np.arange(27, dtype=np.int32)).sum(axis=1, dtype=np.int32)
    fix = (missing[:, None] & _crossing_bits(forest.m)[None, :]) != 0
    li, si = np.nonzero(fix)
    return li + sl.start, shell[si]


def _union(m: int, a, b):
    """Points (leaves, ijk) of both lists, each once, in ascending point id."""
    lf = np.concatenate([np.asarray(a[0], np.int64), np.asarray(b[0], np.int64)])
    ijk = np.concatenate([np.asarray(a[1], np.int64).reshape(-1, 3), np.asarray(b[1], np.int64).reshape(-1, 3)])
    _, first = np.unique(lf * m ** 3 + tables.local_flat(m, ijk), return_index=True)
    return lf[first], ijk[first]


def build(forest: Forest, interp: str = "quadratic", solid=None, near=None, links=None,
          slip=(), xp=np, timing: dict | None = None, early=None) -> dict[int, LevelCoupling]:
    """Per level, everything the GPU stepper uploads (plain arrays; the kernels never search).
    ``solid`` and ``near`` (boundaries.py): the points next to a body join the fix-up list, their
    solid sources bounced back; ``links`` (Boundaries.links()) replace those bounce-backs by the link
    buffer's interpolated values. ``slip``: free-slip sides (Boundaries.slip): the side points are
    interface points already (they cross a slot without a neighbour, as at a wall), and their
    descriptors read the mirrored node's reflected population (tables.point_tables) instead of
    the own point's opposite one — the fix-up kernel is the same. ``xp``: CuPy builds a flow's
    descriptors without bodies or free slip on its device (level_coupling), whose tables then stay
    there until their first host use (LevelCoupling.keep_on_device). ``timing``: the device's part
    of the build in ``timing["device_s"]``.
    ``early``: :func:`early_restriction`'s (points, restriction) of this forest, taken instead of
    computing them again (a regrid computes them first, to queue the state's synchronisation)."""
    links = links or {}
    points, restriction = early if early is not None else ({}, {})
    if xp is not np and _by_groups(solid, None, slip) and not any(links.values()):
        # on a device every level's descriptors in one set of passes (group_desc.level_descriptors):
        # a pass costs its launch there, whatever its size
        points = {lv: points[lv] if lv in points else fixup_points(forest, lv, near) for lv in forest.levels}
        on_device = {lv: {} for lv in forest.levels}
        built = group_desc.level_descriptors(forest, points, interp, xp, timing, on_device)
        return {lv: level_coupling(forest, lv, *points[lv], interp, solid, None, slip, xp, timing,
                                   built=(built[lv], on_device[lv]), restriction=restriction.get(lv))
                for lv in forest.levels}

    def level(lv):
        pts = points[lv] if lv in points else fixup_points(forest, lv, near)
        return level_coupling(forest, lv, *pts, interp, solid, links.get(lv), slip, xp, timing,
                              restriction=restriction.get(lv))
    # the levels are independent: built on threads where point_tables uses them (NumPy releases
    # the GIL inside its loops), so the serial parts of one level overlap the others'; with a
    # device, one after the other on the caller's thread (its current stream)
    if xp is np and tables._WORKERS > 1 and len(forest.levels) > 1:
        with ThreadPoolExecutor(len(forest.levels)) as pool:
            return dict(zip(forest.levels, pool.map(level, forest.levels)))
    return {lv: level(lv) for lv in forest.levels}


def early_restriction(forest: Forest, solid=None, near=None, links=None, slip=()):
    """({level: fix-up points}, {level: (restrict_dst, restrict_src) global point ids}) of the
    coupling :func:`build` would make, before it: the restriction of a flow without bodies or
    free-slip sides depends only on the fix-up points (level_coupling's ``_restriction``), so a
    regrid can queue the state's synchronisation on the device and build the rest of the coupling
    while it runs. None for the other flows (their restriction comes out of tables.point_tables)."""
    if not _by_groups(solid, None, slip) or any((links or {}).values()):
        return None
    points = {lv: fixup_points(forest, lv, near) for lv in forest.levels}
    return points, {lv: _restriction(forest, lv, *points[lv]) for lv in forest.levels}


def fixup_points(forest: Forest, lv: int, near=None) -> tuple[np.ndarray, np.ndarray]:
    """(leaves global, ijk (R, 3)) of a level's fix-up list on leaves of m³: its interface points
    and, with a flow's ``near`` (Boundaries.near()), the fluid points next to a body."""
    leaves, ijk = interface_points(forest, lv)
    if near and lv in near:
        leaves, ijk = _union(forest.m, (leaves, ijk), near[lv])
    return leaves, ijk


def level_coupling(forest: Forest, lv: int, leaves, ijk, interp: str = "quadratic", solid=None, link=None,
                   slip=(), xp=np, timing: dict | None = None, built=None, restriction=None) -> LevelCoupling:
    """The coupling of one level whose fix-up list is the given points (leaves global, ijk (R, 3),
    each point once, ascending point id): their descriptors from the reference's classification
    (tables.point_tables; written per (leaf, position class) group by group_desc.py where no body
    or free-slip side needs a read of its own), and the restriction of those of them that
    coincide with a finer node.
    ``link``: the level's (points, q, i1, i2, w1, w2) of Boundaries.links(). ``xp``: the array
    module whose device builds the descriptors of a flow without bodies or free-slip sides
    (group_desc.py; its tables left there until their first host use, LevelCoupling.keep_on_device),
    adding its time to ``timing``.
    ``built``: the level's (descriptors, device arrays) of group_desc.level_descriptors, built
    with the other levels' (a flow without bodies or free-slip sides); ``restriction``: its
    (restrict_dst, restrict_src) global point ids of :func:`early_restriction` (the same flows)."""
    m3 = forest.m ** 3
    N = forest.n_leaves * m3
    sl = forest.level_slice(lv)
    lo, n = sl.start, sl.stop - sl.start
    nbr, _ = level_neighbours(forest, lv)
    leaves = np.asarray(leaves, np.int64)
    ijk = np.asarray(ijk, np.int64).reshape(-1, 3)
    R = len(leaves)
    pid = (leaves - lo) * m3 + tables.local_flat(forest.m, ijk)
    on_device = None
    if _by_groups(solid, link, slip):
        # no body, no free slip: the descriptors written per (leaf, position class) group
        if built is None:
            on_device = {}
            built = (group_desc.descriptors(forest, lv, leaves, ijk, interp, xp, timing, on_device), on_device)
        (desc, fine_pts, coarse_pts, islot, iw), on_device = built
        restrict_dst, restrict_src = restriction if restriction is not None else _restriction(forest, lv, leaves, ijk)
        p_src = np.zeros(0, np.int64)
    else:
        pt = tables.point_tables(forest, lv, leaves, ijk, interp, solid, slip, compact=True)
        restrict_dst, restrict_src = pt.restrict_dst, pt.restrict_src
        fine_pts, coarse_pts = pt.fine_pts, pt.coarse_pts
        desc = np.full((d3q27.Q, R), np.iinfo(np.int64).min, np.int64)
        desc[0] = pid  # the rest population stays at the point
        flat = desc.reshape(-1)
        # direct sources: global q'·N + pid → this level's buffer (all on this level)
        q_src, p_src = np.divmod(pt.direct_src, N)
        flat[pt.direct_dst] = q_src * (n * m3) + p_src - lo * m3
        ufine = pt.fine_pts.size
        flat[pt.fine_dst] = -1 - (pt.fine_q * ufine + pt.fine_slot)
        # distinct stencils: rows with the same coarse nodes AND weights (at a leaf's low face two
        # positions share nodes with mirrored weights), grouped over the distinct source positions'
        # stencils (compact tables), then each read takes its position's group
        if pt.coarse_dst.size:
            first, inv = unique_rows(np.concatenate([pt.coarse_slot, np.ascontiguousarray(pt.coarse_w).view(np.int64)],
                                                    axis=1), group_desc.stencil_lead(pt.coarse_slot.shape[1]))
            islot, iw = pt.coarse_slot[first], pt.coarse_w[first]
            inv = inv[pt.coarse_row]
        else:
            islot, iw = np.zeros((0, pt.coarse_slot.shape[1]), np.int64), np.zeros((0, pt.coarse_w.shape[1]))
            inv = np.zeros(0, np.int64)
        flat[pt.coarse_dst] = -1 - (d3q27.Q * ufine + pt.coarse_q * len(islot) + inv.reshape(-1))
    lazy = desc is None  # (group_desc left the five arrays on the device: LevelCoupling.keep_on_device)
    lk = {}
    if link is not None:
        ufine = fine_pts.size
        lpts, lq, i1, i2, w1, w2 = link
        row = np.searchsorted(pid, lpts) if R else np.zeros(len(lpts), np.int64)
        if R == 0 or np.any(pid[np.minimum(row, R - 1)] != lpts):
            raise AssertionError(f"level {lv}: a bounce-back link at a point outside the fix-up list")
        desc.reshape(-1)[lq * R + row] = -1 - (d3q27.Q * ufine + d3q27.Q * len(islot) + np.arange(len(lpts)))
        lk = {"link_i1": np.asarray(i1, np.int64), "link_i2": np.asarray(i2, np.int64),
              "link_w1": np.asarray(w1, np.float64), "link_w2": np.asarray(w2, np.float64)}
    # (descriptors left on the device: their minimum tells, as every entry is written or INT64_MIN)
    unset = (on_device["desc_bounds"][0] == np.iinfo(np.int64).min if desc is None
             else np.any(desc == np.iinfo(np.int64).min))
    if unset:
        raise AssertionError(f"level {lv}: an interface direction without a source")
    if p_src.size and (np.any(p_src < lo * m3) or np.any(p_src >= (lo + n) * m3)):
        raise AssertionError(f"level {lv}: a direct source outside the level")
    sized = on_device if lazy else {"fine_pts": fine_pts, "coarse_pts": coarse_pts}
    fine_lo = forest.level_slice(lv + 1).start if sized["fine_pts"].size else 0
    coarse_lo = forest.level_slice(lv - 1).start if sized["coarse_pts"].size else 0
    if on_device:
        on_device["fine_pts"] = on_device["fine_pts"] - fine_lo * m3
        on_device["coarse_pts"] = on_device["coarse_pts"] - coarse_lo * m3
    out = LevelCoupling(
        level=lv, lo=lo, n=n, nbr=nbr, fix_pts=pid, desc=desc,
        fine_pts=None if lazy else fine_pts - fine_lo * m3, coarse_pts=None if lazy else coarse_pts - coarse_lo * m3,
        interp_slot=islot, interp_w=iw,
        restrict_dst=restrict_dst - lo * m3,
        restrict_src=restrict_src - (forest.level_slice(lv + 1).start * m3 if restrict_src.size else 0), **lk)
    if lazy:
        out.keep_on_device({k: on_device[k] for k in LAZY_ARRAYS}, xp.asnumpy, on_device.pop("desc_bounds"))
    out.device = on_device or None
    return out


# the fields group_desc.level_descriptors may leave on its device (LevelCoupling.keep_on_device)
LAZY_ARRAYS = ("desc", "fine_pts", "coarse_pts", "interp_slot", "interp_w")


def _lazy_field(name: str) -> property:
    """A field of LAZY_ARRAYS as a property: the host array, read back from the device at the first
    use where keep_on_device left it there."""
    key = "_host_" + name

    def get(self):
        lazy = self.__dict__.get("_lazy")
        if lazy and name in lazy:
            # copied first, dropped after: a copy that fails (a device error surfacing at this wait)
            # leaves the device array in place for the next read, not a None in its stead
            self.__dict__[key] = np.asarray(self._to_host(lazy[name]))
            lazy.pop(name, None)
        return self.__dict__.get(key)

    def put(self, value):
        lazy = self.__dict__.get("_lazy")
        if lazy:
            lazy.pop(name, None)
        if name == "desc":
            self.__dict__["_desc_range"] = None
        self.__dict__[key] = value
    return property(get, put)


for _name in LAZY_ARRAYS:
    setattr(LevelCoupling, _name, _lazy_field(_name))


def _by_groups(solid, link, slip) -> bool:
    """Whether a level's descriptors are written per (leaf, position class) group (group_desc.py):
    without a body or a free-slip side, where no read needs its own lookup or a reflected population."""
    return solid is None and link is None and not slip


def _restriction(forest: Forest, lv: int, leaves, ijk) -> tuple[np.ndarray, np.ndarray]:
    """(restrict_dst, restrict_src) global point ids, as tables.point_tables gives them over these
    points (tables._owners' level lv + 1 part): those of them that coincide with a node of a level
    lv + 1 leaf, and that node."""
    if lv >= forest.max_level:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    m, m3 = forest.m, forest.m ** 3
    h = int(forest.spacing_of(lv))
    pw, _ = forest.wrap_points(forest.origin[leaves] + ijk * h)
    fine = tables._containing_near(forest, lv + 1, leaves, tables._position_class(m, ijk), pw)
    s = fine >= 0
    o = forest.local_offset(fine[s], pw[s]) // (h // 2)
    return leaves[s] * m3 + tables.local_flat(m, ijk[s]), fine[s] * m3 + tables.local_flat(m, o)
