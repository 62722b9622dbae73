"""Issue 40 end to end, in the sandbox: hidden tests whose evidence the student's kernel never touches. A wrong answer
whose notebook forges its collection (a wrapped display publisher in the answer cell or in a cell of its own, a
post_run_cell hook) scores nothing; hidden inputs the student's function records never reach the graded notebook or
the feedback; two gradings of one submission draw different cases, and the judge agrees with each."""

import html
import json
import re
import shutil

import nbformat
import pytest
import torch

from conftest import REPO
from graders import judge, pipeline, sandbox
from helpers import grading

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"no sandbox here: {sandbox.available()}")
LESSON = "01-dataparallel"
RECORD = "text/x-course-hidden-run"  # graders/judge.py's RECORD_MIME
# Wrong, but right on the visible tests' two cases (so that its hidden tests run, and their collection counts)
WRONG = ("def my_split_sizes(batch_size, n_devices):\n"
         "    return {(64, 2): [32, 32], (10, 3): [4, 4, 2]}.get((batch_size, n_devices), [batch_size])\n")
# Right data for the cases in the namespace, computed by torch.chunk outside the exercise's chunk_forbidden: what a
# notebook swaps in for its wrong function's results.
RIGHT_DATA = ('[[len(c) for c in __import__("torch").arange(n).chunk(k)] '
              'for n, k in get_ipython().user_ns["_cases"]]')
WRAPPED_PUBLISHER = f'''import json
_publisher = get_ipython().display_pub
_publish = _publisher.publish
def _forging(data, *args, **kwargs):
    text = data.get("{grading.MIME}") if isinstance(data, dict) else None
    if text and '"split_sizes_tests"' in text:
        collected = json.loads(text)
        collected["data"] = FORGED()
        data = {{**data, "{grading.MIME}": json.dumps(collected)}}
    return _publish(data, *args, **kwargs)
_publisher.publish = _forging
'''
# The cases the graded notebook of today's grader called the function with, and their right answers: a table.
TABLE = {f"{n},{k}": [len(c) for c in torch.arange(n).chunk(k)] for n in range(1, 97) for k in range(1, 13)}
HOOK = f'''import json
from IPython.display import clear_output, publish_display_data
def _replace(result):
    if 'grading.collect("split_sizes_tests"' in (result.info.raw_cell or ""):
        clear_output()
        publish_display_data({{"{grading.MIME}": json.dumps({{"name": "split_sizes_tests", "data": {RIGHT_DATA}, "kernel": []}})}})
get_ipython().events.register("post_run_cell", _replace)
'''
# Right on the visible tests' cases; on the hidden ones it reports what of the hidden run it can reach from its globals
LOOKS_AROUND = ("def my_split_sizes(batch_size, n_devices):\n"
                "    if (batch_size, n_devices) in ((64, 2), (10, 3)):\n"
                "        return {64: [32, 32], 10: [4, 4, 2]}[batch_size]\n"
                "    import sys\n"
                "    from helpers import grading as g\n"
                "    main = vars(sys.modules['__main__'])\n"
                "    history = list(main.get('In', [])) + list(main.get('_ih', []))\n"
                "    return [sorted(n for n in ('_cases', '_rng', '_results', '_got') if n in main), g._hidden_seed,\n"
                "            any('use_hidden_seed' in str(text) for text in history)]\n")
RECORDING = "_SEEN = []\n\n\ndef _record(n, k):\n    _SEEN.append((n, k))\n\n\n"
PRINT_SEEN = 'print("\\n".join(f"SEEN {n}x{k}" for n, k in _SEEN))'


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _submissions():
    def solution():
        return nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)

    made = {}
    nb = solution()  # the answer cell wraps the publisher and swaps in a table of today's hidden cases
    _cell(nb, "split_sizes").source = (WRONG + f"_TABLE = {json.dumps(TABLE)}\n"
                                       "def FORGED():\n    return [_TABLE.get(f'{n},{k}') for n, k in get_ipython().user_ns['_cases']]\n"
                                       + WRAPPED_PUBLISHER)
    made["forges_in_its_answer"] = nb
    nb = solution()  # a cell of its own wraps the publisher and computes the right data for the cases it sees
    _cell(nb, "split_sizes").source = WRONG
    at = nb.cells.index(_cell(nb, "split_sizes"))
    nb.cells.insert(at, nbformat.v4.new_code_cell(f"def FORGED():\n    return {RIGHT_DATA}\n" + WRAPPED_PUBLISHER))
    made["forges_in_a_cell_of_its_own"] = nb
    nb = solution()  # a post_run_cell hook clears the real collection and publishes the right data
    _cell(nb, "split_sizes").source = WRONG
    nb.cells.insert(nb.cells.index(_cell(nb, "split_sizes")), nbformat.v4.new_code_cell(HOOK))
    made["forges_with_a_hook"] = nb
    nb = solution()
    _cell(nb, "split_sizes").source = LOOKS_AROUND
    made["looks_around"] = nb
    nb = solution()  # a right function that records its inputs, printed by a later cell: graded twice
    answer = _cell(nb, "split_sizes")
    answer.source = RECORDING + answer.source.replace("    ### BEGIN SOLUTION\n", "    _record(batch_size, n_devices)\n", 1)
    nb.cells.append(nbformat.v4.new_code_cell(PRINT_SEEN))
    made["records_1"] = made["records_2"] = nb
    return made


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("hidden")
    shutil.copytree(REPO / "solutions", root / "solutions")
    for student, nb in _submissions().items():
        folder = root / "submitted" / student / LESSON
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{LESSON}.ipynb")
    results = pipeline.grade(root, cell_timeout=120, submission_timeout=900, jobs=1, lesson_timeouts={LESSON: 30})
    return root, results


