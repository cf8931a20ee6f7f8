"""The gpu-marked test suite split across device calls, and the parts' results merged into one.

Three uses (tools/gpu-suite wraps them; docs/gpu-runbook.md has the procedure):

- ``plan``: from a ``pytest --collect-only -q -m gpu`` listing, the tests of part K of N. The suite
  is cut into *units* — a test file, except the registry walk, which is cut by family — and the
  units are dealt to the parts longest first (each to the part with the least time so far), by
  their seconds in tools/gpu-suite-weights.json (a unit it lacks counts its tests at
  ``DEFAULT_TEST_SECONDS``). The deal depends only on the listing and the table, so every call
  and every xdist worker computes the same parts.
- a pytest plugin (``-p gpu_suite`` with tools/ on PYTHONPATH): ``NAGARE_GPU_IDS`` names a file
  of node ids, and only those run; ``NAGARE_GPU_JSONL`` names a file that gets one JSON line per
  test phase as it finishes, so a run cut by its time limit still says what ran.
- ``merge DIR...``: the parts' junit XML files (or their results archives) summed: passed,
  failed, skipped with the reasons, per file, plus the planned tests that never ran; with
  ``--weights-out`` a new weights table from the measured times.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

WEIGHTS = Path(__file__).with_name("gpu-suite-weights.json")
DEFAULT_TEST_SECONDS = 3.0
# Files cut into one unit per family (the first dash-separated word of the parameter id): the
# registry walk holds ~40 % of the gpu tests, far more than one part's share.
SPLIT_BY_FAMILY = {"tests/equivalence/test_registry.py"}
APP_DIR = "tests/app/"


# --- units and the deal -------------------------------------------------------------------------

def test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The unit a test belongs to: its file, or ``file::family`` for a file cut by family."""
    path = test_file(nodeid)
    if path in SPLIT_BY_FAMILY and "[" in nodeid:
        family = nodeid.split("[", 1)[1].split("-", 1)[0]
        return f"{path}::{family}"
    return path


def read_collected(text: str) -> list[str]:
    """Node ids from ``pytest --collect-only -q`` output (other lines ignored)."""
    return [line.strip() for line in text.splitlines() if "::" in line and not line.startswith(" ")]


def load_weights(path: Path = WEIGHTS) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(path.read_text()).get("seconds", {}).items()}
    except (OSError, ValueError):
        return {}


def unit_seconds(nodeids: list[str], weights: dict[str, float]) -> dict[str, float]:
    counts = Counter(unit_of(n) for n in nodeids)
    return {u: weights.get(u, DEFAULT_TEST_SECONDS * n) for u, n in counts.items()}


def deal(seconds: dict[str, float], parts: int) -> list[list[str]]:
    """Units dealt to ``parts`` parts, longest first, each to the least-loaded part (ties: the
    lower part); deterministic for a given table."""
    if parts < 1:
        raise ValueError("parts must be at least 1")
    load = [0.0] * parts
    out: list[list[str]] = [[] for _ in range(parts)]
    for unit in sorted(seconds, key=lambda u: (-seconds[u], u)):
        k = min(range(parts), key=lambda i: (load[i], i))
        out[k].append(unit)
        load[k] += seconds[unit]
    return out


def part_ids(nodeids: list[str], parts: int, part: int, weights: dict[str, float]) -> list[str]:
    """The node ids of part ``part`` (1-based) of ``parts``, in collection order."""
    if not 1 <= part <= parts:
        raise ValueError(f"part {part} is not in 1..{parts}")
    mine = set(deal(unit_seconds(nodeids, weights), parts)[part - 1])
    return [n for n in nodeids if unit_of(n) in mine]


def plan_table(nodeids: list[str], parts: int, weights: dict[str, float]) -> str:
    seconds = unit_seconds(nodeids, weights)
    counts = Counter(unit_of(n) for n in nodeids)
    lines = []
    for k, units in enumerate(deal(seconds, parts), 1):
        total = sum(seconds[u] for u in units)
        lines.append(f"part {k}/{parts}: {sum(counts[u] for u in units)} tests, ~{total:.0f} s of "
                     f"test time (serial; the weights table's estimate)")
        lines += [f"  {seconds[u]:7.0f} s {counts[u]:5d}  {u}" for u in units]
    return "\n".join(lines)


# --- the pytest plugin --------------------------------------------------------------------------

_config = None


def pytest_configure(config):
    global _config
    _config = config


def _wanted_ids() -> set[str] | None:
    path = os.environ.get("NAGARE_GPU_IDS")
    if not path:
        return None
    return set(Path(path).read_text().split("\n")) - {""}


