"""amr3d solid bodies (engine/amr3d/bodies.py): inside/distance against independent checks (analytic
shapes, the Ahmed body's published dimensions, a finely meshed Ahmed body), closed outward surfaces
with the right volume, frontal areas, the mesh loader's one-line refusals, and make() for every kind."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import trimesh
from nagare.engine.amr3d import bodies
from nagare.engine.amr3d.bodies import AHMED_CD_25, Ahmed, Box, Cylinder, Sphere, StlBody, make
from nagare.engine.amr3d.config import Body as BodySpec

REPO = Path(__file__).resolve().parents[2]
RNG_SEED = 20240613


def rng():
    return np.random.default_rng(RNG_SEED)


def around(body, n, pad=0.3, seed=RNG_SEED):
    """Random points in the body's bounding box grown by `pad` of its size on every side."""
    lo, hi = body.bounds()
    ext = hi - lo
    return np.random.default_rng(seed).uniform(lo - pad * ext, hi + pad * ext, (n, 3))


def closed_mesh(body, **kw):
    v, f = body.surface(**kw)
    assert v.dtype == np.float32 and f.dtype == np.int32
    m = trimesh.Trimesh(v.astype(np.float64), f, process=True)
    return m


def one_line_error(excinfo, *names):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for name in names:
        assert str(name) in msg, (name, msg)
    return msg


def sign_agrees(body, p):
    ins = body.inside(p)
    d = body.distance(p)
    assert ins.shape == d.shape == p.shape[:-1]
    np.testing.assert_array_equal(d < 0, ins)
    return ins, d


# ---- sphere ------------------------------------------------------------------------------------------

def test_sphere():
    c, r = np.array([3.0, -2.0, 5.0]), 4.0
    s = Sphere(c, 2 * r)
    p = around(s, 4000)
    rho = np.linalg.norm(p - c, axis=1)
    ins, d = sign_agrees(s, p)
    np.testing.assert_array_equal(ins, rho < r)
    np.testing.assert_allclose(np.abs(d), np.abs(rho - r), rtol=0, atol=1e-12)
    # Sphere.surface(): fans at the poles, no degenerate triangle; closed once the 2n coincident pole
    # vertices are merged.
    m = closed_mesh(s)
    assert m.nondegenerate_faces().all()
    assert m.is_watertight and m.is_winding_consistent
    np.testing.assert_allclose(m.volume, 4 / 3 * math.pi * r ** 3, rtol=1e-2)
    np.testing.assert_allclose(s.frontal_area(0), math.pi * r * r, rtol=1e-15)
    assert s.reference_length == 2 * r


# ---- cylinder ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", ["x", "y", "z"])
def test_cylinder(axis):
    k = "xyz".index(axis)
    c, r, length = np.array([1.0, 2.0, -3.0]), 1.5, 5.0
    cyl = Cylinder(c, 2 * r, length, axis)
    p = around(cyl, 4000)
    h = (p - c)[:, k]
    radial = p - c
    radial[:, k] = 0.0
    rho = np.linalg.norm(radial, axis=1)
    ins, d = sign_agrees(cyl, p)
    np.testing.assert_array_equal(ins, (rho < r) & (np.abs(h) < length / 2))
    # Independent distance: outside, to the nearest point (radius and height clamped); inside, to the
    # nearer of the mantle and the caps.
    rc, hc = np.minimum(rho, r), np.clip(h, -length / 2, length / 2)
    outside = np.hypot(rho - rc, h - hc)
    inside = np.minimum(r - rho, length / 2 - np.abs(h))
    np.testing.assert_allclose(np.abs(d), np.where(ins, inside, outside), rtol=0, atol=1e-12)
    m = closed_mesh(cyl)
    assert m.is_watertight and m.is_winding_consistent
    np.testing.assert_allclose(m.volume, math.pi * r * r * length, rtol=1e-2)
    lo, hi = cyl.bounds()
    assert (m.vertices >= lo - 1e-5).all() and (m.vertices <= hi + 1e-5).all()
    for flow in range(3):
        want = math.pi * r * r if flow == k else 2 * r * length
        np.testing.assert_allclose(cyl.frontal_area(flow), want, rtol=1e-15)
    assert cyl.reference_length == 2 * r


# ---- box -------------------------------------------------------------------------------------------------

