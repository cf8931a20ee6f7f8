"""tools/gpu_suite.py: the split of the gpu suite across device calls and the merge of their results."""
from __future__ import annotations

import importlib.util
import json
import sys
import tarfile
import types
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "tools" / "gpu_suite.py"
_spec = importlib.util.spec_from_file_location("gpu_suite", _PATH)
gpu_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_suite)

REG = "tests/equivalence/test_registry.py::test_variant_matches_reference"
IDS = [f"{REG}[amr3d-kernels=reference-fp32-2x2x2-m9-cupy]", f"{REG}[amr3d-graph=on-fp32-tree2-m9-cupy]",
       f"{REG}[lbm2d-tile=16x8-fp32-trt-cupy]", f"{REG}[compact-solver=thomas-rotation2d-compact6-cupy]",
       "tests/unit/test_a.py::test_one[1]", "tests/unit/test_a.py::test_one[2]",
       "tests/unit/test_b.py::TestX::test_two", "tests/app/test_c_gpu.py::test_three"]


def test_the_registry_is_cut_by_family_and_other_files_stay_whole():
    assert gpu_suite.unit_of(IDS[0]) == "tests/equivalence/test_registry.py::amr3d"
    assert gpu_suite.unit_of(IDS[2]) == "tests/equivalence/test_registry.py::lbm2d"
    assert gpu_suite.unit_of(IDS[4]) == gpu_suite.unit_of(IDS[5]) == "tests/unit/test_a.py"
    assert gpu_suite.unit_of(IDS[6]) == "tests/unit/test_b.py"


def test_the_deal_is_balanced_deterministic_and_covers_every_test_once():
    weights = {"tests/equivalence/test_registry.py::amr3d": 100, "tests/unit/test_a.py": 60,
               "tests/equivalence/test_registry.py::lbm2d": 50}
    parts = [gpu_suite.part_ids(IDS, 2, k, weights) for k in (1, 2)]
    assert sorted(parts[0] + parts[1]) == sorted(IDS)
    assert not set(parts[0]) & set(parts[1])
    assert parts == [gpu_suite.part_ids(list(IDS), 2, k, dict(weights)) for k in (1, 2)]
    # longest first: amr3d (100) to part 1, test_a (60) and lbm2d (50) to part 2, then the small
    # units (3 s a test by default) to part 2 until it passes part 1's 100 s
    assert gpu_suite.deal(gpu_suite.unit_seconds(IDS, weights), 2)[0][0] == "tests/equivalence/test_registry.py::amr3d"
    assert parts[0][:2] == IDS[:2]
    with pytest.raises(ValueError):
        gpu_suite.part_ids(IDS, 2, 3, weights)


def test_collected_ids_are_read_from_collect_only_output():
    text = "\n".join(IDS[:3]) + "\n\nnagare: 3 gpu-marked tests skipped\n3/10 tests collected (7 deselected) in 1.0s\n"
    assert gpu_suite.read_collected(text) == IDS[:3]


def _junit(path: Path, cases: str) -> None:
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}'
                    f'<testcase time="0.000" /></testsuite></testsuites>')


def _case(nodeid: str, seconds: float, child: str = "") -> str:
    path, *rest = nodeid.split("::")
    module = path[:-3].replace("/", ".")
    classname = ".".join([module, *rest[:-1]])
    return (f'<testcase classname="{classname}" name="{rest[-1]}" file="{path}" line="1" '
            f'time="{seconds}">{child}</testcase>')


