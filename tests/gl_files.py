"""Each test file's OpenGL tests in a fresh process of their own (hooks in tests/conftest.py).

Why: Mesa (llvmpipe) under Xvfb grows unreliable in a process that has made and closed many GL
canvases: a Qt segfault inside a window's ``show()`` or a shader that no longer compiles (an empty
error log), seen in CI and locally after some dozens of canvases in one pytest-xdist worker, in
whichever test came next. A file's GL tests run together in one child pytest, so no process makes
more canvases than one file does; the parent reports the child's results as its own (pytest's own
report serialisation, as xdist's), so the summary, failures and skips read as usual. Tests that
need more isolation still hand themselves to a process of their own (tests/app/frame_check.isolated).

A child that dies (a crash) or hangs fails the test it was running, with the exit status; the file's
remaining tests then run in a new child. A run of a single GL file (``pytest tests/app/test_x.py``)
stays in its own process: it makes no more canvases than its child would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD_ENV = "NAGARE_GL_FILE_REPORTS"  # set in a child: where it writes its reports (JSON lines)
FILE_TIMEOUT_S = 540  # a file's child (inside pytest-timeout's 600 s for the item that starts it)


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
        if item.nodeid not in self.reports:
            todo = [n for n in self.by_file[str(item.path)] if n not in self.reports]
            start = todo.index(item.nodeid)
            self._run(todo[start:])
        return self.reports.pop(item.nodeid)

    def _run(self, nodeids: list[str]) -> None:
        """Run ``nodeids`` in children until each has its reports (a crash or hang fails the test it
        happened in, and the rest go to a new child)."""
        while nodeids:
            got, status = self._child(nodeids)
            done = [n for n in nodeids if any(r.when == "teardown" for r in got.get(n, ()))]
            for n in done:
                self.reports[n] = got[n]
            rest = [n for n in nodeids if n not in got or n not in done]
            if not rest:
                return
            broken = rest[0]  # the first without its teardown: the child ended or hung in it
            self.reports[broken] = got.get(broken, []) + [self._ended(broken, status, got.get(broken, []))]
            nodeids = rest[1:]

    def _child(self, nodeids: list[str]) -> tuple[dict, str]:
        fd, path = tempfile.mkstemp(prefix="nagare-gl-", suffix=".jsonl")
        os.close(fd)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", ""]
        if self.config.getoption("--no-xvfb", default=False):
            cmd.append("--no-xvfb")  # the windows on the user's own display, as the parent's
        cmd += nodeids
        env = {**os.environ, CHILD_ENV: path, "NAGARE_DISPLAY_CHECKED": "1"}  # the parent could open windows
        env.pop("PYTEST_XDIST_WORKER", None)
        try:
            try:
                r = subprocess.run(cmd, cwd=self.config.rootpath, env=env, capture_output=True, text=True,
                                   timeout=FILE_TIMEOUT_S)
                status = f"exit status {r.returncode}"
                if r.returncode < 0:
                    status += f" ({_signal_name(-r.returncode)})"
                tail = (r.stdout[-2500:] + r.stderr[-2500:]).strip()
            except subprocess.TimeoutExpired as exc:
                status = f"no result within {FILE_TIMEOUT_S} s (killed)"
                tail = ((exc.stdout or b"")[-2500:].decode(errors="replace") if isinstance(exc.stdout, bytes)
                        else (exc.stdout or "")[-2500:])
            got: dict[str, list] = {}
            for line in Path(path).read_text().splitlines():
                data = json.loads(line)
                rep = self.config.hook.pytest_report_from_serializable(config=self.config, data=data)
                got.setdefault(rep.nodeid, []).append(rep)
            return got, f"{status}\n{tail}" if tail else status
        finally:
            Path(path).unlink(missing_ok=True)

    def _ended(self, nodeid: str, status: str, earlier: list):
        from _pytest.reports import TestReport

        when = "call" if any(r.when == "setup" for r in earlier) else "setup"
        return TestReport(nodeid=nodeid, location=self.locations[nodeid], keywords={}, outcome="failed", when=when,
                          duration=0.0, longrepr=f"this test's GL process (tests/gl_files.py) ended in it: {status}")


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