def box_distance(p, c, size):
    """Unsigned distance to an axis-aligned box by its nearest point (outside) and nearest face (inside)."""
    lo, hi = c - size / 2, c + size / 2
    ins = ((p > lo) & (p < hi)).all(axis=1)
    outside = np.linalg.norm(p - np.clip(p, lo, hi), axis=1)
    inside = np.minimum(p - lo, hi - p).min(axis=1)
    return ins, np.where(ins, inside, outside)


def test_box():
    c, size = np.array([0.5, -1.0, 2.0]), np.array([3.0, 1.0, 2.0])
    b = Box(c, size)
    p = around(b, 4000)
    ins, d = sign_agrees(b, p)
    want_in, want_d = box_distance(p, c, size)
    np.testing.assert_array_equal(ins, want_in)
    np.testing.assert_allclose(np.abs(d), want_d, rtol=0, atol=1e-12)
    m = closed_mesh(b)
    assert m.is_watertight and m.is_winding_consistent
    np.testing.assert_allclose(m.volume, size.prod(), rtol=1e-6)
    for flow in range(3):
        np.testing.assert_allclose(b.frontal_area(flow), np.delete(size, flow).prod(), rtol=1e-15)
    assert b.reference_length == 3.0


# ---- Ahmed body --------------------------------------------------------------------------------------------

L, W, H, R = 1044.0, 389.0, 288.0, 100.0
PHI = math.radians(25.0)
XS, ZR = L - 222.0 * math.cos(PHI), H - 222.0 * math.sin(PHI)   # slant start, base height
AH_CENTER, AH_LENGTH = np.array([50.0, 30.0, 20.0]), 104.4
S = AH_LENGTH / L


def mm(*pts):
    """Published-frame points (mm from the nose, the centre plane and the underside) → lattice units."""
    q = np.asarray(pts, np.float64).reshape(-1, 3)
    return AH_CENTER + S * (q - [L / 2, 0.0, H / 2])


def _cases():
    """(point in mm, inside?, why), from the published dimensions alone."""
    e = 0.5
    c45, s45 = math.cos(math.pi / 4), math.sin(math.pi / 4)
    mid_slant = np.array([XS + 111 * math.cos(PHI), 0.0, H - 111 * math.sin(PHI)])
    n_slant = np.array([math.sin(PHI), 0.0, math.cos(PHI)])
    top_fillet = np.array([R - R * c45, 0.0, H - R + R * s45])
    n_top = np.array([-c45, 0.0, s45])
    side_fillet = np.array([R - R * math.cos(math.pi / 6), W / 2 - R + R * math.sin(math.pi / 6), 144.0])
    n_side = np.array([-math.cos(math.pi / 6), math.sin(math.pi / 6), 0.0])
    th = math.radians(40)
    crease = np.array([R - R * math.cos(th), W / 2 - R + R * math.sin(th), H - R + R * math.sin(th)])
    diag = np.array([0.0, 1.0, 1.0]) / math.sqrt(2)
    return [
        ((522, 0, 144), True, "the middle"),
        (mid_slant - e * n_slant, True, "just under the slant"),
        (mid_slant + e * n_slant, False, "just over the slant"),
        (top_fillet - e * n_top, True, "just inside the top front fillet"),
        (top_fillet + e * n_top, False, "just outside the top front fillet"),
        (side_fillet - e * n_side, True, "just inside a side front fillet"),
        (side_fillet + e * n_side, False, "just outside a side front fillet"),
        (crease - e * diag, True, "just inside the mitred corner"),
        (crease + e * diag, False, "just outside the mitred corner"),
        ((R - 0.7 * R, W / 2 - R + 0.6 * R, H - R + 0.6 * R), True, "mitred, not spherical, corner"),
        ((-e, 0, 144), False, "in front of the flat nose"),
        ((e, 0, 144), True, "behind the flat nose"),
        ((e, W / 2 - R - e, H - R - e), True, "the flat nose's corner"),
        ((5, 0, 5), False, "where a sharp box would have its bottom front edge"),
        ((L - e, 0, 100), True, "just before the base"),
        ((L + e, 0, 100), False, "just behind the base"),
        ((L - e, 0, ZR - 1), True, "under the slant's lower edge"),
        ((L - e, 0, ZR + 1), False, "over the slant's lower edge"),
        ((XS - 1, 0, H - e), True, "under the roof's rear edge"),
        ((500, 0, H + e), False, "over the roof"),
        ((500, W / 2 - e, H - e), True, "the long edges are sharp"),
        ((500, W / 2 + e, 100), False, "beside the side"),
        ((500, 0, -e), False, "under the floor"),
        ((200, 100, -25), False, "where a stilt would be: stilts are not modelled"),
    ]