def test_merge_sums_the_parts_with_reruns_cut_runs_and_skip_reasons(tmp_path):
    one, two = tmp_path / "one" / "part1", tmp_path / "two" / "part2"
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    (one / "ids.txt").write_text("".join(f"{n}\n" for n in IDS[:5]))
    _junit(one / "main.xml", _case(IDS[0], 2.5) + _case(IDS[1], 1.0, '<failure message="assert 1 == 2">x</failure>')
           + _case(IDS[2], 0.5, '<skipped type="pytest.skip" message="fp64 only">s</skipped>')
           + _case(IDS[3], 0.2, '<failure message="out of memory">x</failure>'))
    _junit(one / "rerun.xml", _case(IDS[1], 1.0, '<failure message="assert 1 == 2">x</failure>')
           + _case(IDS[3], 0.3))
    # part 2 was cut before its junit file was written: its per-test lines stand in
    (two / "ids.txt").write_text("".join(f"{n}\n" for n in IDS[5:]))
    (two / "results.jsonl").write_text(
        json.dumps({"nodeid": IDS[5], "when": "call", "outcome": "passed", "seconds": 4.0, "message": ""}) + "\n"
        + json.dumps({"nodeid": IDS[6], "when": "setup", "outcome": "skipped", "seconds": 0, "message": "no EGL"})
        + "\n{\"nodeid\": \"cut")
    # the second part comes back as the archive a device call returns
    with tarfile.open(tmp_path / "two" / "gpu-part2-results.tar.gz", "w:gz") as tar:
        tar.add(two, arcname="part2")
    for f in two.iterdir():
        f.unlink()
    two.rmdir()

    results, planned = {}, set()
    for d in (tmp_path / "one", tmp_path / "two"):
        r, p, _ = gpu_suite.read_part(d)
        results.update(r)
        planned |= p
    assert results[IDS[0]]["outcome"] == "passed"
    assert results[IDS[1]]["outcome"] == "failed"
    assert results[IDS[2]] == {"outcome": "skipped", "message": "fp64 only", "seconds": 0.5}
    assert results[IDS[3]]["outcome"] == "passed-on-rerun"
    assert results[IDS[5]]["outcome"] == "passed"
    assert results[IDS[6]]["outcome"] == "skipped"
    text = gpu_suite.summary(results, planned)
    assert text.splitlines()[0] == "gpu suite: 2 passed, 1 passed-on-rerun, 1 failed, 2 skipped, 2 not run (6 ran)"
    assert "tests/unit/test_a.py" in text and "fp64 only" in text and IDS[7] in text
    weights = gpu_suite.measured_weights(results, planned, {"tests/unit/test_a.py": 99.0})
    assert weights["tests/equivalence/test_registry.py::amr3d"] == 3.5
    assert weights["tests/unit/test_a.py"] == 99.0  # one of its tests did not run: the old figure stays
    assert gpu_suite.main(["merge", str(tmp_path / "one"), str(tmp_path / "two")]) == 1


def test_the_kernel_cache_archive_keeps_to_its_cap(tmp_path, rng):
    src = tmp_path / "cache"
    src.mkdir()
    for i, size in enumerate((250_000, 200_000, 50_000, 1_000)):
        (src / f"{i}.cubin").write_bytes(rng.bytes(size))  # random bytes: gzip cannot shrink them
    archive = tmp_path / "k.tar.gz"
    packed, left = gpu_suite.pack_cache(src, archive, cap_bytes=400_000)
    assert archive.stat().st_size <= 400_000
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
    assert names == ["0.cubin", "2.cubin", "3.cubin"] and (packed, left) == (3, 1)


def _manifest(path: Path, entries) -> Path:
    path.write_text("".join(json.dumps({"label": code, "files": files, "options": ["--fmad=false"],
                                        "name_expressions": names, "code": code}) + "\n"
                            for code, names, files in entries) + "a line cut by a kill {\n")
    return path


def test_manifests_give_each_module_once_and_only_those_of_the_parts_files(tmp_path):
    a = _manifest(tmp_path / "a.jsonl", [("k1", ["f<float>"], ["tests/t1.py"]), ("k2", [], ["tests/t2.py"])])
    b = _manifest(tmp_path / "b.jsonl", [("k1", ["f<float>"], ["tests/t1.py", "tests/t3.py"]),
                                         ("k1", ["f<double>"], ["tests/t3.py"])])
    everything = gpu_suite.read_manifests([a, b])
    assert [(m["code"], m["name_expressions"]) for m in everything] == [("k1", ["f<float>"]), ("k2", []),
                                                                        ("k1", ["f<double>"])]
    mine = gpu_suite.read_manifests([a, b], {"tests/t3.py"})
    assert [(m["code"], m["name_expressions"]) for m in mine] == [("k1", ["f<float>"]), ("k1", ["f<double>"])]


def test_precompile_compiles_each_module_as_the_engines_do_and_reports_failures(tmp_path, monkeypatch):
    built = []

    class RawModule:
        def __init__(self, code, options, name_expressions):
            self.args = (code, options, name_expressions)

        def compile(self):
            if self.args[0] == "bad":
                raise RuntimeError("NVRTC_ERROR_COMPILATION\nline 2")
            built.append(self.args)

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(RawModule=RawModule))
    manifest = _manifest(tmp_path / "m.jsonl", [("short", ["f<float>"], ["t.py"]), ("bad", [], ["t.py"]),
                                                ("the longest", [], ["t.py"])])
    done = gpu_suite.precompile(gpu_suite.read_manifests([manifest]), jobs=1)
    assert built == [("the longest", ("--fmad=false",), None), ("short", ("--fmad=false",), ["f<float>"])]
    assert [why for _, why in done] == [None, "RuntimeError: NVRTC_ERROR_COMPILATION", None]
    assert gpu_suite.main(["precompile", str(manifest), str(tmp_path / "absent.jsonl"), "--jobs", "1"]) == 0