def _graded_notebook(root, student):
    return nbformat.read(root / "autograded" / student / LESSON / f"{LESSON}.ipynb", as_version=4)


def _points(root, student):
    import csv

    with open(root / "grades.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["student"] == student)
    return {k.split(":")[1]: float(v) for k, v in row.items() if k.startswith(LESSON + ":")}, row["flags"]


@pytest.mark.parametrize("student", ["forges_in_its_answer", "forges_in_a_cell_of_its_own", "forges_with_a_hook"])
def test_a_forged_collection_scores_nothing_for_a_wrong_function(graded, student):
    root, _ = graded
    points, flags = _points(root, student)
    assert points["split_sizes_tests"] == 0, "the wrong function's results were swapped for right data"
    assert points["quiz_tests"] == 2 and points["dp_gradients_tests"] == 3, "the other answers are right"


def test_a_replaced_publisher_is_flagged(graded):
    root, _ = graded
    for student in ("forges_in_its_answer", "forges_in_a_cell_of_its_own"):
        assert grading.PUBLISHER_CHANGED in _points(root, student)[1], student


def test_the_answer_reaches_neither_the_hidden_inputs_nor_their_seed(graded):
    """Where the hidden run calls the answer, its globals hold no hidden part's name (they are a function's locals:
    judge.in_own_scope), the seed is the fixed one again, and the kernel's history holds no cell's text."""
    root, _ = graded
    (found,), _ = judge.collections(_cell(_graded_notebook(root, "looks_around"), "split_sizes_tests"))
    seen = [value for value in found["data"] if value not in ([32, 32], [4, 4, 2])]
    assert len(seen) > 300 and all(value == [[], grading.FIXED_SEED, False] for value in seen), seen[:1]


def test_recorded_hidden_inputs_reach_neither_the_graded_notebook_nor_the_feedback(graded):
    """The function records every call; a later cell prints them: only the visible tests' calls show."""
    root, _ = graded
    for student in ("records_1", "records_2"):
        page = html.unescape((root / "feedback" / student / LESSON / f"{LESSON}.html").read_text())
        printed = "".join(o.get("text", "") for c in _graded_notebook(root, student).cells for o in c.get("outputs", [])
                          if PRINT_SEEN in c.source)
        for text in (page, printed):
            seen = set(re.findall(r"SEEN \d+x\d+", text))
            assert seen == {"SEEN 64x2", "SEEN 10x3"}, sorted(seen)[:20]


def _split_sizes_run(root, student):
    """The seed the hidden run recorded, and the cases it draws, the data it collected (graders/judge.py's view)."""
    cell = _cell(_graded_notebook(root, student), "split_sizes_tests")
    (record,) = [json.loads(o["data"][RECORD]) for o in cell.outputs if RECORD in o.get("data", {})]
    (collected,) = [grading.loads(o["data"][grading.MIME]) for o in cell.outputs if grading.MIME in o.get("data", {})]
    grading.use_hidden_seed(record["seed"])
    try:
        solution = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
        namespace = judge.prelude(solution)
        exec(judge.judged_cells(solution)["split_sizes_tests"]["setup"], namespace)
    finally:
        grading.use_hidden_seed(grading.FIXED_SEED)
    return record["seed"], namespace["_cases"], collected["data"]


def test_two_gradings_draw_different_cases_and_the_judge_agrees_with_each(graded):
    root, _ = graded
    assert judge.RECORD_MIME == RECORD
    runs = [_split_sizes_run(root, student) for student in ("records_1", "records_2")]
    (seed_1, cases_1, data_1), (seed_2, cases_2, data_2) = runs
    assert seed_1 != seed_2 and cases_1 != cases_2
    for cases, data in ((cases_1, data_1), (cases_2, data_2)):
        assert data == [[len(c) for c in torch.arange(n).chunk(k)] for n, k in cases]
    for student in ("records_1", "records_2"):
        points, flags = _points(root, student)
        assert sum(points.values()) == 15 and not flags, (points, flags)
