"""The course's environment imports the heavy libraries with the garbage collector off and freezes what they made
(helpers/import_heap.py, installed by `make setup`): in every fresh interpreter (a torchrun rank, a kernel, a test's
subprocess), and never at the cost of collecting what a program makes later."""

import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from helpers import import_heap

REPO = Path(__file__).resolve().parent.parent


def _python(code: str, *flags, **kwargs) -> str:
    out = subprocess.run([sys.executable, *flags, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=300, **kwargs)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_fresh_interpreter_of_the_environment_imports_torch_frozen_and_collects_afterwards():
    printed = _python("""
        import gc, sys
        before = gc.get_freeze_count()
        import torch
        frozen = gc.get_freeze_count()
        class Node: pass
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made after the import, then dropped
        del a, b
        watching = any(getattr(finder, "__name__", "") == "_FreezeAfterImport" for finder in sys.meta_path)
        print(before, frozen, gc.isenabled(), gc.collect() >= 2, watching)
    """)
    before, frozen, enabled, collected, watching = printed.split()
    assert int(before) == 0 and int(frozen) > 100_000, "torch's objects are frozen once it is imported"
    assert enabled == "True" and collected == "True", "the collector still collects what is made later"
    assert watching == "True", "the other heavy libraries (torch._dynamo, torch_xla, ...) are still watched"


def test_the_environment_runs_this_checkouts_copy():
    """`make setup` reinstalls it when helpers/import_heap.py changes (the Makefile's HEAP_HOOK)."""
    folder = Path(sysconfig.get_paths()["purelib"])
    assert (folder / f"{import_heap.MODULE}.py").read_text() == (REPO / "helpers" / "import_heap.py").read_text()
    assert (folder / f"{import_heap.MODULE}.pth").read_text() == f"import {import_heap.MODULE}; {import_heap.MODULE}.watch()\n"


@pytest.fixture
def packages(tmp_path):
    (tmp_path / "heavy_a").mkdir()
    (tmp_path / "heavy_a" / "__init__.py").write_text(
        "import gc\nENABLED_WHILE_IMPORTED = gc.isenabled()\n"
        "class Node: pass\nNODES = [Node() for _ in range(1000)]\n")
    (tmp_path / "heavy_broken.py").write_text("import gc\nraise ImportError('broken on purpose')\n")
    (tmp_path / "light.py").write_text("X = 1\n")
    return tmp_path


def test_a_watched_import_runs_with_the_collector_off_and_leaves_it_as_it_found_it(packages):
    """In an interpreter without the environment's start-up (-S), watching two modules of its own."""
    printed = _python("""
        import gc, sys
        from helpers import import_heap as heap
        heap.watch(["heavy_a", "heavy_broken"])
        import light
        after_light = gc.get_freeze_count()
        try:
            import heavy_broken
        except ImportError:
            pass
        print(after_light, gc.isenabled(), gc.get_freeze_count() > 0)
        gc.unfreeze()
        gc.disable()
        import heavy_a
        print(heavy_a.ENABLED_WHILE_IMPORTED, gc.isenabled(), gc.get_freeze_count() >= 1000,
              heap._FreezeAfterImport in sys.meta_path)
    """, "-S", cwd=packages, env={"PYTHONPATH": str(REPO)})
    first, second = printed.splitlines()
    assert first.split() == ["0", "True", "True"], "a module outside the list changes nothing; a failed import " \
                                                   "leaves the collector on"
    assert second.split() == ["False", "False", "True", "False"], "off while imported, off after it if it was " \
                                                                 "before; the finder leaves once nothing is watched"


def test_a_module_already_imported_is_not_watched_and_bad_names_are_refused():
    printed = _python("""
        import gc, json, sys, course_import_heap as heap
        before = len(heap._FreezeAfterImport.pending)
        heap.watch("json")
        print(len(heap._FreezeAfterImport.pending) - before)
    """)
    assert printed.split() == ["0"]
    with pytest.raises(ValueError, match="names"):
        import_heap.watch(["torch", ""])
    with pytest.raises(ValueError, match="site_packages"):
        import_heap.install("/nonexistent/site-packages")