def test_ahmed_inside_published_points():
    a = Ahmed(AH_CENTER, AH_LENGTH)
    pts, want, why = zip(*_cases())
    got = a.inside(mm(*[np.asarray(p, float) for p in pts]))
    wrong = [w for w, g, t in zip(why, got, want) if g != t]
    assert not wrong, wrong
    lo, hi = a.bounds()
    np.testing.assert_allclose(0.5 * (lo + hi), AH_CENTER, atol=1e-12)
    np.testing.assert_allclose(hi - lo, S * np.array([L, W, H]), rtol=1e-14)
    assert a.reference_length == AH_LENGTH and AHMED_CD_25 == 0.285


def test_ahmed_distance_simple_points():
    """Points whose nearest surface point is plain from the drawing."""
    a = Ahmed(AH_CENTER, AH_LENGTH)
    pts = mm((522, 0, 300), (-10, 0, 144), (1050, 0, 100), (522, 0, 144), (522, 150, 144), (600, 0, 10))
    want = S * np.array([12.0, 10.0, 6.0, -144.0, -44.5, -10.0])
    np.testing.assert_allclose(a.distance(pts), want, rtol=0, atol=1e-12)


def test_ahmed_distance_against_fine_mesh(tmp_path):
    """|distance| against the distance to a finely meshed surface, near the nose's corners too. The
    mesh's vertices are on the surface; its chords sag at most R(1 − cos(π/4n)) from the fillets, and
    √2 times that from the mitre creases (quarter ellipses of semi-axes R and √2 R)."""
    a = Ahmed(AH_CENTER, AH_LENGTH)
    n = 128
    v, f = a.surface(n=n)
    path = tmp_path / "ahmed.stl"
    trimesh.Trimesh(v, f).export(path)
    ref = StlBody(path, AH_CENTER, AH_LENGTH)   # same bounding box, so the same placement
    g = rng()
    corner = mm((0, W / 2, H))[0]
    p = np.concatenate([around(a, 1500, pad=0.1),
                        corner + S * g.uniform(-160, 40, (1500, 3)) * [1, 1, 1],
                        mm((0, -W / 2, 0))[0] + S * g.uniform(-160, 40, (600, 3)) * [1, -1, -1]])
    d = a.distance(p)
    dr = ref.distance(p)
    tol = math.sqrt(2) * S * R * (1 - math.cos(math.pi / (4 * n))) + 2e-5     # + float32 vertices in the STL
    np.testing.assert_allclose(np.abs(d), np.abs(dr), rtol=0, atol=tol)
    clear = np.abs(dr) > tol
    np.testing.assert_array_equal((d < 0)[clear], (dr < 0)[clear])
    sign_agrees(a, p)


def test_ahmed_surface_volume_and_areas():
    a = Ahmed(AH_CENTER, AH_LENGTH)
    m = closed_mesh(a)
    assert m.is_watertight and m.is_winding_consistent
    # Volume by the midpoint rule on a grid over the bounding box, from inside() alone.
    lo, hi = a.bounds()
    shape = (200, 76, 56)
    axes = [lo[k] + (np.arange(shape[k]) + 0.5) * (hi[k] - lo[k]) / shape[k] for k in range(3)]
    g = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)
    cell = np.prod((hi - lo) / shape)
    np.testing.assert_allclose(m.volume, a.inside(g).sum() * cell, rtol=1e-2)
    # Projected areas: along x the long edges are sharp (full width × height); along y and z the
    # side profile (the centre plane y = 0) and the plan (mid-height, under the slant) by counting.
    np.testing.assert_allclose(a.frontal_area(0), S * S * W * H, rtol=1e-14)
    cell_xz = (hi[0] - lo[0]) / shape[0] * (hi[2] - lo[2]) / shape[2]
    side = a.inside(np.stack(np.meshgrid(axes[0], [AH_CENTER[1]], axes[2], indexing="ij"), -1)).sum() * cell_xz
    np.testing.assert_allclose(a.frontal_area(1), side, rtol=5e-3)
    cell_xy = (hi[0] - lo[0]) / shape[0] * (hi[1] - lo[1]) / shape[1]
    plan = a.inside(np.stack(np.meshgrid(axes[0], axes[1], [AH_CENTER[2]], indexing="ij"), -1)).sum() * cell_xy
    np.testing.assert_allclose(a.frontal_area(2), plan, rtol=5e-3)


