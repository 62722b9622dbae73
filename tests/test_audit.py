"""The judge reads the code a student wrote (graders/audit.py): a right answer by a forbidden route is flagged
for review, every honest answer of the corpus is not, and a flag is in the grader's words only."""

import nbformat
import pytest

from answers import ANSWERS, CALL_A_REFERENCE
from conftest import REPO
from graders import audit, judge

LESSONS = ["01-dataparallel", "02-ddp", "03-amp", "04-accelerate-tpu"]

# Right answers of the corpus that take a route the course forbids: the data is right (they score), the route is
# the course's own reference implementation, which the judge uses as its ground truth (they are flagged).
RIGHT = [(lesson, exercise, name) for lesson, exercises in ANSWERS.items() for exercise, kinds in exercises.items()
         for name in kinds["right"]]


def _flags(exercise, source):
    return audit.audit([(f"the answer to {exercise}", source, audit.FORBIDDEN_IN.get(exercise, set()))])


@pytest.mark.parametrize("lesson, exercise, name", RIGHT, ids=[f"{l}-{e}-{n}" for l, e, n in RIGHT])
def test_an_honest_answer_is_not_flagged(lesson, exercise, name):
    assert not _flags(exercise, ANSWERS[lesson][exercise]["right"][name])


@pytest.mark.parametrize("lesson, exercise, name", CALL_A_REFERENCE)
def test_an_answer_by_a_reference_is_flagged_as_well_as_refused(lesson, exercise, name):
    """tests/answers.py's CALL_A_REFERENCE: right by value, refused where the hidden tests run (tests/test_answers.py
    judges them wrong), and flagged for the instructor."""
    assert _flags(exercise, ANSWERS[lesson][exercise]["wrong"][f"{name} (a reference, refused)"])


# One line each: the right data by a route the course forbids, or by reaching names no rule can see.
ROUTES = {
    "split_sizes": [
        "def my_split_sizes(n, k):\n    return [len(c) for c in torch._C._VariableFunctions.chunk(torch.arange(n), k)]",
        "def my_split_sizes(n, k):\n    return [len(c) for c in torch.arange(n).chunk(k)]",
        "def my_split_sizes(n, k):\n    return [len(c) for c in getattr(torch, 'ch' + 'unk')(torch.arange(n), k)]",
        "my_split_sizes = lambda n, k: __import__('helpers.data' + 'parallel').dataparallel.split_sizes(n, k)",
        "import importlib\nmy_split_sizes = importlib.import_module('helpers.dataparallel').split_sizes",
        "my_split_sizes = eval('lambda n, k: dp.split_sizes(n, k)')",
        "from helpers.dataparallel import *",
        "import sys\nmy_split_sizes = sys.modules['helpers.dataparallel'].split_sizes",
        "f = dp\nmy_split_sizes = f.split_sizes",
        "t = torch.Tensor\nsplit = t.chunk",
    ],
    "shard": ["def my_shard(n, w, r, d):\n    return list(DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=False, drop_last=d))",
              "from torch.utils.data import DistributedSampler as S"],
    "average": ["def average_gradients(model):\n    return ddp.reference_train(None, 2)",
                "from helpers.ddp_reference import reference_train",
                "from helpers import ddp_reference\ndef average_gradients(model):\n    return ddp_reference.reference_train(None, 2)"],
    "scaler": ["def scaler_after(o, i, g):\n    s = amp.scaler_trajectory(o, init_scale=i, growth_interval=g)\n    return s"],
    "fp16": ["from helpers.amp import representable as r"],
    "predict_dtypes": ["predicted = amp.autocast_dtypes(DEVICE, torch.bfloat16)"],
    "activation_ratio": ["def activation_ratio(model, x, dtype):\n    torch.set_autocast_enabled(x.device.type, True)"],
    "amp_step": ["from torch import set_autocast_dtype as d", "torch._C.set_autocast_enabled('xla', True)",
                 "from helpers.amp import micro_batch_reference"],
    "convert": ["import helpers.accel as a\nmy_accelerate_worker = lambda *args: a.reference(*args)"],
    "gather": ["def gather_lengths(n, b, p):\n    return accel.gather_lengths_reference(n, b, p)"],
    "device0_extra": ["def device0_extra_bytes(*args):\n    return memory.measure_step(*args)"],
    "zero_bytes": ["def zero_bytes_per_rank(n, w, s):\n    return sharding.zero_bytes(n, w, s)",
                   "from helpers.sharding_reference import zero_bytes"],
    "shard_shape": ["local_shape = sharding.local_shape", "from helpers import sharding_reference as r\nr.reshard"],
    "quiz": [
        "from helpers import grading\ngrading.collect = lambda name, value: value",
        "from IPython.display import publish_display_data",
        "import IPython\nIPython.display.publish_display_data = print",
        "get_ipython().events.register('pre_run_cell', print)",
        "import sys\nsys.settrace(None)",
        "open('helpers.py', 'w').write('x = 1')",
        "import mymodule_written_by_the_notebook",
        "exec(bytes.fromhex('7072696e74283129').decode())",
        "x = (1).__class__.__subclasses__()",
        "import inspect\nframe = inspect.currentframe().f_back",
        "%run other.py",
        "%%writefile answers.py\nquiz = {}",
        "!python -c 'print(1)'",
        "%config InteractiveShell.ast_transformers = []",
        "import gc\nobjs = gc.get_objects()",
        "import builtins\nbuiltins.type = list",
        "type(torch).__getattribute__(torch, 'chunk')",
    ],
}
ROUTE_CASES = [(exercise, source) for exercise, sources in ROUTES.items() for source in sources]


