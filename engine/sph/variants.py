"""SPH's variant axes: the neighbour search (cell lists or P3's Verlet lists), how the Verlet
lists are laid out, and how particle data is read by the interaction. engine.py calls
:func:`register` once on import, the way each family registers its axes."""
from __future__ import annotations

from .. import registry

FAMILY = "sph"


def register() -> None:
    # On the GPU, P3's Verlet lists are the default search (so the registry test exercises both list
    # layouts and all position layouts with them); on NumPy, DualSPHysics' cell-full.
    registry.register_axis(
        FAMILY, "search", default={"numpy": "cell-full", "cupy": "verlet"},
        doc="neighbour search: cell-full (cells of r_c = 2h, DualSPHysics default), cell-half (cells of h), "
            "verlet (lists within r_c + Δh, rebuilt when a particle travelled Δh/2; P3)")
    # Different searches find the same pairs in a different order, so sums differ by round-off; the
    # equivalence state is a settling tank (see equivalence_presets) where that round-off stays small.
    # Measured over 100 fp64 steps: |Δpos| ≤ 2e-16, |Δvel| ≤ 1e-14 (speeds ~0.04), |Δρ|/ρ ≤ 2e-15;
    # rtol 1e-11 / atol 1e-12 leave ~1000× margin yet catch any missing or extra pair at once.
    for name, doc_ in (("cell-full", "cell-linked list, cells of 2h, 3^d candidate cells"),
                       ("cell-half", "cell-linked list, cells of h, 5^d candidate cells"),
                       ("verlet", "Verlet lists within R_c = r_c + Δh (NumPy: pair arrays)")):
        registry.register_choice(FAMILY, "search", name, backends=("numpy", "cupy"), doc=doc_,
                                 reference=None if name == "cell-full" else {"search": "cell-full"},
                                 rtol=1e-11, atol=1e-12)

    registry.register_axis(
        FAMILY, "verlet_layout", default={"numpy": "per-particle", "cupy": "warp-interleaved"},
        doc="how Verlet lists are stored: warp-interleaved (P3: element k of a warp's 32 lists contiguous, "
            "per-warp regions of 32 × the warp's longest list) or per-particle (each list contiguous)")
    registry.register_choice(FAMILY, "verlet_layout", "per-particle", backends=("numpy", "cupy"),
                             doc="lists end to end (CSR); NumPy's pair arrays grouped by particle",
                             reference=None, rtol=1e-11, atol=1e-12)
    registry.register_choice(FAMILY, "verlet_layout", "warp-interleaved", backends=("cupy",),
                             doc="P3 §3.1–3.3: coalesced list reads, variable per-warp regions",
                             reference={"verlet_layout": "per-particle"}, rtol=1e-11, atol=1e-12)
    # How the lists are built. Both write the same lists (the same candidates in the same order), so
    # the results are the same to the bit; the search axis's tolerances are kept as the registry's bound.
    registry.register_axis(
        FAMILY, "verlet_build", default={"numpy": "two-pass", "cupy": "one-pass"},
        doc="how the Verlet lists are built: two-pass (P3: count, scan, allocate, fill: two searches) or "
            "one-pass (one search into lists of a fixed room per particle, cap, kept from the last build "
            "with 15 % margin; a list past cap makes cap grow and the search run again)")
    registry.register_choice(FAMILY, "verlet_build", "two-pass", backends=("numpy", "cupy"),
                             doc="P3 §3.2: count and warp maxima, scan, allocation, fill; NumPy: pair arrays",
                             reference=None, rtol=1e-11, atol=1e-12)
    registry.register_choice(FAMILY, "verlet_build", "one-pass", backends=("cupy",),
                             doc="count and fill in one search (sph.cu sph_verlet_fill_cap), regions of 32·cap",
                             reference={"verlet_build": "two-pass"}, rtol=1e-11, atol=1e-12)
    registry.register_axis(
        FAMILY, "layout", default="soa",
        doc="particle data read by the interaction: soa (separate arrays), aos (one 8-value record per particle), "
            "float4 (positions as 16-byte float4; fp64: double2 x,y + separate z, P3 §3.4)")
    registry.register_choice(FAMILY, "layout", "soa", backends=("numpy", "cupy"), doc="structure of arrays",
                             reference=None, rtol=1e-11, atol=1e-12)
    for name, doc_ in (("aos", "array of 8-value records (x y z vx vy vz ρ p)"),
                       ("float4", "positions packed float4 (fp32) or double2 + z (fp64), the rest SoA")):
        registry.register_choice(FAMILY, "layout", name, backends=("cupy",), doc=doc_,
                                 reference={"layout": "soa"}, rtol=1e-11, atol=1e-12)

    # The pair math of the CUDA interaction. Only round-off separates exact and fast (SFU reciprocals
    # and rsqrt in fp32, exp2/log2 for the Fourtakas term's pow, another order of products), so they
    # share the search axis's tolerances: in fp64 every reciprocal and root stays exact. The fast
    # pair's list-walk shapes (fast-u2, fast-u4, fast-lb12) sum the same pairs in the same order with
    # the same operations as fast: they differ from it in scheduling only.
    # The GPU default is fast-u2: the interaction is latency-bound on the neighbours' gathers, so two
    # list entries in flight pay, where four cost more occupancy than they win (figures: docs/sph.md).
    # Its fp32 and fp64 equivalence bounds are the exact pair's (tests/equivalence/test_sph_gpu.py).
    registry.register_axis(
        FAMILY, "pair", default={"numpy": "exact", "cupy": "fast-u2"},
        doc="the CUDA pair math: exact (IEEE divisions, sqrt, pow per pair) or fast (per-particle 1/ρ and wall "
            "flag, reciprocals shared across terms, exp2/log2 for the Fourtakas term, constants as kernel "
            "arguments: 55 registers instead of 72 in fp32 3D); fast-u2 / fast-u4 walk the Verlet list 2 / 4 "
            "neighbours at a time (their gathers in flight together), fast-lb12 bounds the Verlet kernel "
            "to 12 blocks per SM in fp32 (40 registers)")
    registry.register_choice(FAMILY, "pair", "exact", backends=("numpy", "cupy"),
                             doc="the reference's operations pair by pair", reference=None, rtol=1e-11, atol=1e-12)
    registry.register_choice(FAMILY, "pair", "fast", backends=("cupy",),
                             doc="divisions and pow replaced by shared reciprocals and exp2/log2 (sph.cuh pair_fast)",
                             reference={"pair": "exact"}, rtol=1e-11, atol=1e-12)
    for name, doc_ in (("fast-u2", "fast, the Verlet list walked 2 neighbours at a time (sph.cu verlet_walk_fast)"),
                       ("fast-u4", "fast, the Verlet list walked 4 neighbours at a time (sph.cu verlet_walk_fast)"),
                       ("fast-lb12", "fast, the Verlet kernel launch-bounded to 12 blocks/SM in fp32 "
                                     "(gpu.py PAIR_SHAPE)")):
        registry.register_choice(FAMILY, "pair", name, backends=("cupy",), doc=doc_,
                                 reference={"pair": "exact"}, rtol=1e-11, atol=1e-12)
