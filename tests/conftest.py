import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # graders/ is imported by the grading tests
os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(1)


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
