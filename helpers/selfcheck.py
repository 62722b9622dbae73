"""Check your own notebook from one of its cells, as `make check NOTEBOOK=...` does from a terminal: the notebook as
last saved, graded exactly as the course's grader grades it (a fresh kernel, the hidden tests, the judge; in the
grading sandbox where this machine has one, else with your own rights), with the points per exercise and the
feedback page.

    from helpers import selfcheck
    selfcheck.check()              # in JupyterLab (make lab): this notebook, once saved
    selfcheck.check("path.ipynb")  # any notebook of the course

It needs a checkout of the course (its grader is not part of the pip package): on Colab or Kaggle it says how.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .language import say

CHECKOUT = Path(__file__).resolve().parent.parent  # the course's folder, when helpers/ is used from a checkout


def checkout() -> Path | None:
    """The course checkout this package lives in (with its grader), or None (a pip install)."""
    return CHECKOUT if (CHECKOUT / "graders" / "selfcheck.py").is_file() else None


def this_notebook() -> Path | None:
    """The notebook this kernel runs, where the front end says (JupyterLab and Notebook 7 set JPY_SESSION_NAME)."""
    name = os.environ.get("JPY_SESSION_NAME", "")
    return Path(name) if name.endswith(".ipynb") and Path(name).is_file() else None


def check(notebook: str | os.PathLike | None = None, timeout_s: float = 3600) -> int:
    """Grade `notebook` (default: this one, as last saved) with the course's grader; print its report. Returns the
    grader's exit status (0: graded)."""
    if notebook is not None and not isinstance(notebook, (str, os.PathLike)):
        raise ValueError(say("notebook must be a path, got {kind}", kind=type(notebook).__name__))
    root = checkout()
    if root is None:
        print(say("The self-check needs a checkout of the course, with its grader: download this notebook (File > "
                  "Download), then in a clone of the course run `make check NOTEBOOK=<the file>`."))
        return 2
    path = Path(notebook) if notebook is not None else this_notebook()
    if path is None:
        print(say("Which notebook? Save it, then call selfcheck.check('<its path>')."))
        return 2
    print(say("grading {path} as last saved (save first if you changed it): a minute or two...", path=path), flush=True)
    ran = subprocess.run([sys.executable, "-m", "graders.selfcheck", str(Path(path).resolve())], cwd=root,
                         capture_output=True, text=True, timeout=timeout_s)
    print(ran.stdout + (ran.stderr if ran.returncode else ""))
    return ran.returncode
