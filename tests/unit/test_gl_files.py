"""tests/gl_files.py: a file's GL tests run in a child pytest whose results the parent reports as
its own; a child that crashes fails the test it was in, and the file's other tests still run."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import os
import pytest
from tests import gl_files

runs = []

def pytest_configure(config):
    config.addinivalue_line("markers", "isolate: runs in its file's child")
    runs[:] = [config]

def pytest_collection_modifyitems(config, items):
    if not gl_files.in_child():
        r = gl_files.FileRuns(config, lambda it: "isolate" in it.keywords)
        r.collect(items)
        runs.append(r)

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    if len(runs) > 1 and runs[1].owns(item):
        return gl_files.run_protocol(runs[1], item, nextitem)

def pytest_runtest_logreport(report):
    if gl_files.in_child():
        gl_files.write_report(runs[0], report)
"""

FILE_A = """
import os, signal
import pytest

pytestmark = pytest.mark.isolate

def test_first():
    with open(os.environ["PIDS"], "a") as f:
        f.write(f"first {os.getpid()}\\n")

def test_crashes():
    os.kill(os.getpid(), signal.SIGSEGV)

def test_after_the_crash():
    with open(os.environ["PIDS"], "a") as f:
        f.write(f"after {os.getpid()}\\n")

@pytest.mark.skip(reason="said why")
def test_skipped():
    pass

def test_fails():
    assert 1 == 2, "a plain failure"
"""

FILE_B = """
import os
import pytest

@pytest.mark.isolate
def test_in_b():
    with open(os.environ["PIDS"], "a") as f:
        f.write(f"b {os.getpid()}\\n")

def test_plain():
    with open(os.environ["PIDS"], "a") as f:
        f.write(f"plain {os.getpid()}\\n")
"""


def test_a_crash_fails_its_test_and_the_files_other_tests_still_run(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_a.py").write_text(textwrap.dedent(FILE_A))
    (tmp_path / "test_b.py").write_text(textwrap.dedent(FILE_B))
    pids = tmp_path / "pids.txt"
    env = {**os.environ, "PIDS": str(pids), "PYTHONPATH": str(ROOT)}
    for key in ("NAGARE_GL_FILE_REPORTS", "NAGARE_GL_ISOLATED", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS"):
        env.pop(key, None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rfs", "-q",
                        "-o", "addopts=", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    out = r.stdout + r.stderr
    assert "2 failed, 4 passed, 1 skipped" in out, out
    assert "test_a.py::test_crashes" in out and "SIGSEGV" in out and "ended in it" in out, out
    assert "a plain failure" in out, out  # a child's failure keeps its own message
    assert "said why" in out, out  # and a skip its reason
    seen = dict(line.split() for line in pids.read_text().splitlines())
    assert seen["first"] != seen["after"]  # the tests after the crash ran in a new child
    assert seen["b"] not in (seen["first"], seen["after"])  # each file has its own child
    assert seen["plain"] not in (seen["first"], seen["after"], seen["b"])  # the plain test stayed in the parent
