"""A warm ``gnntrain`` for the tests' command-line runs (:func:`conftest.run_cli`).

Every ``gnntrain`` command a test runs as a fresh interpreter first spends 1-2 s importing torch,
Hydra and gnntrain. The zygote is one process that imports them once (and does nothing else: no
thread, no OpenMP region, no Hydra state) and forks a child per command. The child is the
command, as a fresh ``gnntrain`` process would be: its own session, working folder, environment,
``sys.argv``, stdin from /dev/null and stdout/stderr into files, then
:func:`gnntrain.cli.entry` and the interpreter's exit handlers.

The zygote only forks; the test's process watches the child (by pid) and reads its exit code from
a file the child writes as it ends (no file: it was killed). Where a command sets variables that a
fresh interpreter reads while it imports (threads, allocators, paths), :func:`conftest.run_cli`
starts a fresh process instead, and ``GNNTRAIN_TEST_ZYGOTE=0`` turns the zygote off.

A command's multi-rank run starts the ranks' fork server (gnntrain.launch.forkserver): a fresh
interpreter that imports torch, ``torch._dynamo`` and gnntrain (about 5 s of CPU on two cores, for
every such command, and for a failing one too: the CLI starts it before it composes). In a child
the server is forked from the child instead, as the CLI starts it (:func:`_fork_servers_here`):
the zygote holds the server's imports already and runs no thread, so the fork is the clean,
preloaded process that the fresh server is. The ranks still fork from that server, as they do
for a user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

# variables read at import time (by the interpreter, torch, numba, the allocator) or by modules at
# import: a command setting one of them runs as a fresh process
IMPORT_TIME_PREFIXES = (
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "PYTHON",
    "LD_",
    "MALLOC_",
    "CUDA_",
    "TORCH",
    "NUMBA_",
    "GNNTRAIN_NETEM",
    "GNNTRAIN_CGROUP",
)
TESTS = str(Path(__file__).resolve().parent)
# what a command imports on its way (the rest it imports itself)
WARM_MODULES = (
    "torch",
    "gnntrain.cli",
    "gnntrain.cli.hydra_app",
    "gnntrain.cli.tasks",
    "gnntrain.launch.compose",
    "gnntrain.plan",
    "gnntrain.modes",
    "gnntrain.data",
    "gnntrain.launch.launcher",
    "gnntrain.metrics.report",
    "hydra.main",
    "rich.console",
    "gnntrain.launch.preload",  # the fork server's imports (torch._dynamo: ~1.4 s)
)
FORK_SERVER = "from multiprocessing.forkserver import main"


def _fork_servers_here() -> None:
    """multiprocessing starts its fork server as ``python -c "from multiprocessing.forkserver
    import main; main(fds...)"`` (``util.spawnv_passfds``); here that command runs in a fork of
    this process, with only the descriptors it is passed (and 0-2) open, as in the fresh one. Only
    while the CLI starts it at once (``start_for_command_line``): later the command may have run
    threads (a kernel measurement, a partitioner), and a server started then is a fresh one."""
    from multiprocessing import util

    from gnntrain.launch import forkserver

    spawn_fresh = util.spawnv_passfds
    start_early = forkserver.start_for_command_line
    early = [False]

    def start_for_command_line(overrides):
        early[0] = True
        try:
            start_early(overrides)
        finally:
            early[0] = False

    def spawnv_passfds(path, args, passfds):
        forking = early[0] and len(args) >= 2 and args[-2] == "-c"
        if not forking or not args[-1].startswith(FORK_SERVER):
            return spawn_fresh(path, args, passfds)
        pid = os.fork()
        if pid == 0:
            try:
                keep = {0, 1, 2, *passfds}
                for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
                    if fd not in keep:
                        try:
                            os.close(fd)
                        except OSError:
                            pass
                exec(args[-1], {"__name__": "__main__"})
            finally:
                os._exit(0)
        return pid

    util.spawnv_passfds = spawnv_passfds
    forkserver.start_for_command_line = start_for_command_line


def _child(request: Dict) -> None:
    """In the forked child: become the command (``gnntrain.cli.entry``'s exits: on success no
    interpreter teardown, on failure the exit handlers), and never return into the zygote's loop."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote ignores its children; we wait
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        # as the console script's interpreter has it: its own folder first, not the tests'
        sys.path[:] = [str(Path(sys.executable).parent)] + [
            p for p in sys.path if p not in ("", TESTS)
        ]
        sys.argv = ["gnntrain", *request["args"]]
        _fork_servers_here()
        from gnntrain.cli import main

        try:
            code = int(main() or 0)
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = int(exit_.code or 0)
            else:
                print(exit_.code, file=sys.stderr)
        except BaseException:  # what an uncaught exception does to a fresh interpreter
            import traceback

            traceback.print_exc()
        import logging

        logging.shutdown()
        if code != 0:
            import atexit

            atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        Path(request["code"]).write_text(str(code))
        os._exit(code)


def serve() -> None:
    """The zygote's loop: one JSON request per line on stdin, the child's pid on stdout."""
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(pid, flush=True)
    # no interpreter teardown (as the fork server): triton, which torch._dynamo imports, prints
    # "nanobind: leaked ..." lines at exit
    os._exit(0)


class Zygote:
    """The test process's handle on the zygote: :meth:`run` is ``subprocess.run`` for one
    ``gnntrain`` command with captured text output."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        self.lock = threading.Lock()  # one request and its answer at a time (tests' threads)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import cli_zygote; cli_zygote.serve()"],
            cwd=Path(__file__).parent,
            env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the CLI zygote did not start")

    def run(
        self, args: List[str], cwd: Path, env: Dict[str, str], timeout: Optional[float]
    ) -> subprocess.CompletedProcess:
        with self.lock:
            self.count += 1
            files = {k: self.folder / f"{self.count}.{k}" for k in ("stdout", "stderr", "code")}
            request = {"args": list(args), "cwd": str(cwd), "env": env}
            request.update({k: str(v) for k, v in files.items()})
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = int(self.proc.stdout.readline())
        deadline = None if timeout is None else time.monotonic() + timeout
        while Path(f"/proc/{pid}").exists() and not files["code"].exists():
            if deadline is not None and time.monotonic() > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                raise subprocess.TimeoutExpired(["gnntrain", *args], timeout)
            time.sleep(0.01)
        while Path(f"/proc/{pid}").exists():  # the code is written just before the exit
            time.sleep(0.002)
        code = int(files["code"].read_text()) if files["code"].exists() else -signal.SIGKILL
        out, err = (files[k].read_text(errors="replace") for k in ("stdout", "stderr"))
        for path in files.values():
            path.unlink(missing_ok=True)
        return subprocess.CompletedProcess(["gnntrain", *args], code, out, err)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def needs_fresh_process(env_extra: Optional[Dict[str, str]]) -> bool:
    return bool(env_extra) and any(k.startswith(IMPORT_TIME_PREFIXES) for k in env_extra)
