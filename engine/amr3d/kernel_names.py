"""amr3d's CUDA kernels by name, spelled once: each table maps the key the launching code uses to the
NVRTC name expression of the kernel (shaders/cuda/amr3d/), in the order the compilations list them.

- the ladder (ladder.cu) for leaves of m³ points, and the uniform lattice's kernel;
- Kobayashi's CSM pre-pass (ladder.cu), compiled only with les = csm;
- the level coupling (coupling.cu) and its CSM velocities;
- the tracer step (tracers.cu), templated on the positions' and the buffers' types.
"""
from __future__ import annotations

from .ladder import SHELL_CLASSES

TRACER_BEGIN, TRACER_FINISH = "amr3d_tracer_begin", "amr3d_tracer_finish"


def ladder(m: int) -> dict[str, str]:
    """The ladder's kernels for leaves of m³ points (without the 26 shell classes: shell_classes)."""
    return {"naive": f"amr3d_naive<{m}>", "naive16": f"amr3d_naive<{m},unsigned short>",
            "inner": f"amr3d_inner<{m}>", "shell": f"amr3d_shell<{m}>", "sorted": f"amr3d_shell_sorted<{m}>",
            "inner_apart": f"amr3d_inner_apart<{m}>", "shell_apart": f"amr3d_shell_apart<{m}>",
            "naive_fix32": f"amr3d_naive_fix<{m},int>", "naive_fix64": f"amr3d_naive_fix<{m},long long>",
            "naive_fix32_16": f"amr3d_naive_fix<{m},int,unsigned short>",
            "naive_fix64_16": f"amr3d_naive_fix<{m},long long,unsigned short>"}


def shell_classes(m: int) -> list[str]:
    """The templates rung's kernel of each shell class (ladder.SHELL_CLASSES order)."""
    return [f"amr3d_shell_class<{m},{gi},{gj},{gk}>" for gi, gj, gk in SHELL_CLASSES]


# the uniform lattice's kernel, on fp32 and on fp16 storage (d3q27.cuh load_pop/store_pop)
UNIFORM = {"uniform": "d3q27_uniform<float>", "uniform16": "d3q27_uniform<unsigned short>"}


def csm(m: int) -> dict[str, str]:
    """The CSM's pre-pass kernels for leaves of m³ points."""
    return {"csm_velocity": f"amr3d_csm_velocity<{m}>", "csm_coefficient": f"amr3d_csm_coefficient<{m}>",
            "csm_copies": "amr3d_csm_copies"}


# the level coupling on fp32 level buffers, then (keys + "_16") on fp16 storage (d3q27.cuh load_pop,
# store_pop)
COUPLING = {"rescale": "amr3d_rescale_points<float>", "restrict": "amr3d_restrict<float>",
            "fixup32": "amr3d_fixup<int>", "fixup64": "amr3d_fixup<long long>",
            "outflow": "amr3d_outflow_points<float>", "set_points": "amr3d_set_points<float>",
            "links": "amr3d_links<float>",
            "rescale_two": "amr3d_rescale_two<float>", "restrict_fine": "amr3d_restrict_fine<float>",
            "restrict_two": "amr3d_restrict_two<float>",
            "interp_rows": "amr3d_interpolate_rows<1>", "interp_rows3": "amr3d_interpolate_rows<3>",
            "interp_rows9": "amr3d_interpolate_rows<9>",
            "rows_need32": "amr3d_rows_need<int>", "rows_need64": "amr3d_rows_need<long long>",
            "rows_build": "amr3d_rows_build",
            "rescale_16": "amr3d_rescale_points<unsigned short>", "restrict_16": "amr3d_restrict<unsigned short>",
            "fixup32_16": "amr3d_fixup<int,unsigned short>", "fixup64_16": "amr3d_fixup<long long,unsigned short>",
            "outflow_16": "amr3d_outflow_points<unsigned short>", "set_points_16": "amr3d_set_points<unsigned short>",
            "links_16": "amr3d_links<unsigned short>",
            "rescale_two_16": "amr3d_rescale_two<unsigned short>",
            "restrict_fine_16": "amr3d_restrict_fine<unsigned short>",
            "restrict_two_16": "amr3d_restrict_two<unsigned short>"}


def interpolate(stencil: int) -> str:
    """The coarse interpolation of ``stencil`` points (8: P0's trilinear, 27: quadratic)."""
    return f"amr3d_interpolate<{stencil}>"



# the fix-up's velocities for the CSM's coefficient at the interface points
CSM_FIX = {"csm_fix32": "amr3d_csm_fix_velocity<int>", "csm_fix64": "amr3d_csm_fix_velocity<long long>"}
