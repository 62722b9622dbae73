"""Hidden inputs are drawn anew for every submission (helpers.grading.hidden_random): no draw may cost a right answer
its points. Every exercise whose hidden tests start no processes runs the solution's answer on many seeds, collect
and judge as grading splits them (tests/test_answers.py runs the answers on the fixed seed); each draw must pass.
The exercises that launch ranks, XLA or Accelerate processes draw from the same code paths; in make test they are
left to test_hidden_grading.py's two gradings (SEEDS launches each would cost minutes), and `make test-seeds` draws
them on --launching-seeds seeds."""

import contextlib
import io

import pytest

from conftest import REPO
from graders import hidden_runs, judge
from graders.course import lessons
from helpers import grading
from test_answers import _cells, _launches, judge_namespaces, namespaces  # noqa: F401 (fixtures)

SEEDS = range(1, 9)  # besides grading.FIXED_SEED, which test_answers.py and nbval use


def _exercises(launching: bool) -> list[tuple[str, str, str, str]]:
    """(lesson, grade id, answer cell's source, test cell's source) of every judged exercise that launches processes
    (`launching`) or of every one that launches nothing."""
    found = []
    for lesson in lessons(REPO):
        cells = _cells(lesson)
        for answer, test in zip(cells, cells[1:]):
            parts = judge.split(test.source) if test.metadata.get("nbgrader", {}).get("grade") else None
            if parts and answer.metadata.get("nbgrader", {}).get("solution") and _launches(parts) == launching:
                found.append((lesson, test.metadata["nbgrader"]["grade_id"], answer.source, test.source))
    return found


EXERCISES, LAUNCHING = _exercises(launching=False), _exercises(launching=True)


def test_most_exercises_are_drawn_on_many_seeds_here():
    assert len(EXERCISES) >= 15


def test_the_launching_exercises_are_the_ones_left_to_make_test_seeds():
    assert {grade_id for _, grade_id, _, _ in LAUNCHING} >= {"worker_tests", "convert_tests", "spmd_tests", "fsdp_tests"}


def _passes_every_draw(namespaces, judge_namespaces, lesson, grade_id, answer, test, seeds):
    parts = judge.split(test)
    collect = parts["setup"] + "\n" + parts["collect"]
    solved = namespaces(lesson)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(answer, solved)
        exec(hidden_runs.tests_part(parts["visible"], collect), solved)
    try:
        for seed in seeds:
            grading.use_hidden_seed(seed)
            ran, judged = dict(solved), judge_namespaces(lesson)
            with contextlib.redirect_stdout(io.StringIO()):
                exec(collect, ran)
                exec(parts["setup"], judged)
                judged["_got"] = ran["_got"]
                try:
                    exec(parts["judge"], judged)
                except AssertionError as error:
                    pytest.fail(f"{grade_id}, seed {seed}: the solution fails its hidden tests: {error}")
    finally:
        grading.use_hidden_seed(grading.FIXED_SEED)


@pytest.mark.parametrize("lesson, grade_id, answer, test", EXERCISES, ids=[f"{l}-{g}" for l, g, _, _ in EXERCISES])
def test_the_solution_passes_every_draw_of_its_hidden_inputs(namespaces, judge_namespaces, lesson, grade_id, answer,
                                                             test):
    _passes_every_draw(namespaces, judge_namespaces, lesson, grade_id, answer, test, SEEDS)


@pytest.mark.parametrize("lesson, grade_id, answer, test", LAUNCHING, ids=[f"{l}-{g}" for l, g, _, _ in LAUNCHING])
def test_a_launching_solution_passes_every_draw_of_its_hidden_inputs(request, namespaces, judge_namespaces, lesson,
                                                                     grade_id, answer, test):
    count = request.config.getoption("--launching-seeds")
    if not count:
        pytest.skip("launches on many seeds take minutes: make test-seeds (test_hidden_grading.py draws two here)")
    _passes_every_draw(namespaces, judge_namespaces, lesson, grade_id, answer, test, range(1, count + 1))


def test_make_test_seeds_draws_them_and_the_workflow_runs_it():
    makefile = (REPO / "Makefile").read_text()
    target = makefile[makefile.index("\ntest-seeds:"):].split("\n\n")[0]
    assert "tests/test_hidden_seeds.py" in target and "--launching-seeds=$(SEEDS)" in target
    assert "run: make test-seeds" in (REPO / ".github" / "workflows" / "ci.yml").read_text()
