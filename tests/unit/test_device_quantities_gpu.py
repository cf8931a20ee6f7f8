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
