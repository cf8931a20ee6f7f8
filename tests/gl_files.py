"""Each test file's OpenGL tests in a fresh process of their own (hooks in tests/conftest.py).

Why: Mesa (llvmpipe) under Xvfb grows unreliable in a process that has made and closed many GL
canvases: a Qt segfault inside a window's ``show()`` or a shader that no longer compiles (an empty
error log), seen in CI and locally after some dozens of canvases in one pytest-xdist worker, in
whichever test came next. A file's GL tests run together in one child pytest, so no process makes
more canvases than one file does; the parent reports the child's results as its own (pytest's own
report serialisation, as xdist's), so the summary, failures and skips read as usual. Tests that
need more isolation still hand themselves to a process of their own (tests/app/frame_check.isolated).

A child that dies (a crash) or hangs fails the test it was running, with the exit status and the
child's output (a timed-out test's stacks); the file's remaining tests then run in a new child. A
run of a single GL file (``pytest tests/app/test_x.py``) stays in its own process: it makes no more
canvases than its child would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD_ENV = "NAGARE_GL_FILE_REPORTS"  # set in a child: where it writes its reports (JSON lines)
# one child's wall-clock bound: inside pytest-timeout's 600 s for the parent's test that starts it
# (each child runs under its own parent test's timer: a file whose child ended early goes on in a
# new child started by its next test), and a test stuck in the child is timed out there first, its
# stacks dumped into the output the parent reports
CHILD_TIMEOUT_S = 540
CHILD_TEST_TIMEOUT_S = 480


def in_child() -> bool:
    return bool(os.environ.get(CHILD_ENV)) or bool(os.environ.get("NAGARE_GL_ISOLATED"))


class FileRuns:
    """The parent's side: runs a file's GL tests in children and hands out their reports."""

    def __init__(self, config, opens_gl):
        self.config = config
        self.opens_gl = opens_gl  # item → whether it makes a GL surface (tests/conftest.py)
        self.by_file: dict[str, list[str]] = {}  # file → its GL items' node ids, in run order
        self.reports: dict[str, list] = {}  # node id → its reports (setup, call, teardown)
        self.locations: dict[str, tuple] = {}

    def collect(self, items) -> None:
        """From the session's items as they will run (pytest_collection_finish: after -m, -k,
        --deselect and --lf took theirs out)."""
        gl = [it for it in items if self.opens_gl(it) and not it.get_closest_marker("skip")]
        files: dict[str, list[str]] = {}
        for it in gl:
            files.setdefault(str(it.path), []).append(it.nodeid)
            self.locations[it.nodeid] = it.location
        # one GL file alone runs in this process: it makes no more canvases than its child would
        self.by_file = files if len(files) > 1 else {}

    def owns(self, item) -> bool:
        return item.nodeid in self.by_file.get(str(item.path), ())

    def reports_for(self, item) -> list:
        """The item's reports: from the child its file's earlier test started, or from a child started
        now for it and the file's tests after it."""
        if item.nodeid not in self.reports:
            todo = self.by_file[str(item.path)]
            self._run(todo[todo.index(item.nodeid):])
        return self.reports.pop(item.nodeid)

    def _run(self, nodeids: list[str]) -> None:
        """One child for ``nodeids``: the reports of those it finished; where it ended early (a crash,
        a hang), a failure for the test it was in. The tests after that get a child of their own
        when their turn comes."""
        got, status = self._child(nodeids)
        for n in nodeids:
            reports = got.get(n, [])
            if any(r.when == "teardown" for r in reports):
                self.reports[n] = reports
                continue
            self.reports[n] = reports + [self._ended(n, status, reports)]
            return

    def _child(self, nodeids: list[str]) -> tuple[dict, str]:
        fd, path = tempfile.mkstemp(prefix="nagare-gl-", suffix=".jsonl")
        os.close(fd)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "",
               "-o", f"timeout={CHILD_TEST_TIMEOUT_S}"]
        if self.config.getoption("--no-xvfb", default=False):
            cmd.append("--no-xvfb")  # the windows on the user's own display, as the parent's
        cmd += nodeids
        env = {**os.environ, CHILD_ENV: path, "NAGARE_DISPLAY_CHECKED": "1"}  # the parent could open windows
        env.pop("PYTEST_XDIST_WORKER", None)
        # a session of its own: what it leaves behind (its Xvfb after a crash, an isolated grandchild
        # after a kill) is ended with it
        proc = subprocess.Popen(cmd, cwd=self.config.rootpath, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            try:
                out, _ = proc.communicate(timeout=CHILD_TIMEOUT_S)
                status = f"exit status {proc.returncode}"
                if proc.returncode < 0:
                    status += f" ({_signal_name(-proc.returncode)})"
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                out, _ = proc.communicate()
                status = f"no result within {CHILD_TIMEOUT_S} s (killed)"
            got: dict[str, list] = {}
            for line in Path(path).read_text().splitlines():
                data = json.loads(line)
                if isinstance(data.get("longrepr"), list):
                    data["longrepr"] = tuple(data["longrepr"])  # a skip's (file, line, reason): JSON made it a list
                rep = self.config.hook.pytest_report_from_serializable(config=self.config, data=data)
                got.setdefault(rep.nodeid, []).append(rep)
            tail = (out or "")[-5000:].strip()
            return got, f"{status}\n{tail}" if tail else status
        finally:
            _kill_group(proc.pid)
            Path(path).unlink(missing_ok=True)

    def _ended(self, nodeid: str, status: str, earlier: list):
        from _pytest.reports import TestReport

        whens = {r.when for r in earlier}
        when = "teardown" if "call" in whens else "call" if "setup" in whens else "setup"
        return TestReport(nodeid=nodeid, location=self.locations[nodeid], keywords={}, outcome="failed", when=when,
                          duration=0.0, longrepr=f"this test's GL process (tests/gl_files.py) ended in it: {status}")


def _kill_group(pid: int) -> None:
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(num: int) -> str:
    import signal

    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def write_report(config, report) -> None:
    """In a child: one report a line, for the parent."""
    path = os.environ.get(CHILD_ENV)
    if not path or os.environ.get("NAGARE_GL_ISOLATED"):
        return
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    with open(path, "a") as f:
        f.write(json.dumps(data) + "\n")


def run_protocol(runs: FileRuns, item, nextitem) -> bool:
    """The parent's protocol for a GL item: its child's reports, then the parent's own tear-down up to
    the next item (as pytest's runtestprotocol would, so that item's set-up finds a clean stack)."""
    from _pytest.reports import TestReport
    from _pytest.runner import CallInfo

    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for rep in runs.reports_for(item):
        ihook.pytest_runtest_logreport(report=rep)
    call = CallInfo.from_call(lambda: item.session._setupstate.teardown_exact(nextitem), when="teardown")
    if call.excinfo is not None:
        ihook.pytest_runtest_logreport(report=TestReport.from_item_and_call(item, call))
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


