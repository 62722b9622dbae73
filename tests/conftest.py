import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # graders/ is imported by the grading tests
os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(1)


# Tests that read the session's graded class (tests/classroom.py): with pytest-xdist they run on one worker, so
# that the class is graded once.
CLASS_TESTS = ("tests/test_grading.py", "tests/test_corpus.py", "tests/test_cluster.py",
               "tests/test_runtimes.py::test_lesson_4_part_b_runs_on_eight_xla_devices")


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs on pytest-xdist workers. Each work unit goes to one worker: a notebook's cells (nbval runs
    them in order, in one kernel), the graded class's tests, and every other test on its own. (xdist's own
    `--dist loadgroup` cannot do this with pytest 9.2: its group marks are lost with pytest's structured node
    ids, pytest-xdist issue #1386.)"""
    from xdist.scheduler import LoadScopeScheduling

    class CourseScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.endswith(".ipynb"):
                return path
            if any(nodeid == t or nodeid.startswith(t + "::") or nodeid.startswith(t + "[") for t in CLASS_TESTS):
                return "graded class"
            return nodeid

    return CourseScheduling(config, log)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(autouse=True)
def _environment_unchanged():
    """Whatever a test sets in os.environ is undone after it: the notebooks' kernels, started later by
    this same process, must see a student's environment (a leaked OMP_NUM_THREADS=1 once hid a hang)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory):
    """The class of tests/classroom.py, graded once on a Dask LocalCluster with a worker killed mid-way."""
    from classroom import grade_the_class

    graded = grade_the_class(tmp_path_factory.mktemp("class"))
    yield graded
    graded.close()
