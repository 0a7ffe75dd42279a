"""The test suite.

Set before anything imports gRPC: its core's fork handlers, with other threads
mid-call (the suite's in-process agents and channels), let a child forked from
the test process (pexpect's pty fork) abort with ``epoll_wait: Bad file
descriptor`` before it execs, about 7% of forks. The suite's children exec at
once and need none of gRPC's state; nothing gpugraph serves forks.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