# ---- bodies from mesh files ------------------------------------------------------------------------------

def save(mesh, path):
    mesh.export(path, file_type="stl")
    return path


def test_stl_box_exact(tmp_path):
    """A box mesh is the box: inside and distance match the analytic box (1e-9), placement and scale
    follow the bounding box."""
    mesh = trimesh.creation.box(extents=(2.0, 1.0, 0.5))        # dyadic: exact in float32
    path = save(mesh, tmp_path / "box.stl")
    c, length = np.array([4.0, -2.0, 1.0]), 8.0
    body = StlBody(path, c, length)
    size = np.array([2.0, 1.0, 0.5]) * length / 2.0
    p = around(Box(c, size), 3000)
    ins, d = sign_agrees(body, p)
    want_in, want_d = box_distance(p, c, size)
    np.testing.assert_array_equal(ins, want_in)
    np.testing.assert_allclose(np.abs(d), want_d, rtol=0, atol=1e-9)
    lo, hi = body.bounds()
    np.testing.assert_allclose(lo, c - size / 2, atol=1e-12)
    np.testing.assert_allclose(hi, c + size / 2, atol=1e-12)
    for flow in range(3):
        np.testing.assert_allclose(body.frontal_area(flow), np.delete(size, flow).prod(), rtol=1e-12)
    m = closed_mesh(body)
    assert m.is_watertight
    np.testing.assert_allclose(m.volume, size.prod(), rtol=1e-6)
    assert body.reference_length == length


@pytest.mark.parametrize("flip", [False, True])
def test_stl_icosphere_against_sphere(tmp_path, flip):
    """An icosphere against the analytic sphere, away from the surface by more than the facets' sag; a
    mesh turned inside out reads the same."""
    mesh = trimesh.creation.icosphere(subdivisions=3, radius=1.0)
    if flip:
        mesh = trimesh.Trimesh(mesh.vertices, mesh.faces[:, ::-1], process=False)
    path = save(mesh, tmp_path / "ball.stl")
    c, length = np.array([1.0, 2.0, 3.0]), 10.0
    body = StlBody(path, c, length)
    r = length / mesh.extents.max()                     # the unit sphere's radius after scaling
    p = around(body, 3000, pad=0.2)
    rho = np.linalg.norm(p - c, axis=1)
    far = np.abs(rho - r) > 0.02 * r                     # sag of a level-3 icosphere: about 0.4 % of r
    ins, d = sign_agrees(body, p)
    np.testing.assert_array_equal(ins[far], (rho < r)[far])
    np.testing.assert_allclose(np.abs(d)[far], np.abs(rho - r)[far], rtol=0, atol=0.01 * r)
    for flow in range(3):
        np.testing.assert_allclose(body.frontal_area(flow), math.pi * r * r, rtol=1e-2)
    m = closed_mesh(body)
    assert m.is_watertight and m.is_winding_consistent and m.volume > 0
    np.testing.assert_allclose(m.volume, 4 / 3 * math.pi * r ** 3, rtol=2e-2)


def test_stl_chunking_does_not_change_results(tmp_path, monkeypatch):
    mesh = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
    body = StlBody(save(mesh, tmp_path / "ball.stl"), (0, 0, 0), 2.0)
    p = around(body, 300)
    w, u, area = body.winding(p), body.unsigned_distance(p), body.frontal_area(1)
    monkeypatch.setattr(bodies, "_PAIRS", 97)          # chunks that split points and triangles unevenly
    np.testing.assert_allclose(body.winding(p), w, rtol=0, atol=1e-12)
    np.testing.assert_allclose(body.unsigned_distance(p), u, rtol=0, atol=0)
    np.testing.assert_allclose(body.frontal_area(1), area, rtol=0, atol=0)


