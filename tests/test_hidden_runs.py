"""Issue 40: hidden tests run apart from the student's kernel (graders/hidden_runs.py), on inputs drawn per submission
from a seed that kernel never sees (helpers.grading.hidden_random), judged with the same seed (graders/judge.py)."""

import json

import nbformat
import pytest

from conftest import REPO
from graders import execute, hidden_runs, judge
from helpers import grading

LESSON = "01-dataparallel"


def _solution(lesson=LESSON):
    return nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.mark.parametrize("lesson", ["01-dataparallel", "03-amp"])
def test_the_students_kernel_runs_no_hidden_test(lesson):
    """What the kernel of the student's notebook runs holds no setup or collect part, and nothing of the hidden block."""
    nb, resources = hidden_runs.HoldHiddenTests().preprocess(_solution(lesson), {})
    nb, _ = execute.PrepareCells().preprocess(nb, resources)
    hidden = [judge.split(source) for source in hidden_runs.judged_sources(_solution(lesson)).values()]
    ran = "\n".join(c.source for c in nb.cells)
    assert "grading.collect" not in ran and judge.BEGIN not in ran and "hidden_random" not in ran
    assert all(parts["setup"].strip() not in ran for parts in hidden if parts["setup"].strip())


def test_a_hidden_run_is_built_from_the_instructors_source():
    """The instructor's prelude and released cells (not the submission's copies), the student's answer cells, no cell
    the student added, no other exercise's tests, the graded cell's definitions without its checks, then its setup
    and collect with the seed."""
    submission = _solution()
    released = next(c for c in submission.cells if c.cell_type == "code" and "params = 7e9" in c.source)
    released.source = "params = 7e9  # RELEASED CELL CHANGED\nprint(params)"
    at = submission.cells.index(_cell(submission, "split_sizes"))
    submission.cells.insert(at, nbformat.v4.new_code_cell("print('ADDED BY THE STUDENT')"))
    _cell(submission, "split_sizes").source += "\n# MY ANSWER"
    cells = hidden_runs.program(_solution(), submission, "dp_gradients_tests", 1234)
    kinds = [c.metadata[hidden_runs.PART]["kind"] for c in cells]
    sources = "\n".join(c.source for c in cells)
    assert kinds[:2] == ["prelude", "prelude"] and kinds[-2:] == ["tests", "collect"]
    assert "# MY ANSWER" in sources and "def device_samples" in sources and "def data_parallel_gradients" in sources
    assert "ADDED BY THE STUDENT" not in sources and "RELEASED CELL CHANGED" not in sources
    assert "chunk_forbidden():  # torch.chunk" not in sources, "another exercise's tests"
    assert "class _Recording" in cells[-2].source and "_check_dp_gradients(10, 3)" not in cells[-2].source
    assert cells[-1].source.startswith(judge.KERNEL_IMPORT + "grading.use_hidden_seed(1234)\n")
    assert "def device0_extra_bytes" not in sources, "no later answer"
    kept = hidden_runs.needed(cells)
    assert len(kept) < len(cells) and not any("torch.randn(64, 32)" in c.source for c in kept), "a demonstration runs"


def test_hidden_inputs_come_from_the_seed():
    assert grading.hidden_random().random() == grading.hidden_random().random(), "the fixed seed outside a grading"
    try:
        grading.use_hidden_seed(7)
        first = grading.hidden_random().random()
        grading.use_hidden_seed(8)
        assert grading.hidden_random().random() != first
        with pytest.raises(ValueError, match="seed"):
            grading.use_hidden_seed(-1)
    finally:
        grading.use_hidden_seed(grading.FIXED_SEED)


CELL = '''assert f(1) == 1
### BEGIN HIDDEN TESTS
_cases = [grading.hidden_random().randrange(10**9) for _ in range(3)]
# [collect]
_got = grading.collect("t_tests", [f(c) for c in _cases])
# [judge]
assert _got == [c * c for c in _cases], "wrong"
### END HIDDEN TESTS
'''


def test_the_judge_draws_the_cases_of_the_seed_the_run_recorded():
    """The judge's setup draws the same cases as the hidden run's, from the seed in the run's record: the right
    answer for one seed's cases is wrong for another's."""
    solution = nbformat.v4.new_notebook()
    solution.cells = [nbformat.v4.new_code_cell("from helpers import grading", metadata={"tags": ["prelude"]}),
                      nbformat.v4.new_code_cell(CELL, metadata={"nbgrader": {"grade": True, "grade_id": "t_tests"}})]
    verdicts = {}
    for seed, recorded in [(11, 11), (11, 12)]:
        grading.use_hidden_seed(seed)
        cases = [grading.hidden_random().randrange(10**9) for _ in range(3)]
        grading.use_hidden_seed(grading.FIXED_SEED)
        graded = nbformat.from_dict(json.loads(json.dumps(solution)))
        collection = {"output_type": "display_data", "metadata": {},
                      "data": {grading.MIME: grading.dumps("t_tests", [c * c for c in cases])}}
        graded.cells[1].outputs = [nbformat.from_dict(collection), hidden_runs.record(recorded, None, 0)]
        verdicts[recorded] = judge.judge(solution, graded)["cells"]["t_tests"]["passed"]
    assert verdicts == {11: True, 12: False}


def test_the_students_own_collections_are_taken_out():
    nb = _solution()
    forged = nbformat.from_dict({"output_type": "display_data", "metadata": {},
                                 "data": {grading.MIME: grading.dumps("split_sizes_tests", []), "text/plain": ""}})
    record = hidden_runs.record(5, None, 0)
    _cell(nb, "quiz").outputs = [forged, record]
    assert hidden_runs.take_collections(nb) == 2 and _cell(nb, "quiz").outputs == []
