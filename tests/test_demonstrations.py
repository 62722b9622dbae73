"""The lessons' demonstrations (graders/demonstrations.py): the cells a lesson's source tags "demonstration", which
grading leaves out unless asked (`--run-demonstrations`), change no grade.

The proof. Statically, here, for every lesson: in the solution and in the released notebook alike, nothing after a
demonstration reads what it binds or changes, and grading leaves out exactly the tagged cells. Dynamically, in the
class of tests/classroom.py: lesson 1's solution graded with its demonstrations run and left out gets the same status,
flags, points per graded cell and verdicts (tests/corpus.py's demonstrations_run case); in every lesson the solution
graded without them scores full marks (test_grading.py), and the released notebook runs them all without an error
(its blank submission). That covers what reading the code cannot see in lesson 1: what a helper does to what it is
handed, the global random generators; lessons 2 to 4's demonstrations run their work in processes of their own
(launched ranks, XLA processes). nbval runs every other cell of every solution (tests/conftest.py): run there as well,
the demonstrations of lessons 2 and 4 took 137 of its 210 s.
"""

import subprocess
from pathlib import Path

import nbformat
import pytest

from corpus import DEMONSTRATIONS
from graders import course, demonstrations, execute, intake, pipeline, submission, worker

REPO = Path(__file__).resolve().parent.parent
LESSONS = course.lessons(REPO)
KINDS = ("solutions", "notebooks")  # the instructor's source, the released (blank) notebook


def _notebook(kind, lesson):
    return nbformat.read(REPO / kind / lesson / f"{lesson}.ipynb", as_version=4)


def _prepared(nb, source: Path | None, monkeypatch) -> list[str]:
    """The ids of the cells grading leaves out of `nb`, PrepareCells run as nbgrader runs it for the worker."""
    if source:
        monkeypatch.setenv(demonstrations.SOURCE, str(source))
    else:
        monkeypatch.delenv(demonstrations.SOURCE, raising=False)
    nb, resources = execute.PrepareCells().preprocess(nb, {})
    return [nb.cells[i].get("id") for i in sorted(resources[demonstrations.SKIPPED])]


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_lesson_tags_its_demonstrations_in_explanation_cells(lesson):
    source, released = _notebook("solutions", lesson), _notebook("notebooks", lesson)
    tagged = demonstrations.tagged(source)
    assert tagged and tuple(tagged) == DEMONSTRATIONS[lesson]
    tags = [c.get("id") for c in source.cells if demonstrations.TAG in c.metadata.get("tags", [])]
    assert tags == list(tagged), "only explanation code cells are demonstrations"
    assert not [i for i, s in tagged.items() if "### BEGIN" in s], "a demonstration holds no solution or hidden test"
    assert demonstrations.tagged(released) == tagged, "the released notebook has them as they are"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_nothing_after_a_demonstration_needs_it(lesson, kind):
    """Def-use over the cells: no later cell reads what a demonstration binds (a name, an import), and no
    demonstration assigns attributes, writes files, changes process settings or imports what no earlier cell
    does (graders/demonstrations.py's rules)."""
    cells = _notebook(kind, lesson).cells
    tagged = demonstrations.tagged(_notebook("solutions", lesson))
    candidates = [i for i, c in enumerate(cells) if c.get("id") in tagged]
    skipped = demonstrations.skippable(cells, candidates)
    why = {cells[i].get("id"): demonstrations.reasons(cells, i, skipped, set(candidates)) for i in candidates}
    assert {k: v for k, v in why.items() if v} == {}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_grading_leaves_out_exactly_the_tagged_cells(lesson, kind, monkeypatch):
    """As the worker has nbgrader run it: the cells as the kernel runs them (hidden parts, canaries)."""
    source = REPO / "solutions" / lesson / f"{lesson}.ipynb"
    assert _prepared(_notebook(kind, lesson), source, monkeypatch) == list(DEMONSTRATIONS[lesson])
    assert _prepared(_notebook(kind, lesson), None, monkeypatch) == [], "--run-demonstrations runs every cell"