def test_default_stl_preset_mesh():
    path = REPO / "presets" / "amr3d-stl" / "body.stl"
    assert path.stat().st_size < 200_000
    body = StlBody(path, (0, 0, 0), 64.0)
    m = closed_mesh(body)
    assert m.is_watertight and m.is_winding_consistent and m.volume > 0
    lo, hi = body.bounds()
    np.testing.assert_allclose((hi - lo).max(), 64.0, rtol=1e-12)
    np.testing.assert_allclose(0.5 * (lo + hi), 0.0, atol=1e-9)
    assert body.inside(np.zeros((1, 3)))[0] and not body.inside(hi[None] + 1.0)[0]
    assert 0.5 < body.frontal_area(0) / np.prod((hi - lo)[1:]) < 1.0
    # inside() skips the sum for boxes of points no triangle meets: the same answer as the plain sum,
    # on a lattice (points on shared planes, as the solver asks) and on scattered points.
    ax = [np.arange(np.floor(lo[k]), np.ceil(hi[k]) + 1.0, 2.0) for k in range(3)]
    grid = np.stack(np.meshgrid(*ax, indexing="ij"), axis=-1).reshape(-1, 3)
    for p in (grid, around(body, 2000, pad=0.05)):
        np.testing.assert_array_equal(body.inside(p), body.winding(p) > 0.5)


# ---- refusals ---------------------------------------------------------------------------------------------

def test_stl_refusals(tmp_path):
    missing = tmp_path / "nope.stl"
    with pytest.raises(ValueError) as e:
        StlBody(missing, (0, 0, 0), 1.0)
    one_line_error(e, missing, "does not exist")
    with pytest.raises(ValueError) as e:
        StlBody(tmp_path, (0, 0, 0), 1.0)
    one_line_error(e, tmp_path, "is a folder")
    fifo = tmp_path / "pipe.stl"
    os.mkfifo(fifo)
    with pytest.raises(ValueError) as e:
        StlBody(fifo, (0, 0, 0), 1.0)
    one_line_error(e, fifo, "not a regular file")

    empty = tmp_path / "empty.stl"
    empty.write_bytes(b"")
    with pytest.raises(ValueError) as e:
        StlBody(empty, (0, 0, 0), 1.0)
    one_line_error(e, empty, "empty")

    text = tmp_path / "notes.stl"
    text.write_text("these are my notes\nnot a mesh at all\n")
    with pytest.raises(ValueError) as e:
        StlBody(text, (0, 0, 0), 1.0)
    one_line_error(e, text, "not an STL file")

    no_faces = tmp_path / "nofaces.stl"
    no_faces.write_bytes(b"\0" * 84)                       # binary STL of zero triangles
    with pytest.raises(ValueError) as e:
        StlBody(no_faces, (0, 0, 0), 1.0)
    one_line_error(e, no_faces, "no faces")

    ball = trimesh.creation.icosphere(subdivisions=1)
    open_mesh = save(trimesh.Trimesh(ball.vertices, ball.faces[1:], process=False), tmp_path / "open.stl")
    with pytest.raises(ValueError) as e:
        StlBody(open_mesh, (0, 0, 0), 1.0)
    one_line_error(e, open_mesh, "is not watertight (3 open edges)", "mesh editor")

    faces = ball.faces.copy()
    faces[0] = faces[0, ::-1]
    twisted = save(trimesh.Trimesh(ball.vertices, faces, process=False), tmp_path / "twisted.stl")
    with pytest.raises(ValueError) as e:
        StlBody(twisted, (0, 0, 0), 1.0)
    one_line_error(e, twisted, "inconsistently oriented")

    flat = save(trimesh.Trimesh([[0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 1, 2], [0, 2, 1]], process=False),
                tmp_path / "flat.stl")
    with pytest.raises(ValueError) as e:
        StlBody(flat, (0, 0, 0), 1.0)
    one_line_error(e, flat, "zero extent along z")

    good = save(ball, tmp_path / "good.stl")
    for bad in (0.0, -2.0, float("nan")):
        with pytest.raises(ValueError) as e:
            StlBody(good, (0, 0, 0), bad)
        one_line_error(e, "stl", "length")


