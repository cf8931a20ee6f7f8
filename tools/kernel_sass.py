#!/usr/bin/env python3
"""Registers and SASS of nagare CUDA kernels without a GPU: compile one shader file for sm_90 with
the local nvcc (ptxas -v), disassemble with cuobjdump, print each kernel's registers, spills and
opcode histogram. Costs no device time; use it before a device call when tuning a kernel.

  tools/kernel_sass.py cuda/lbm2d/lbm2d.cu "lbm_fused_pipe<false, 2, unsigned int>" \
      --opt=--prec-div=false [--define NAME=VALUE] [--sass out.sass]

An instance is a name expression as the engine gives NVRTC (a template instance, instantiated here
by taking its address) or a full signature (explicit template instantiation). From Python, the
engine's own description of a module compiles the same way (source, name expressions, options and
defines of an engine/cuda.py ``KernelSpec``)::

    kernel_sass.report(single_step(preset, "fp16", 9.0).spec)     # engine/lbm2d/launch.py

Needs nvcc (CUDA 12/13; NAGARE_NVCC overrides) and cuobjdump + nvdisasm on PATH, in NAGARE_CUDA_BIN,
or in this Python's nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels."""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def find_tool(name: str) -> str:
    found = shutil.which(name, path=os.pathsep.join(filter(None, [os.environ.get("NAGARE_CUDA_BIN"),
                                                                    os.environ.get("PATH")])))
    if found:
        return found
    try:
        import nvidia  # the pip wheels put their binaries under nvidia/cu*/bin
        for base in nvidia.__path__:
            for cand in sorted(Path(base).glob(f"cu*/bin/{name}")):
                return str(cand)
    except ImportError:
        pass
    sys.exit(f"kernel_sass: {name} not found (install the CUDA toolkit or the nvidia-cuda-{name} wheel)")


def instantiation(expr: str, i: int) -> str:
    """Source that makes nvcc emit the kernel ``expr``: a full signature is instantiated explicitly,
    a name expression (NVRTC's form) by taking its address."""
    if "(" in expr:
        return f"template __global__ void {expr};"
    return f"[[maybe_unused]] static void* const nagare_instance_{i} = (void*)&{expr};"


def report(spec, arch: str = "sm_90", sass_path: str | None = None) -> int:
    """Compile a ``KernelSpec`` (engine/cuda.py) with nvcc for ``arch``: print each kernel's
    registers, spills and opcode histogram; 1 if it does not compile."""
    nvcc = os.environ.get("NAGARE_NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists() and not shutil.which(nvcc):
        sys.exit("kernel_sass: nvcc not found (set NAGARE_NVCC)")
    cuobjdump = find_tool("cuobjdump")
    os.environ["PATH"] = f"{Path(find_tool('nvdisasm')).parent}{os.pathsep}{os.environ['PATH']}"
    src = spec.code + "\n" + "\n".join(instantiation(e, i) for i, e in enumerate(spec.name_expressions))
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        cu.write_text(src)
        res = subprocess.run([nvcc, f"-arch={arch}", "-cubin", *spec.nvrtc_options, "-Xptxas", "-v",
                              "-o", str(cubin), str(cu)], capture_output=True, text=True)
        if res.returncode:
            print(res.stderr[-4000:], file=sys.stderr)
            return 1
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    for line in res.stderr.splitlines():
        if "Compiling entry" in line or "registers" in line or ("spill" in line and " 0 bytes spill" not in line):
            print(line.strip())
    for fn in re.split(r"\n\s*Function : ", sass)[1:]:
        ops = collections.Counter(
            m.group(1).split(".")[0]
            for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", fn))
        print(f"{fn.splitlines()[0]}: {sum(ops.values())} instructions")
        print("  " + " ".join(f"{k}:{v}" for k, v in ops.most_common(30)))
    if sass_path:
        Path(sass_path).write_text(sass)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="shader path relative to shaders/, e.g. cuda/lbm2d/lbm2d.cu")
    ap.add_argument("instances", nargs="+", help="name expressions or full kernel signatures to instantiate")
    ap.add_argument("--opt", action="append", default=[], help="extra compiler option (repeatable)")
    ap.add_argument("--define", action="append", default=[], help="NAME[=VALUE] define (repeatable)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--sass", help="also write the full SASS listing here")
    args = ap.parse_args(argv)

    from nagare.engine.cuda import KernelSpec
    defines = [(k, v if sep else None) for k, sep, v in (d.partition("=") for d in args.define)]
    return report(KernelSpec(args.source, tuple(args.instances), tuple(args.opt), defines), args.arch, args.sass)


if __name__ == "__main__":
    sys.exit(main())