def test_a_left_out_cell_is_not_run_and_keeps_no_outputs():
    cell = nbformat.v4.new_code_cell("raise SystemExit('ran')", outputs=[{"output_type": "stream", "name": "stdout",
                                                                         "text": "stale"}], execution_count=3)
    runner = execute.CrashSafeExecute()  # no kernel: a left-out cell never reaches it
    out, _ = runner.preprocess_cell(cell, {demonstrations.SKIPPED: {4}}, 4)
    assert out.outputs == [] and out.execution_count is None


def _lesson_one(change):
    nb = _notebook("solutions", "01-dataparallel")
    change(nb, {c.get("id"): c for c in nb.cells})
    return nb


def _quiz(nb):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "quiz")


SUBMISSIONS = {  # what a student does -> the demonstrations that must then run (the rest is left out)
    "nothing": (lambda nb, by_id: None, set()),
    "edits one": (lambda nb, by_id: setattr(by_id["cell-030"], "source", by_id["cell-030"].source + " "), {"cell-030"}),
    "reads what one made in an answer": (lambda nb, by_id: setattr(_quiz(nb), "source", "print(curves)\n" + _quiz(nb).source),
                                         {"cell-030"}),
    "reads all names": (lambda nb, by_id: nb.cells.append(nbformat.v4.new_code_cell("print(sorted(globals()))")),
                        set(DEMONSTRATIONS["01-dataparallel"])),
    "reads them through a magic": (lambda nb, by_id: nb.cells.append(nbformat.v4.new_code_cell("%who")),
                                   set(DEMONSTRATIONS["01-dataparallel"])),
    "strips their tags": (lambda nb, by_id: [c.metadata.pop("tags", None) for c in nb.cells], set()),
    "reads one's name after binding it again": (
        lambda nb, by_id: nb.cells.append(nbformat.v4.new_code_cell("curves = {}\nprint(curves)")), set()),
}


@pytest.mark.parametrize("change", SUBMISSIONS, ids=list(SUBMISSIONS))
def test_the_instructors_source_decides_and_a_students_code_always_gets_what_it_reads(change, monkeypatch):
    edit, must_run = SUBMISSIONS[change]
    source = REPO / "solutions" / "01-dataparallel" / "01-dataparallel.ipynb"
    left_out = _prepared(_lesson_one(edit), source, monkeypatch)
    assert set(left_out) == set(DEMONSTRATIONS["01-dataparallel"]) - must_run


def test_a_student_cannot_have_a_cell_of_their_own_left_out(monkeypatch):
    """Tagged by the student, or given a demonstration's id with other code, or made an exercise cell: it runs."""
    def dress(nb, by_id):
        nb.cells.insert(5, nbformat.v4.new_code_cell("print('mine')", metadata={"tags": ["demonstration"]}))
        by_id["cell-032"].source = "print('mine too')"
        by_id["cell-034"].metadata["nbgrader"] = dict(_quiz(nb).metadata["nbgrader"], grade_id="my_own")
        _quiz(nb).metadata.setdefault("tags", []).append("demonstration")

    source = REPO / "solutions" / "01-dataparallel" / "01-dataparallel.ipynb"
    left_out = _prepared(_lesson_one(dress), source, monkeypatch)
    assert set(left_out) == set(DEMONSTRATIONS["01-dataparallel"]) - {"cell-032", "cell-034"}


