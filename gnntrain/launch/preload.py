"""What the ranks' fork server imports before it forks any rank
(gnntrain.launch.forkserver.PRELOAD).

torch's optimizers import ``torch._dynamo`` on their first ``step`` (about 3 s of CPU per rank on a
2-core machine, every run, for every rank): imported here once, each forked rank has it already.
The imported objects are then frozen out of the garbage collector's reach, so a rank's collections
do not touch, and copy, the server's pages. The server leaves without interpreter teardown (as the
ranks do): torch._dynamo imports triton, whose extension otherwise prints "nanobind: leaked ..."
lines at exit."""

import atexit
import gc
import os
import sys

import torch
import torch._dynamo
import torch.distributed  # noqa: F401

import gnntrain.comm
import gnntrain.launch.launcher
import gnntrain.modes
import gnntrain.plan
import gnntrain.training  # noqa: F401

gc.freeze()
# the fork server itself, nowhere else
if any("multiprocessing.forkserver" in arg for arg in sys.orig_argv):
    atexit.register(os._exit, 0)
