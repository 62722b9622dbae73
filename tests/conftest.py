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
