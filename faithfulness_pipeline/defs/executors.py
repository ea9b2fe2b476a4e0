"""The local executor: multiprocess, with step processes forked from a server that has imported the code
location already (``defs/preload.py``), where the OS and the temporary folder allow it."""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
from typing import Final

import dagster as dg

# What the fork server imports before forking step processes. The dagster module is internal (no public
# way to name it) and the fork server skips a module that does not import without a word:
# tests/defs/test_private_dagster.py is what notices (checked with preload.CHECKED_WITH_DAGSTER).
PRELOAD_MODULES = ("dagster._core.executor.multiprocess", "faithfulness_pipeline.defs.preload")


#: The fork server listens on a Unix socket at <temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX (multiprocessing's
#: own naming), and a socket path holds at most 107 bytes: under a longer temp dir no step could start.
_SOCKET_PATH_MAX: Final = 107
_FORK_SERVER_SOCKET_TAIL: Final = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def local_executor() -> dg.ExecutorDefinition:
    """Multiprocess, one process per step. Where the OS has it, step processes fork from a server that
    has already imported the code location and Dagster's storage layer (``defs/preload.py``): a step
    starts in a fraction of a second instead of the seconds a fresh interpreter needs (``spawn``)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return dg.multiprocess_executor
    temp = tempfile.gettempdir()
    if len(os.fsencode(temp)) + _FORK_SERVER_SOCKET_TAIL > _SOCKET_PATH_MAX:
        if multiprocessing.parent_process() is None:  # said once by the run, not again by each step process
            logging.getLogger(__name__).warning(
                "steps start as fresh processes (slower): the temporary folder %s is too long for the fork "
                "server's socket path (at most %d bytes); set TMPDIR to a shorter folder to start them faster",
                temp, _SOCKET_PATH_MAX - _FORK_SERVER_SOCKET_TAIL,
            )
        return dg.multiprocess_executor
    preload = list(PRELOAD_MODULES)
    return dg.multiprocess_executor.configured({"start_method": {"forkserver": {"preload_modules": preload}}})