# Before the marker filter and xdist's own hook (which may rename node ids): the ids file holds
# the names as collected.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    wanted = _wanted_ids()
    if wanted is None:
        return
    keep = [it for it in items if it.nodeid in wanted]
    drop = [it for it in items if it.nodeid not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep



def pytest_runtest_logreport(report):
    path = os.environ.get("NAGARE_GPU_JSONL")
    if not path or (_config is not None and hasattr(_config, "workerinput")):
        return  # xdist workers report to the controller, which writes the line
    if report.when != "call" and report.outcome == "passed":
        return
    line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "seconds": round(report.duration, 3), "message": _first_line(report)}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def _first_line(report) -> str:
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    text = str(report.longrepr or "")
    for line in reversed(text.splitlines()):
        if line.startswith("E "):
            return line[1:].strip()
    return text.strip().splitlines()[-1] if text.strip() else ""


# --- reading results ------------------------------------------------------------------------------

def _nodeid(case: ET.Element) -> str:
    """The node id of a junit testcase written with ``junit_family=xunit1`` (it has ``file``)."""
    name = case.get("name", "")
    classname = case.get("classname", "")
    path = case.get("file") or classname.replace(".", "/") + ".py"
    module = path[:-3].replace("/", ".") if path.endswith(".py") else path
    cls = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
    return "::".join(p for p in (path, cls, name) if p)