# (a demonstration, a later cell, whether the demonstration may be left out), after the cells of EARLIER
EARLIER = "import os\nimport torch\nitems = [1]\nmodel = torch.nn.Linear(2, 2)\nx = 1\n"
RULES = [
    ("x = 2", "print(x)", False),
    ("x = 2", "x = 3\nprint(x)", True),
    ("x = 2", "if items:\n    x = 3\nprint(x)", False),
    ("x = 2", "if items:\n    x = 3\nelse:\n    x = 4\nprint(x)", True),
    ("x = 2", "def f():\n    return x", False),
    ("x = 2", "class C:\n    y = x", False),
    ("x = 2", "x += 1", False),
    ("x = 2", "del x", False),
    ("x = 2", "print([x for x in range(3)])", True),
    ("x = 2", "for x in range(3):\n    print(x)", True),
    ("x = 2", "for x in []:\n    pass\nprint(x)", False),
    ("x = 2", "with open('f') as x:\n    pass\nprint(x)", True),
    ("x = 2", "try:\n    x = 3\nexcept Exception:\n    pass\nprint(x)", False),
    ("y = 2", "print(globals())", False),
    ("y = 2", "%who", False),
    ("y = 2", "print(_)", False),
    ("y = 2", "print(Out)", False),
    ("y = 2", "def f(:", True),  # a cell that is not Python runs nothing
    ("import statistics", "print(statistics.mean([1]))", False),
    ("import statistics", "print(1)", True),  # the standard library's
    ("import numpy", "print(1)", False),  # an import no earlier cell made: its side effects stay
    ("import torch as t", "print(1)", True),  # imported before
    ("import torch.nn", "print(1)", False),  # a submodule no earlier cell imports (torch's own import may have)
    ("model.weight = None", "print(1)", False),
    ("items[0] = 2", "print(1)", False),
    ("mine = {}\nmine['a'] = 1", "print(1)", True),
    ("def f():\n    global x\n    x = 3", "print(1)", False),
    ("%time y = 1", "print(1)", False),
    ("open('out.txt', 'w').write('x')", "print(1)", False),
    ("print(open('in.txt').read())", "print(1)", True),
    ("import pathlib\npathlib.Path('a').write_text('x')", "print(1)", False),
    ("torch.save(model, 'm.pt')", "print(1)", False),
    ("os.remove('m.pt')", "print(1)", False),
    ("torch.manual_seed(0)", "print(1)", False),
    ("torch.set_num_threads(1)", "print(1)", False),
    ("n = torch.get_num_threads()\ntry:\n    torch.set_num_threads(1)\nfinally:\n    torch.set_num_threads(n)", "print(1)", True),
    ("os.environ['A'] = '1'", "print(1)", False),
    ("import sys\nsys.path.append('x')", "print(1)", False),
    ("items.append(2)", "print(items)", False),
    ("items.append(2)", "print(1)", True),
    ("model(torch.ones(2))", "print(model)", False),
    ("print(torch.ones(2).sum())", "print(torch.zeros(1))", True),
    ("print(x + 1)", "print(x)", True),
    # any access to the namespace reads everything (issue 40): a skipped cell's result read so must not go missing
    ("y = 2", "import __main__\nprint(__main__.y)", False),
    ("y = 2", "import __main__ as m\nprint(getattr(m, 'y'))", False),
    ("y = 2", "from __main__ import y as z\nprint(z)", False),
    ("y = 2", "import sys\nprint(sys.modules['__main__'].y)", False),
    ("y = 2", "import sys\nm = sys.modules\nprint(m.get('__main__'))", False),
    ("y = 2", "print(getattr(os, 'sys').modules['__main__'])", False),
    ("y = 2", "import sys\nprint(sys._getframe(0).f_globals['y'])", False),
    ("y = 2", "def f():\n    pass\nprint(f.__globals__['y'])", False),
    ("y = 2", "print(get_ipython().user_ns['y'])", False),
    ("y = 2", "%store y", False),
    ("y = 2", "print(eval('y'))", False),
    ("y = 2", "import importlib\nprint(importlib.import_module('__main__'))", False),
    ("y = 2", "print(globals()['y'])\ny = 3", False),  # read before the cell binds it again
    ("y = 2", "print(list(model.modules()))", True),  # a Module's modules() reads nothing of the namespace
]


@pytest.mark.parametrize("demonstration, later, skippable", RULES, ids=[f"{d!r} then {l!r}" for d, l, _ in RULES])
def test_the_analysis_is_conservative(demonstration, later, skippable):
    cells = [nbformat.v4.new_code_cell(s) for s in (EARLIER, demonstration, later)]
    assert (demonstrations.skippable(cells, [1]) == {1}) is skippable, demonstrations.reasons(cells, 1)


