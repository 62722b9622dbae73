"""Imported first by multiprocessing's fork server (helpers.launch's FORKSERVER_PRELOAD), which has no hook of its own
around its imports: the server imports with the cyclic garbage collector off and freezes its heap before each fork,
as helpers.fresh.import_for_forks does for the course's own fork servers; its children (a launch's ranks) collect
again. Nothing changes in any other process, a rank's own forks included (a DataLoader's workers)."""

import gc
import os

_SERVER = os.getpid()


def _before_fork() -> None:
    if os.getpid() == _SERVER:
        gc.freeze()


def _in_child() -> None:
    if os.getppid() == _SERVER:
        gc.enable()


gc.disable()
os.register_at_fork(before=_before_fork, after_in_child=_in_child)

from helpers import refusal  # noqa: E402

refusal.forget_inherited()