def read_junit(path: Path) -> dict[str, dict]:
    """{nodeid: {"outcome", "message", "seconds"}} from one junit XML file."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("name"):
            continue  # an interrupted run's placeholder for the test it stopped in
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or (child.text or "").strip()).splitlines()[0:1]
                message = message[0] if message else ""
                if outcome != "skipped":
                    break
        out[_nodeid(case)] = {"outcome": outcome, "message": message,
                              "seconds": float(case.get("time") or 0.0)}
    return out


def read_jsonl(path: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        seen = out.setdefault(r["nodeid"], {"outcome": "passed", "message": "", "seconds": 0.0})
        seen["seconds"] += r.get("seconds", 0.0)
        if r["outcome"] == "skipped" and seen["outcome"] == "passed":
            seen.update(outcome="skipped", message=r.get("message", ""))
        elif r["outcome"] == "failed":
            seen.update(outcome="failed" if r["when"] == "call" else "error", message=r.get("message", ""))
    return out


def _unpack(directory: Path) -> Path:
    """A folder with the part's files: ``directory`` itself, or where its results archive is
    unpacked (next to it when writable, else in /tmp)."""
    archives = sorted(directory.glob("gpu-part*-results.tar.gz"))
    if not archives:
        return directory
    import tempfile

    target = Path(tempfile.mkdtemp(prefix="gpu-suite-merge-"))
    for a in archives:
        with tarfile.open(a) as tar:
            tar.extractall(target, filter="data")
    return target


def read_part(directory: Path) -> tuple[dict[str, dict], set[str], list[str]]:
    """One part's results ({nodeid: result}, later phases over earlier ones), its planned ids and
    notes on where each result came from."""
    where = _unpack(directory)
    results: dict[str, dict] = {}
    notes = []
    # The per-test lines first, then the junit files over them: a phase cut by its time limit has
    # lines but no junit file.
    for j in sorted(where.rglob("*results.jsonl")):
        results.update(read_jsonl(j))
    xmls = sorted(where.rglob("main.xml")) + sorted(where.rglob("app-*.xml"))
    for x in xmls:
        results.update(read_junit(x))
    if results and not xmls:
        notes.append(f"{directory}: no junit XML (the run was cut); results from the per-test lines")
    for x in sorted(where.rglob("rerun.xml")):
        for nodeid, r in read_junit(x).items():
            before = results.get(nodeid)
            if before and before["outcome"] in ("failed", "error") and r["outcome"] == "passed":
                r = dict(r, outcome="passed-on-rerun", message=f"failed under xdist ({before['message']}); "
                                                             "passed alone")
            results[nodeid] = r
    planned: set[str] = set()
    for ids in where.rglob("ids.txt"):
        planned |= set(ids.read_text().split("\n")) - {""}
    return results, planned, notes


def summary(results: dict[str, dict], planned: set[str]) -> str:
    by_file: dict[str, Counter] = defaultdict(Counter)
    for nodeid, r in results.items():
        by_file[test_file(nodeid)][r["outcome"]] += 1
    missing = sorted(planned - set(results))
    for nodeid in missing:
        by_file[test_file(nodeid)]["not run"] += 1
    total = Counter(r["outcome"] for r in results.values())
    total["not run"] = len(missing)
    cols = ["passed", "passed-on-rerun", "failed", "error", "skipped", "not run"]
    lines = ["gpu suite: " + ", ".join(f"{total[c]} {c}" for c in cols if total[c]) + f" ({len(results)} ran)", ""]
    lines.append(f"{'file':60s} " + " ".join(f"{c[:8]:>8s}" for c in cols))
    for path in sorted(by_file):
        lines.append(f"{path:60s} " + " ".join(f"{by_file[path][c]:8d}" for c in cols))
    bad = sorted((n, r) for n, r in results.items() if r["outcome"] in ("failed", "error", "passed-on-rerun"))
    if bad:
        lines += ["", "failed / error / passed only when run alone:"]
        lines += [f"  {r['outcome']:16s} {n}\n      {r['message'][:300]}" for n, r in bad]
    reasons = Counter((test_file(n), r["message"]) for n, r in results.items() if r["outcome"] == "skipped")
    if reasons:
        lines += ["", "skipped, by reason:"]
        lines += [f"  {c:4d}  {path}: {msg[:200]}" for (path, msg), c in sorted(reasons.items())]
    if missing:
        lines += ["", f"not run ({len(missing)}: the call's time ran out before them):"]
        lines += [f"  {n}" for n in missing[:40]] + ([f"  … and {len(missing) - 40} more"] if len(missing) > 40 else [])
    return "\n".join(lines)


# --- the kernel cache that travels between calls ---------------------------------------------------

def pack_cache(src: Path, archive: Path, cap_bytes: int) -> tuple[int, int]:
    """CuPy's cache folder ``src`` into a gzipped tar of at most ``cap_bytes`` (what comes back
    from a device call is limited): the largest binaries first (the longest compilations), then
    whatever else fits. Returns (files packed, files left out)."""
    files = sorted((f for f in src.rglob("*") if f.is_file()), key=lambda f: (-f.stat().st_size, str(f)))
    packed = left = 0
    with open(archive, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
        for f in files:
            # The file's own size bounds what it adds (compressed), so the cap holds.
            if raw.tell() + f.stat().st_size + 65536 > cap_bytes:
                left += 1
                continue
            tar.add(f, arcname=str(f.relative_to(src)))
            packed += 1
    return packed, left


def measured_weights(results: dict[str, dict], planned: set[str], old: dict[str, float]) -> dict[str, float]:
    """Seconds per unit from the runs (the sum of its tests' times); a unit with a planned test
    that did not run keeps its old figure (its sum would be too small)."""
    sums: dict[str, float] = defaultdict(float)
    for nodeid, r in results.items():
        sums[unit_of(nodeid)] += r["seconds"]
    cut = {unit_of(n) for n in planned - set(results)}
    new = dict(old)
    new.update({u: round(s, 1) for u, s in sums.items() if u not in cut})
    return dict(sorted(new.items()))


# --- modules compiled before the tests ---------------------------------------------------------------
# tools/compile_census.py --manifest writes, on any machine, the NVRTC modules a test file compiles (the
# exact source text, options and name expressions of the current tree) as JSON lines. A part compiles
# the modules of its files once each, in parallel, before pytest starts: under xdist every worker that
# needs a module not yet in CuPy's disk cache compiles it itself, and workers that start on neighbouring
# tests need the same modules at the same moment.

def read_manifests(paths, files: set[str] | None = None) -> list[dict]:
    """The distinct modules of the manifests (first seen first), only those some test file in
    ``files`` needs when given."""
    seen: set = set()
    out = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if files is not None and not files & set(m.get("files", ())):
                continue
            key = (m["code"], tuple(m["options"]), tuple(m["name_expressions"]))
            if key not in seen:
                seen.add(key)
                out.append(m)
    return out


def compile_module(m: dict) -> tuple[float, str | None]:
    """One manifest entry through CuPy's RawModule, as the engines compile it (its binary lands in
    CuPy's disk cache); (seconds, the error in one line or None)."""
    import cupy  # the GPU machine only

    t0 = time.perf_counter()
    try:
        cupy.RawModule(code=m["code"], options=tuple(m["options"]),
                       name_expressions=list(m["name_expressions"]) or None).compile()
    except Exception as exc:  # the test that needs it compiles it again and reports the error
        said = str(exc).strip().splitlines()
        return time.perf_counter() - t0, f"{type(exc).__name__}: {said[0][:200] if said else ''}"
    return time.perf_counter() - t0, None


def precompile(modules: list[dict], jobs: int) -> list[tuple[float, str | None]]:
    """Every module compiled once, the largest sources first, in ``jobs`` spawned processes (CUDA
    contexts do not survive fork), or here one after the other when ``jobs`` <= 1."""
    order = sorted(range(len(modules)), key=lambda i: -len(modules[i]["code"]))
    if jobs <= 1:
        done = {i: compile_module(modules[i]) for i in order}
    else:
        done = {}
        try:
            with concurrent.futures.ProcessPoolExecutor(min(jobs, len(modules)),
                                                        mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = {pool.submit(compile_module, modules[i]): i for i in order}
                for fut in concurrent.futures.as_completed(futures):
                    done[futures[fut]] = fut.result()
        except BrokenProcessPool:
            pass  # a process died (host memory): what it left compiles in the tests that need it
    return [done.get(i, (0.0, "not compiled: a compile process died")) for i in range(len(modules))]


# --- command line -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_suite", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="the split of the collected gpu tests")
    p.add_argument("--collected", type=Path, required=True, help="pytest --collect-only -q -m gpu output")
    p.add_argument("--parts", type=int, required=True)
    p.add_argument("--part", type=int, help="write this part's node ids to --ids-out")
    p.add_argument("--ids-out", type=Path)
    p.add_argument("--weights", type=Path, default=WEIGHTS)
    c = sub.add_parser("pack-cache", help="the kernel cache folder into an archive of capped size")
    c.add_argument("src", type=Path)
    c.add_argument("archive", type=Path)
    c.add_argument("--cap-mib", type=float, default=15.0)
    q = sub.add_parser("precompile", help="the manifests' modules compiled once each, in parallel")
    q.add_argument("manifests", nargs="+", type=Path)
    q.add_argument("--files", nargs="*", help="only the modules these test files need")
    q.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    m = sub.add_parser("merge", help="one summary of the parts' results")
    m.add_argument("dirs", nargs="+", type=Path)
    m.add_argument("--weights-out", type=Path, help="write a weights table measured from these runs")
    m.add_argument("--weights", type=Path, default=WEIGHTS)
    args = ap.parse_args(argv)

    if args.cmd == "plan":
        ids = read_collected(args.collected.read_text())
        weights = load_weights(args.weights)
        print(plan_table(ids, args.parts, weights))
        if args.part is not None:
            mine = part_ids(ids, args.parts, args.part, weights)
            if args.ids_out:
                args.ids_out.write_text("".join(f"{n}\n" for n in mine))
            print(f"part {args.part}/{args.parts}: {len(mine)} of {len(ids)} collected gpu tests")
        return 0

    if args.cmd == "pack-cache":
        packed, left = pack_cache(args.src, args.archive, int(args.cap_mib * 2**20))
        size = args.archive.stat().st_size / 2**20
        print(f"kernel cache: {packed} files in {args.archive.name} ({size:.1f} MiB)"
              + (f"; {left} left out by the {args.cap_mib:g} MiB cap" if left else ""))
        return 0

    if args.cmd == "precompile":
        modules = read_manifests([p for p in args.manifests if p.exists()],
                                 set(args.files) if args.files is not None else None)
        t0 = time.perf_counter()
        done = precompile(modules, args.jobs) if modules else []
        failed = [(m, why) for m, (_, why) in zip(modules, done, strict=True) if why]
        print(f"precompiled {len(modules) - len(failed)} of {len(modules)} modules in {args.jobs} processes: "
              f"{time.perf_counter() - t0:.0f} s wall, {sum(s for s, _ in done):.0f} s compiling")
        for m, why in failed:
            print(f"  could not compile ({m.get('label', '')}): {why}")
        return 0

    results: dict[str, dict] = {}
    planned: set[str] = set()
    for d in args.dirs:
        r, p_ids, notes = read_part(d)
        results.update(r)
        planned |= p_ids
        for n in notes:
            print(n, file=sys.stderr)
    print(summary(results, planned))
    if args.weights_out:
        table = measured_weights(results, planned, load_weights(args.weights))
        note = ("Serial seconds per unit of the gpu suite (tools/gpu_suite.py), measured by "
                "`tools/gpu-suite merge ... --weights-out` (units that did not run keep the old figure).")
        args.weights_out.write_text(json.dumps({"note": note, "seconds": table}, indent=1) + "\n")
    bad = any(r["outcome"] in ("failed", "error") for r in results.values())
    return 1 if bad or (planned - set(results)) else 0


if __name__ == "__main__":
    sys.exit(main())