def test_a_cell_the_analysis_cannot_read_runs_the_demonstrations_before_it():
    deep = "x = " + "(" * 5000 + "1" + ")" * 5000
    cells = [nbformat.v4.new_code_cell(s) for s in ("y = 2", deep, "print(1)")]
    assert demonstrations.skippable(cells, [0]) == {0}, "a cell that runs nothing (too deep to parse) reads nothing"
    cells[1].source = "print(" + " + ".join(["y"] * 50_000) + ")"
    assert demonstrations.skippable(cells, [0]) == set()


def test_the_option_travels_in_the_task_to_the_worker(tmp_path, monkeypatch):
    """pipeline -> intake: the Task says whether to run them (a Dask worker gets the Task as it is); the worker then
    names the instructor's source to nbgrader's PrepareCells, or does not."""
    import shutil

    lesson = "01-dataparallel"
    shutil.copytree(REPO / "solutions" / lesson, tmp_path / "solutions" / lesson)
    for student in ("ann", "bob"):
        (tmp_path / "submitted" / student / lesson).mkdir(parents=True)
        shutil.copy(REPO / "notebooks" / lesson / f"{lesson}.ipynb", tmp_path / "submitted" / student / lesson)
    for option, expected in ((False, {"ann": False, "bob": False}), (True, {"ann": True, "bob": True}),
                             ({"bob"}, {"ann": False, "bob": True})):
        _, tasks = intake.submissions(tmp_path, [lesson], {lesson: 10}, 60, False, option)
        assert {t.student: t.run_demonstrations for t in tasks} == expected
    seen = {}

    def nbgrader(root, *args, env=None, **_):
        seen[args[2]] = env.get(demonstrations.SOURCE)
        return subprocess.CompletedProcess(args, 1, "", "")

    monkeypatch.setattr(worker, "nbgrader", nbgrader)
    from graders import slots

    with slots.Slots(1, sandboxed=False) as job_slots:
        for task in tasks:
            worker.execute(task, b"", job_slots)
    assert seen["--student=ann"].endswith(f"solutions/{lesson}/{lesson}.ipynb") and seen["--student=bob"] is None


def test_the_command_line_and_make_pass_the_option(monkeypatch):
    calls = []
    monkeypatch.setattr(pipeline, "grade", lambda *a, **k: calls.append(k["run_demonstrations"]) or [])
    monkeypatch.setattr(pipeline, "report", lambda root: root)
    for argv in (["grade"], ["grade", "--run-demonstrations"]):
        assert pipeline.main(argv + ["--unsandboxed"]) == 0
    assert calls == [False, True]
    dry = subprocess.run(["make", "-n", "grade", "DEMONSTRATIONS=1"], cwd=REPO, capture_output=True, text=True)
    assert "--run-demonstrations" in dry.stdout and "--run-demonstrations" not in \
        subprocess.run(["make", "-n", "grade"], cwd=REPO, capture_output=True, text=True).stdout


def test_a_task_runs_none_of_them_unless_told():
    assert not submission.Task("s", "l", {}, "d", True, 1, 1, b"").run_demonstrations


DEFINED_BEFORE = [
    ("def f():\n    return demo\n", True),  # a function defined before, called after: it reads the demonstration's name
    ("g = lambda: demo\n", True),
    ("table = {'k': lambda: demo}\n", True),
    ("class C:\n    def m(self):\n        return demo\n", True),
    ("total = sum([demo for _ in range(2)]) if False else 0\n", False),  # a comprehension runs there and then
    ("def f(demo):\n    return demo\n", False),  # its own parameter, not the module's name
]


@pytest.mark.parametrize("earlier, runs", DEFINED_BEFORE, ids=[e for e, _ in DEFINED_BEFORE])
def test_a_function_defined_before_a_demonstration_reads_it_when_called_later(earlier, runs):
    """Issue 40: a function an earlier cell defined may be called by a later cell and then read the demonstration's
    name, so the demonstration runs (it was left out, and the graded run differed from the notebook as submitted)."""
    cells = [nbformat.v4.new_code_cell(s) for s in (earlier, "demo = 41\n", "x = 1\n")]
    assert (demonstrations.skippable(cells, [1]) == set()) is runs
