#!/usr/bin/env python3
"""Which NVRTC compilations each test of a gpu test file asks for, counted without a GPU.

Most of the gpu suite's time is NVRTC: CuPy compiles one module per source text, options and name
expressions, and every xdist worker that needs a module compiles it (CuPy's disk cache helps only
once a module is written). This runs a test file under a stand-in ``cupy`` (tests/unit/fake_cupy.py:
NumPy arrays) whose ``RawModule`` records (source hash, options, name expressions) instead of
compiling and whose kernels do nothing; the tests' value checks (numpy.testing) are switched off, as
the kernels compute nothing. nagare's per-process kernel caches are emptied before each test, so a
test's count is everything it compiles on a fresh process (an xdist worker's first test).

  .venv/bin/python tools/compile_census.py tests/equivalence/test_compact_gpu.py [-k EXPR] [--json FILE]

Prints per test the modules it needs and how many no earlier test of the file needed, then every
distinct module with the number of tests that need it. CuPy's own element-wise kernels (array
arithmetic) are not counted: they are small, compiled per operation and dtype, not per test.
A test that fails here (a check the stand-in cannot satisfy) is listed: its count stops where it failed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


class _Function:
    """A compiled kernel that does nothing (the census needs the lookups, not the results)."""

    max_threads_per_block = 1024
    num_regs = 32
    shared_size_bytes = 0

    def __init__(self):
        self.max_dynamic_shared_size_bytes = 48 * 1024

    def __call__(self, *args, **kwargs):
        return None


class _Module:
    def compile(self):
        return None

    def get_function(self, name):
        return _Function()


class Census:
    def __init__(self):
        self.current = "(outside a test)"
        self.by_test: dict[str, list[tuple]] = defaultdict(list)
        self.labels: dict[tuple, str] = {}
        self.code: dict[tuple, str] = {}

    def raw_module(self, code: str, options=(), name_expressions=None):
        key = (hashlib.sha256(code.encode()).hexdigest()[:12], tuple(options), tuple(name_expressions or ()))
        first = code.lstrip().splitlines()[0][:70] if code.strip() else ""
        names = list(name_expressions or ())
        self.code.setdefault(key, code)
        what = (names[0] + (f" +{len(names) - 1}" if len(names) > 1 else "")) if names else first
        self.labels.setdefault(key, f"{key[0]} {' '.join(options)} | {what}")
        if key not in self.by_test[self.current]:
            self.by_test[self.current].append(key)
        return _Module()


def stand_in(census: Census, workdir: Path):
    """The fake CuPy of tests/unit/fake_cupy.py with the census' RawModule and the NumPy functions the
    engines call on their xp."""
    sys.path.insert(0, str(ROOT))
    from tests.unit import compact_fake_gpu, fake_cupy

    cp = fake_cupy.make(workdir, cost=lambda block, last: 1.0)
    for name in compact_fake_gpu.NUMPY_NAMES + ("ones", "ones_like", "arange", "stack", "concatenate",
                                                "isfinite", "all", "any", "copyto", "divide", "square"):
        if hasattr(np, name):
            setattr(cp, name, getattr(np, name))
    cp.empty = fake_cupy._aligned(np.empty)
    cp.RawModule = census.raw_module
    cp.__getattr__ = lambda name: getattr(np, name)  # the rest of the array API: NumPy's (PEP 562)
    cp.cuda.runtime.memGetInfo = lambda: (2**30, 2**30)
    cp.cuda.Device = lambda *a: types.SimpleNamespace(id=0, synchronize=lambda: None)
    cp.cuda.runtime.getDeviceCount = lambda: 1
    cp.cuda.device = types.SimpleNamespace(get_cusparse_handle=lambda: 0)
    cp.get_array_module = lambda *a: np
    sys.modules["cupy"] = cp
    # gtsv2 asks for CuPy's cuSPARSE bindings; its solve (cuSPARSE, no NVRTC) is replaced below
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.cusparse = types.SimpleNamespace(dgtsv2StridedBatch=None)
    for name, mod in (("cupy_backends", types.ModuleType("cupy_backends")),
                      ("cupy_backends.cuda", types.ModuleType("cupy_backends.cuda")),
                      ("cupy_backends.cuda.libs", libs), ("cupy_backends.cuda.libs.cusparse", libs.cusparse)):
        sys.modules[name] = mod
    return cp


class Plugin:
    def __init__(self, census: Census):
        self.census = census
        self.failed: dict[str, str] = {}

    def pytest_runtest_setup(self, item):
        from nagare.engine import cuda
        from nagare.engine.stencil import loops

        for c in (cuda._compiled, cuda._function, loops._compiled):  # a fresh process per test
            c.cache_clear()
        self.census.current = item.nodeid
        self.census.by_test.setdefault(item.nodeid, [])

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.failed:
            self.failed[report.nodeid] = str(report.longrepr).strip().splitlines()[-1][:160]


def nvcc_seconds(census: Census, keys) -> dict:
    """Seconds nvcc takes for each module (sm_90 cubin, the module's options, its name expressions
    instantiated as tools/kernel_sass.py does): a stand-in for NVRTC's time on the GPU machine."""
    sys.path.insert(0, str(ROOT / "tools"))
    from kernel_sass import instantiation

    nvcc = os.environ.get("NAGARE_NVCC") or "nvcc"
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in keys:
            _, options, names = k
            cu = Path(tmp) / "k.cu"
            cu.write_text(census.code[k] + "\n" + "\n".join(instantiation(e, i) for i, e in enumerate(names)))
            t0 = time.perf_counter()
            res = subprocess.run([nvcc, "-arch=sm_90", "-cubin", *options, "-o", str(Path(tmp) / "k.cubin"), str(cu)],
                                 capture_output=True, text=True)
            out[k] = time.perf_counter() - t0
            if res.returncode:
                print(f"nvcc failed on {census.labels[k]}: {res.stderr[-300:]}", file=sys.stderr)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("-k", default=None)
    ap.add_argument("--json", type=Path, help="write {test: [module labels]} here")
    ap.add_argument("--manifest", type=Path,
                    help="append every distinct module (code, options, name expressions, the test files needing "
                         "it) as JSON lines: tools/gpu-suite compiles them before a part's tests")
    ap.add_argument("--nvcc", action="store_true",
                    help="also time each distinct module's compilation with nvcc -cubin for sm_90 (one at a time)")
    args = ap.parse_args(argv)

    census = Census()
    work = Path(tempfile.mkdtemp(prefix="compile-census-"))
    stand_in(census, work)
    import pytest
    from nagare.engine.compact.solvers import gtsv2

    gtsv2.Gtsv2Device.solve = lambda self, d, x, nsys, sys_stride, elem_stride: None
    np.testing.assert_allclose = lambda *a, **k: None  # the kernels compute nothing here
    from nagare.engine.compact import schemes

    # the dense references (a 16384² matrix) are what the checks compare with: not needed for a count
    schemes.derivative_dense = lambda f, h, boundary, delta=0.0, axis=-1: np.zeros_like(f)
    np.testing.assert_array_equal = lambda *a, **k: None
    plugin = Plugin(census)
    pargs = [args.path, "-q", "-p", "no:cacheprovider", "-p", "no:xvfb", "-o", "addopts="]
    if args.k:
        pargs += ["-k", args.k]
    os.environ["NAGARE_CACHE_DIR"] = str(work / "nagare")
    pytest.main(pargs, plugins=[plugin])

    seen: set = set()
    users: dict[tuple, int] = defaultdict(int)
    print(f"\n{'modules':>7s} {'new':>4s}  test")
    for test, keys in census.by_test.items():
        if test == "(outside a test)" and not keys:
            continue
        new = [k for k in keys if k not in seen]
        seen.update(keys)
        for k in keys:
            users[k] += 1
        mark = f"   [failed here: {plugin.failed[test]}]" if test in plugin.failed else ""
        print(f"{len(keys):7d} {len(new):4d}  {test.split('::', 1)[-1]}{mark}")
    print(f"\n{len(seen)} distinct modules; {sum(len(k) for k in census.by_test.values())} test × module pairs "
          "(what a fresh process per test would compile)")
    seconds = nvcc_seconds(census, sorted(users)) if args.nvcc else {}
    print(f"\n{'tests':>5s} {'nvcc s' if seconds else ''}  module (source hash, options | first name expression +more)")
    for k, n in sorted(users.items(), key=lambda kv: -kv[1]):
        print(f"{n:5d} {f'{seconds[k]:6.1f}' if k in seconds else ''}  {census.labels[k]}")
    if seconds:
        pairs = sum(seconds.get(k, 0.0) for ks in census.by_test.values() for k in ks)
        print(f"\nnvcc seconds: {sum(seconds.values()):.0f} for the distinct modules, {pairs:.0f} for every "
              "test × module pair")
    if args.manifest:
        files: dict[tuple, set] = defaultdict(set)
        for test, keys in census.by_test.items():
            for k in keys:
                files[k].add(test.split("::", 1)[0])
        with open(args.manifest, "a") as f:
            for k in users:
                f.write(json.dumps({"label": census.labels[k], "files": sorted(files[k]), "options": list(k[1]),
                                    "name_expressions": list(k[2]), "code": census.code[k]}) + "\n")
    if args.json:
        args.json.write_text(json.dumps({"tests": {t: [census.labels[k] for k in ks]
                                                   for t, ks in census.by_test.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
