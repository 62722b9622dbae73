"""Native Windows: the course needs WSL2 there, and says so before a launch fails in a way nobody can read.

Every multi-process launch of the course fails on native Windows: a `multiprocessing` pipe's `fileno()` is a Win32
handle, not a C file descriptor (helpers.launch duplicates and reads the ranks' output through them), and torchrun's
rendezvous asks for libuv, which Windows' torch wheels lack. WSL2 is Linux to Python, so the course runs there.
Each lesson's setup cell makes the same check before anything else runs (it cannot import the helpers first).
"""

from __future__ import annotations

import os
import sys

from .language import message, say

NEEDS_WSL2 = message("the course needs WSL2 (Linux on Windows) here: install it in PowerShell run as administrator with "
                     "`wsl --install`, restart the computer, open Ubuntu and set the course up there as on Linux "
                     "(`make lab`); or open the lesson on Colab or Kaggle.")


def native() -> bool:
    """Whether this Python runs on Windows itself (not in WSL2, where it is Linux)."""
    return os.name == "nt" or sys.platform == "win32"


def refuse_native(what: str) -> None:
    """Raise a RuntimeError that says `what` cannot run on native Windows, and what to do, when this is it."""
    if native():
        raise RuntimeError(say("{what} cannot run on native Windows: {why}", what=say(what), why=say(NEEDS_WSL2)))
