"""The session-end check for processes the tests leave behind (tests/process_leftovers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from process_leftovers import MARK, end_leftovers, leftovers, mark_session

# a grandchild that outlives its parent (the orphan a stopped daemon leaves), reporting its pid
ORPHAN = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
    " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print(child.pid)\n"
)


def test_an_orphan_that_carries_the_sessions_token_is_found_and_ended(monkeypatch):
    monkeypatch.setenv(MARK, os.environ.get(MARK, ""))  # restored afterwards
    token = mark_session()
    out = subprocess.run(
        [sys.executable, "-c", ORPHAN], capture_output=True, text=True, timeout=30, check=True
    )
    orphan = int(out.stdout)
    found = leftovers(token)
    assert orphan in found and "time.sleep(60)" in found[orphan], found
    assert end_leftovers(token, grace_s=0) == found
    deadline = time.monotonic() + 5
    while orphan in leftovers(token):
        assert time.monotonic() < deadline, "the orphan was not killed"
        time.sleep(0.1)
    assert leftovers(f"{os.getpid()}-{time.time_ns()}") == {}  # another session's token: none
