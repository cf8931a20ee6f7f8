"""nagare (流れ, "flow"): a desktop laboratory for GPU fluid solvers."""

__version__ = "0.1.0"
