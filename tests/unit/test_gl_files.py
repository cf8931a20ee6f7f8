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
    config.addinivalue_line("markers", "slow: deselected by -m 'not slow'")
    runs[:] = [config]
    if os.environ.get("CHILD_LIMITS"):  # short bounds for the hang test
        gl_files.CHILD_TIMEOUT_S, gl_files.CHILD_TEST_TIMEOUT_S = (int(v) for v in os.environ["CHILD_LIMITS"].split())

def pytest_collection_finish(session):
    if not gl_files.in_child():
        r = gl_files.FileRuns(session.config, lambda it: "isolate" in it.keywords)
        r.collect(session.items)
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


def run(tmp_path, files: dict, *args, env_extra=None):
    """pytest (-ra, as the project's addopts) on ``files`` with CONFTEST: (exit status, output)."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = {**os.environ, "PIDS": str(tmp_path / "pids.txt"), "PYTHONPATH": str(ROOT), **(env_extra or {})}
    for key in ("NAGARE_GL_FILE_REPORTS", "NAGARE_GL_ISOLATED", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS"):
        env.pop(key, None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-ra", "-q",
                        "--no-xvfb", "-o", "addopts=", *args, str(tmp_path)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def test_a_crash_fails_its_test_and_the_files_other_tests_still_run(tmp_path):
    _, out = run(tmp_path, {"test_a.py": FILE_A, "test_b.py": FILE_B})
    pids = tmp_path / "pids.txt"
    assert "2 failed, 4 passed, 1 skipped" in out, out
    assert "test_a.py::test_crashes" in out and "SIGSEGV" in out and "ended in it" in out, out
    assert "a plain failure" in out, out  # a child's failure keeps its own message
    assert "said why" in out, out  # and a skip its reason
    seen = dict(line.split() for line in pids.read_text().splitlines())
    assert seen["first"] != seen["after"]  # the tests after the crash ran in a new child
    assert seen["b"] not in (seen["first"], seen["after"])  # each file has its own child
    assert seen["plain"] not in (seen["first"], seen["after"], seen["b"])  # the plain test stayed in the parent


B_ALONE = """
import pytest

@pytest.mark.isolate
def test_b():
    pass
"""


def test_a_skip_in_a_child_keeps_its_reason_in_the_summary(tmp_path):
    rc, out = run(tmp_path, {"test_b.py": B_ALONE, "test_a.py": """
        import pytest

        @pytest.mark.isolate
        def test_skips():
            pytest.skip("said in the child")
        """})
    assert rc == 0 and "INTERNALERROR" not in out, out
    assert "SKIPPED [1] test_a.py" in out and "said in the child" in out, out


def test_tests_deselected_in_the_parent_do_not_run_in_the_child(tmp_path):
    rc, out = run(tmp_path, {"test_b.py": B_ALONE, "test_a.py": """
        import os, pytest

        pytestmark = pytest.mark.isolate

        def test_one():
            pass

        @pytest.mark.slow
        def test_slow():
            open(os.environ["PIDS"], "a").write("slow ran\\n")

        def test_other():
            open(os.environ["PIDS"], "a").write("other ran\\n")
        """}, "-m", "not slow", "-k", "not other")
    assert rc == 0 and "2 passed, 2 deselected" in out, out
    assert not (tmp_path / "pids.txt").exists()


def test_a_crash_in_teardown_fails_that_test_once(tmp_path):
    rc, out = run(tmp_path, {"test_b.py": B_ALONE, "test_a.py": """
        import os, signal, pytest

        pytestmark = pytest.mark.isolate

        @pytest.fixture
        def boom():
            yield
            os.kill(os.getpid(), signal.SIGSEGV)

        def test_teardown_crash(boom):
            pass
        """})
    # as pytest counts a teardown that fails after a passed call (test_b passed too): no failed "call"
    assert "2 passed, 1 error" in out and "failed" not in out and "SIGSEGV" in out, out


def test_a_test_that_hangs_is_timed_out_in_its_child_and_the_file_goes_on(tmp_path):
    """The child's own per-test timeout dumps the stuck test's stacks; the parent fails that test with
    them, and the file's next test runs in a new child (the parent's own test timer is never reached)."""
    rc, out = run(tmp_path, {"test_b.py": B_ALONE, "test_a.py": """
        import time, pytest

        pytestmark = pytest.mark.isolate

        def test_hangs():
            time.sleep(120)

        def test_after():
            pass
        """}, env_extra={"CHILD_LIMITS": "60 3"})
    assert "1 failed, 2 passed" in out, out
    assert "test_hangs" in out and "Timeout" in out and "time.sleep" in out.replace("sleep(120)", "time.sleep"), out
