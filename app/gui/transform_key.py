"""A hashable snapshot of what a VisPy transform maps by: the key of a result computed from it.

Mapping points through a chain that ``get_transform`` builds anew for every draw is a good part of
a steady frame's time on the UI thread (the text's pixel scale, the splat's view matrix and point
scale), while the transforms change only when the camera moves or the canvas is resized or drawn
into an export's framebuffer. A result kept with :func:`transform_key` of its transforms is the
one the mapping gives until one of their parameters changes.
"""
from __future__ import annotations

from vispy.visuals.transforms import ChainTransform, MatrixTransform, NullTransform, STTransform
from vispy.visuals.transforms.base_transform import InverseTransform


def transform_key(*transforms) -> tuple | None:
    """The parameters of ``transforms`` (chains flattened, in order), None where one is of a kind
    not listed here (its result is not to be kept)."""
    key: list = []
    stack = list(reversed(transforms))
    while stack:
        t = stack.pop()
        if isinstance(t, ChainTransform):
            stack.extend(reversed(t.transforms))
        elif type(t) is NullTransform:
            key.append(None)
        elif type(t) is STTransform:
            key.append((*t.scale, *t.translate))
        elif type(t) is MatrixTransform:  # the cameras'
            key.append(tuple(t.matrix.ravel()))
        elif type(t) is InverseTransform:  # a ViewBox's scene maps through one
            inner = transform_key(t._inverse)
            if inner is None:
                return None
            key.append(("inverse", inner))
        else:
            return None
    return tuple(key)
