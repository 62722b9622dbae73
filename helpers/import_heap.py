"""The course's Python processes import the heavy libraries (torch, torch._dynamo, torch_xla, Accelerate, Lightning,
nbgrader, Dask's distributed) with the cyclic garbage collector off, then freeze what those imports made (gc.freeze),
as the course's fork servers already do for theirs (helpers.fresh.import_for_forks). Those objects live as long as
the process; left in the collector's generations, every full collection walked them again: in a rank that torchrun
started, about a fifth of its CPU time went to the collector (make test, perf, 2026-12-06). Objects made later are
collected as always.

`make setup` installs it into the course's environment, for every interpreter there (torchrun's ranks, Accelerate's,
`mp.spawn`'s, kernels, the grader's processes):

    python -m helpers.import_heap install

which copies this file into the environment's site-packages as `course_import_heap.py`, with a `.pth` file that calls
`watch()` when Python starts. Elsewhere (Colab, Kaggle, a pip-installed package) nothing changes. This file imports
nothing of the course: the copy runs before anything else is importable.
"""

import gc
import importlib.util
import sys

# Measured here (CPU-seconds to import, before -> after): torch 1.25 -> 1.0, torch_xla 3.1 -> 2.4, accelerate
# 3.1 -> 2.5, lightning 2.6 -> 2.1, nbgrader's app 0.89 -> 0.61, distributed 0.45 -> 0.35
HEAVY = ("torch", "torch._dynamo", "torch_xla", "accelerate", "lightning", "nbgrader", "distributed")
MODULE = "course_import_heap"


class _FreezeAfterImport:
    """A finder that finds nothing itself: for a module in `pending` it takes the spec the other finders give and
    runs the module's code with the collector off, then freezes the heap. It leaves sys.meta_path when none is
    left."""

    pending: set = set()

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in cls.pending:
            return None
        cls.pending.discard(name)
        watching = cls in sys.meta_path  # (a program may have taken it out: it stays out)
        if watching:
            sys.meta_path.remove(cls)  # the other finders find the spec
        try:
            spec = importlib.util.find_spec(name)
        finally:
            if watching and cls.pending:
                sys.meta_path.insert(0, cls)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader.exec_module = _frozen_after(spec.loader.exec_module)
        return spec


def _frozen_after(exec_module):
    def run(module):
        enabled = gc.isenabled()
        gc.disable()
        try:
            exec_module(module)
        finally:
            if enabled:
                gc.enable()
            gc.freeze()

    return run


def watch(names=HEAVY) -> None:
    """From now on, the first import of each module of `names` in this process runs with the collector off and
    ends with the heap frozen. A module already imported is left alone."""
    names = [names] if isinstance(names, str) else list(names)
    if not all(isinstance(name, str) and name for name in names):
        raise ValueError(f"names must be module names, got {names!r}")
    _FreezeAfterImport.pending.update(name for name in names if name not in sys.modules)
    if _FreezeAfterImport.pending and _FreezeAfterImport not in sys.meta_path:
        sys.meta_path.insert(0, _FreezeAfterImport)


def install(site_packages: str | None = None) -> list:
    """This file as `course_import_heap.py` and the `.pth` line that watches the heavy imports, in `site_packages`
    (this interpreter's, by default). Returns the files written."""
    import sysconfig
    from pathlib import Path

    folder = Path(site_packages or sysconfig.get_paths()["purelib"])
    if not folder.is_dir():
        raise ValueError(f"site_packages must be a folder, got {str(folder)!r}")
    module, pth = folder / f"{MODULE}.py", folder / f"{MODULE}.pth"
    module.write_text(Path(__file__).read_text(encoding="utf-8"), encoding="utf-8")
    pth.write_text(f"import {MODULE}; {MODULE}.watch()\n", encoding="utf-8")
    return [module, pth]


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m helpers.import_heap install")
    for path in install():
        print(f"installed {path}")
