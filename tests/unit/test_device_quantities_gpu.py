"""engine.device_quantities() (the app's worker reads the logged quantities without waiting for the
stream) gives the same floats as logged_quantities(), on a real GPU."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name,sets", [("amr3d-sphere-re20", []), ("amr3d-vortex-adapt", []),
                                       ("compact-advection1d", [])])
def test_device_quantities_finish_as_logged_quantities(name, sets):
    e = create_engine(load_preset(name, sets, backend="cupy"), get_backend("cupy"))
    e.step(6)
    with e.on_stream():
        values, finish = e.device_quantities()
    host = {k: e.backend.asnumpy(v) for k, v in values.items()}
    got, want = finish(host), e.logged_quantities()
    assert want and sorted(got) == sorted(want)
    np.testing.assert_array_equal(np.array([got[k] for k in want]), np.array(list(want.values())))


def test_engine_without_quantities_has_no_device_path():
    e = create_engine(load_preset("compact-vortex-outflow", backend="cupy"), get_backend("cupy"))
    assert e.logged_quantities() == {} and e.device_quantities() is None


def test_device_force_selects_the_same_links_as_the_host_mask():
    """On a device the force gathers the owners' links by index (a boolean mask there waits for the
    device's queue): the host mask's sum over the same state, up to the reductions' order."""
    import cupy as cp
    from nagare.engine.amr3d import boundaries, d3q27

    e = create_engine(load_preset("amr3d-sphere-re20", backend="cupy"), get_backend("cupy"))
    e.step(4)
    st = e.shape.stepper
    host_bnd = e._bnd
    for lv, b in st.bnd.level.items():
        assert b.link_owner.dtype != np.bool_
        f2 = st._fp32(st.bufs[lv][0]).reshape(d3q27.Q, -1)
        got = cp.asnumpy(boundaries.force(cp, f2, b, 0, lv))
        want = boundaries.force(np, cp.asnumpy(f2), host_bnd.level[lv], 0, lv)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())