@pytest.mark.parametrize("build, kind, value", [
    (lambda: Sphere((0, 0, 0), -1.0), "sphere", "-1.0"),
    (lambda: Cylinder((0, 0, 0), -2.0, 1.0, "x"), "cylinder", "-2.0"),
    (lambda: Cylinder((0, 0, 0), 2.0, 0.0, "x"), "cylinder", "0.0"),
    (lambda: Box((0, 0, 0), (1.0, -3.0, 1.0)), "box", "-3.0"),
    (lambda: Box((0, 0, 0), (1.0, 1.0, 0.0)), "box", "0.0"),
    (lambda: Ahmed((0, 0, 0), -5.0), "ahmed", "-5.0"),
    (lambda: Ahmed((0, 0, 0), 0.0), "ahmed", "0.0"),
])
def test_size_refusals(build, kind, value):
    with pytest.raises(ValueError) as e:
        build()
    one_line_error(e, kind, value)


# ---- make() -------------------------------------------------------------------------------------------------

def test_make_every_kind(tmp_path):
    save(trimesh.creation.box(extents=(1.0, 2.0, 4.0)), tmp_path / "brick.stl")
    specs = [
        BodySpec(kind="sphere", center=(1, 2, 3), diameter=4),
        BodySpec(kind="cylinder", center=(1, 2, 3), diameter=4, length=6, axis="y"),
        BodySpec(kind="box", center=(1, 2, 3), size=(1, 2, 3)),
        BodySpec(kind="ahmed", center=(1, 2, 3), length=20),
        BodySpec(kind="stl", center=(1, 2, 3), length=8, path="brick.stl"),
    ]
    for spec in specs:
        body = make(spec, str(tmp_path))
        assert body.name == spec.kind
        assert body.reference_length == bodies.reference_length(spec)
        assert body.inside(np.array([[1.0, 2.0, 3.0]]))[0]
        lo, hi = body.bounds()
        np.testing.assert_allclose(0.5 * (lo + hi), [1, 2, 3], atol=1e-12)
    assert isinstance(make(specs[1]), Cylinder) and make(specs[1]).axis == 1
    stl = make(specs[-1], str(tmp_path))
    np.testing.assert_allclose(stl.bounds()[1] - stl.bounds()[0], [2.0, 4.0, 8.0], rtol=1e-12)
    with pytest.raises(ValueError) as e:
        make(specs[-1], str(tmp_path / "elsewhere"))
    one_line_error(e, tmp_path / "elsewhere" / "brick.stl")
    with pytest.raises(ValueError) as e:
        make(BodySpec(kind="cylinder", center=(0, 0, 0), diameter=2))   # length left at 0
    one_line_error(e, "cylinder", "length")


def _binary_stl(path, vertices, faces):
    """A binary STL of float32 corners written by hand (trimesh's exporter would round-trip them)."""
    tri = np.asarray(vertices, np.float32)[np.asarray(faces)]
    rec = np.zeros(len(tri), dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")])
    rec["v"] = tri
    path.write_bytes(b"\0" * 80 + np.uint32(len(tri)).tobytes() + rec.tobytes())
    return path


def test_an_stl_near_float32_overflow_reads_without_warnings(tmp_path):
    """audit D14: a tetrahedron with float32 corners ~1e38 (two of them differing only by 1e38 along x).
    trimesh's vertex merge rounds coordinates × 1e8 to int64: that overflowed with a RuntimeWarning the
    user saw, and merged corners that differ. No warning escapes, and the mesh keeps its 4 corners."""
    import warnings

    small = trimesh.Trimesh([[1, 0, 0], [2, 0, 0], [1, 1, 0], [1, 0, 1]], [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    assert small.is_watertight and small.is_winding_consistent
    path = _binary_stl(tmp_path / "huge.stl", np.asarray(small.vertices) * 1e38, small.faces)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v, f = bodies._read_mesh(str(path))
        body = StlBody(path, (8.0, 8.0, 8.0), 4.0)
    assert not caught, [f"{w.category.__name__}: {w.message}" for w in caught]
    assert v.shape == (4, 3) and f.shape == (4, 3), (v, f)
    np.testing.assert_allclose(np.sort(v[:, 0]), np.float32(1e38) * np.array([1, 1, 1, 2]), rtol=1e-7,
                               err_msg="the corners' x in level-0 units as read from the file")
    np.testing.assert_allclose(body.bounds()[1] - body.bounds()[0], [4.0, 4.0, 4.0], rtol=1e-12,
                               err_msg="the body's extent after scaling to length 4")
    assert body.inside(np.array([[7.0, 7.0, 7.0]]))[0], "a point inside the scaled tetrahedron"
