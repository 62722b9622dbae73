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
    assert cells[-1].source.startswith(f"def {judge.SCOPE}():\n    from helpers import grading\n"
                                       "    grading.use_hidden_seed(1234)\n")
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


def test_the_hidden_parts_names_and_seed_are_out_of_the_answers_reach():
    """The setup and collect parts run as a function's body (judge.in_own_scope): the answer's functions, whose
    globals are the kernel's, find no hidden input there (lesson 2's worker reading `_cases` took every rank's
    data_seed), and the seed is back to the fixed one when the answer runs."""
    namespace = {}
    exec("def f(x):\n"
         "    from helpers import grading\n"
         "    return [sorted(n for n in ('_cases', '_rng', '_runs', '_got') if n in globals()), grading._hidden_seed]\n",
         namespace)
    collect = (judge.KERNEL_IMPORT + "grading.use_hidden_seed(77)\n_rng = grading.hidden_random()\n"
               "_cases = [_rng.random()]\ngrading.use_hidden_seed(grading.FIXED_SEED)\n_runs = [f(c) for c in _cases]\n"
               "SEEN.extend(_runs)\n")
    namespace["SEEN"] = []
    try:
        exec(judge.in_own_scope(collect), namespace)
    finally:
        grading.use_hidden_seed(grading.FIXED_SEED)
    assert namespace["SEEN"] == [[[], grading.FIXED_SEED]]
    assert judge.SCOPE not in namespace
    exec(collect, namespace)  # the same parts at the kernel's top level, as before
    assert namespace["SEEN"][-1][0] == ["_cases", "_rng"]


def test_collections_past_the_runs_cap_are_kept_as_a_stub_the_judge_fails(monkeypatch):
    """Issue 40: a submission's hidden collections count against one cap (hidden_runs.MAX_RUN_BYTES); past it a
    collection is kept as a stub, never dropped silently (a forged first collection would then stand alone)."""
    monkeypatch.setattr(hidden_runs, "MAX_RUN_BYTES", 300)
    runs = hidden_runs.HiddenRuns()
    runs.nb = nbformat.v4.new_notebook(cells=[hidden_runs._cell("_got = 1", "collect", "t_tests")])
    runs._kept_bytes, runs.clear_before_next_output, outs = 0, False, []
    for value in ([1] * 40, [2] * 40):
        msg = {"msg_type": "display_data", "header": {"msg_type": "display_data"},
               "parent_header": {"msg_id": "m"},
               "content": {"data": {grading.MIME: grading.dumps("t_tests", value)}, "metadata": {}}}
        runs.output(outs, msg, None, 0)
    found, _ = judge.collections({"outputs": outs})
    assert [c["name"] for c in found] == ["t_tests", "(over the hidden runs' cap)"]