@pytest.mark.parametrize("exercise, source", ROUTE_CASES, ids=[f"{e}-{i}" for i, (e, s) in enumerate(ROUTE_CASES)])
def test_a_forbidden_route_is_flagged(exercise, source):
    assert _flags(exercise, source)


HONEST = [
    "%matplotlib inline\n%load_ext autoreload\n%autoreload 2\n%config InlineBackend.figure_format = 'retina'",
    "!pip install -q tqdm\n%pip install tqdm",
    "import os\nos.environ['USE_TORCH_XLA'] = '0'",
    "inner = getattr(model, 'module', model)",
    "from tqdm.auto import tqdm\nimport warnings\nwarnings.simplefilter('ignore')",
    "import collections\nd = __import__('collections').OrderedDict()",
    "torch.backends.cudnn.benchmark = True",
    "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self._hidden = nn.Linear(2, 2)",
    "with open(path, 'wb') as f:\n    torch.save(model.state_dict(), f)",
    "print(type(x).__name__)",
]


@pytest.mark.parametrize("source", HONEST)
def test_what_students_write_honestly_is_not_flagged(source):
    assert _flags("quiz", source) == []


def test_a_flag_names_the_exercise_in_the_graders_words_and_nothing_the_student_wrote():
    solution = nbformat.read(REPO / "solutions" / "01-dataparallel" / "01-dataparallel.ipynb", as_version=4)
    graded = nbformat.from_dict(nbformat.reads(nbformat.writes(solution), as_version=4))
    answer = next(c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "split_sizes")
    answer.source = "def my_split_sizes(n, k):\n    return [len(c) for c in torch._C._VariableFunctions.chunk(torch.arange(n), k)]"
    graded.cells.insert(3, nbformat.v4.new_code_cell("HYPERLINK_ = getattr(torch, '=HYPERLINK(\"x\")' + '')"))
    flags = audit.audit(judge.student_cells(solution, graded))
    assert any(f.startswith("the answer to split_sizes: ") for f in flags), flags
    assert any(f.startswith("code cell ") for f in flags), flags
    assert not any("HYPERLINK" in f for f in flags)


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_solutions_and_the_released_notebooks_are_not_flagged(lesson):
    """The instructor's own solution code, read as a student's, and the untouched student notebook."""
    solution = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    released = nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    cells = [(f"the answer to {g}", c.source, audit.FORBIDDEN_IN.get(g, set())) for c in solution.cells
             if (g := c.metadata.get("nbgrader", {}).get("grade_id")) and c.metadata["nbgrader"].get("solution")]
    assert audit.audit(cells) == []
    assert audit.audit(judge.student_cells(solution, released)) == []


def test_the_judge_flags_what_the_audit_finds():
    solution = nbformat.read(REPO / "solutions" / "01-dataparallel" / "01-dataparallel.ipynb", as_version=4)
    graded = nbformat.from_dict(nbformat.reads(nbformat.writes(solution), as_version=4))
    graded.cells.insert(3, nbformat.v4.new_code_cell("import sys\nsys.modules['helpers.grading'] = None"))
    result = judge.judge(solution, graded)
    assert any("code cell" in f for f in result["flags"]), result["flags"]


def test_a_module_the_instructors_notebook_imports_is_the_courses_even_where_it_is_not_installed():
    """A grader without torch_xla (torch 2.14) still knows the lesson's `import torch_xla` is no student's module."""
    solution = nbformat.read(REPO / "solutions" / "04-accelerate-tpu" / "04-accelerate-tpu.ipynb", as_version=4)
    course = audit.course_modules(solution)
    assert {"torch", "torch_xla", "helpers"} <= course
    cell = [("the answer to spmd", "import not_installed_anywhere.spmd as xs", set())]
    assert audit.audit(cell)
    assert audit.audit(cell, course | {"not_installed_anywhere"}) == []
