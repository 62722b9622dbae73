"""Issue 40: the judge's references are refused to a student's code where the hidden tests run (helpers/refusal.py),
whatever route reaches them (a call, an alias, a partial, a thread, text run as code, a launched rank, a fresh process,
cells renamed), while the instructor's own calls in that run go through."""

import functools
import os
import subprocess
import sys
import threading

import nbformat
import pytest
from ipykernel.compiler import get_file_name

from conftest import REPO
from graders import hidden_runs
from helpers import fresh, grading, refusal, sharding

INSTRUCTOR_CALL = "shards = sharding.shard_state(state, 2)\n"  # a hidden test's own use of a reference
CHEATS = {  # an answer cell, then the instructor's cell that calls the student's function
    "a call in the answer": ("def f(n):\n    return sharding.zero_bytes(n, 2, 1)\n", "f(10)\n"),
    "an alias by import": ("from helpers.sharding import local_shape\n", "local_shape((5, 3), 2, 1)\n"),
    "an alias by assignment": ("zero_bytes_per_rank = sharding.zero_bytes\n", "zero_bytes_per_rank(10, 2, 1)\n"),
    "a partial": ("import functools\nf = functools.partial(sharding.zero_bytes, stage=1)\n", "f(10, 2)\n"),
    "a thread": ("import threading\ndef f(n):\n    out = []\n    def call():\n        try:\n"
                 "            out.append(sharding.local_shape((n, 3), 2, 1))\n        except Exception as error:\n"
                 "            out.append(error)\n    t = threading.Thread(target=call)\n    t.start()\n    t.join()\n"
                 "    if isinstance(out[0], Exception):\n        raise out[0]\n    return out[0]\n", "f(5)\n"),
    "text run as code": ("exec('def f(n):\\n    return sharding.zero_bytes(n, 2, 1)')\n", "f(10)\n"),
}


def _run(cells, names=("shard_state",)):
    """`cells` [(source, the instructor's?)] as a hidden run runs them, refusing from the first on; the namespace."""
    state = (frozenset(get_file_name(source) for source, instructor in cells if instructor), frozenset(names))
    namespace = {"__name__": "__main__", "sharding": sharding, "state": {"w": sharding_tensor()}}
    for source, _ in cells:
        refusal._refusing_as(state, exec, compile(source, get_file_name(source), "exec"), namespace)
    return namespace


def sharding_tensor():
    import torch

    return torch.arange(12.0).reshape(4, 3)


@pytest.fixture(autouse=True)
def _not_refusing():
    yield
    refusal._state = None
    os.environ.pop(refusal.ENV, None)


def test_the_instructors_calls_go_through_and_the_references_are_plain_functions_elsewhere():
    assert sharding.local_shape((5, 3), 2, 1) == (2, 3) and not refusal.refusing()
    namespace = _run([("import torch\n", True), (INSTRUCTOR_CALL, True)])
    assert [s["w"].shape[0] for s in namespace["shards"]] == [2, 2]


@pytest.mark.parametrize("route", CHEATS)
def test_a_reference_is_refused_to_an_answer_whatever_the_route(route):
    answer, instructor = CHEATS[route]
    with pytest.raises(refusal.ReferenceRefused):
        _run([(answer, False), (instructor, True)])


def test_an_answer_of_the_instructors_name_does_not_make_the_reference_the_instructors():
    """A bare name in the instructor's cell is the student's function, never permission for a reference of that name."""
    with pytest.raises(refusal.ReferenceRefused):
        _run([("from helpers.sharding import shard_state as reshard\n", False), ("reshard(state, 2)\n", True)],
             names=hidden_runs._names("reshard(state, 2)\n"))


def test_cells_named_otherwise_refuse_every_reference():
    """ipykernel names every cell's code by IPYKERNEL_CELL_NAME when set: an answer could name later cells as the
    instructor's. After it, nothing is the instructor's any more."""
    refusal._state = (frozenset(), frozenset({"shard_state"}))
    refusal.answer_ran()
    assert refusal._state != refusal.REFUSE_ALL
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(refusal.CELL_NAME, "/tmp/instructor.py")
        refusal.answer_ran()
    assert refusal._state == refusal.REFUSE_ALL
    with pytest.raises(refusal.ReferenceRefused):
        refusal._refusing_as(refusal._state, sharding.shard_state, {"w": sharding_tensor()}, 2)


def test_a_refusing_process_ships_its_refusals_to_the_processes_it_starts():
    def job():
        from helpers import sharding

        return sharding.local_shape((5, 3), 2, 1)

    assert fresh.run(job, timeout_s=120) == (2, 3)
    refusal._state = (frozenset(), frozenset())
    with pytest.raises(Exception, match="ReferenceRefused"):
        fresh.run(job, timeout_s=120)
    assert isinstance(refusal.carried(job), functools.partial) and threading.current_thread() is threading.main_thread()


def _python_calls_a_reference(**env):
    code = "from helpers import sharding\nprint(sharding.local_shape((5, 3), 2, 1))"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_an_interpreter_a_refusing_process_starts_refuses_as_it_does():
    """A fresh interpreter (a spawned process, a subprocess, an interpreter started by a program) inherits the
    refusal with the environment: an answer's child process does not get the references back."""
    assert _python_calls_a_reference().returncode == 0
    ran = refusal._refusing_as((frozenset(), frozenset({"local_shape"})), _python_calls_a_reference)
    assert ran.returncode != 0 and "ReferenceRefused" in ran.stderr
    assert refusal.ENV not in os.environ, "the process that launched it is as it was"
    for text in ("all", "{not json", "[1]"):
        ran = _python_calls_a_reference(**{refusal.ENV: text})
        assert ran.returncode != 0 and "ReferenceRefused" in ran.stderr, text
    refusal._state = (frozenset(), frozenset())
    refusal.answer_ran()  # after an answer cell the environment holds the state again, whatever the answer did
    assert refusal._from_environment() == refusal._state


def test_a_hidden_run_refuses_them_in_the_kernel_and_in_launched_ranks(tmp_path):
    """Lesson 5's hidden run (graders/hidden_runs.py), with answers that reach references: in a collect, in a rank of a
    launch, by an alias of the exercise's own name. Every one fails its collect; the solution's answers go through."""
    import nbclient

    lesson = "05-sharding"
    solution = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    submission = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    cheats = {"shard_shape": "from helpers.sharding import local_shape\n",
              "zero_bytes": "def zero_bytes_per_rank(n_parameters, world_size, stage):\n"
                            "    return sharding.zero_bytes(n_parameters, world_size, stage)\n",
              "zero1": "def zero1_step(model, shard, optimizer):\n    sharding.flat_shard(shard, 2, 0)\n"}
    for cell in submission.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in cheats and cell.metadata["nbgrader"].get("solution"):
            cell.source = cheats[cell.metadata["nbgrader"]["grade_id"]]
    graded = ["shard_shape_tests", "zero_bytes_tests", "zero1_tests", "reshard_tests", "quiz_tests"]
    cells = hidden_runs.refusing(hidden_runs.needed(hidden_runs.program(solution, submission, graded, 1234)))
    run = nbformat.v4.new_notebook(cells=cells, metadata=solution.metadata)
    nbclient.NotebookClient(run, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(REPO / "solutions" / lesson)}}).execute()
    failed, refused = {}, {}
    for cell in run.cells:
        part = cell.metadata[hidden_runs.PART]
        errors = " ".join(f"{o['ename']} {o['evalue']}" for o in cell.outputs if o.get("output_type") == "error")
        collected = " ".join(o["data"][grading.MIME] for o in cell.outputs if grading.MIME in o.get("data", {}))
        if part["kind"] in ("tests", "collect"):  # (a test cell whose visible checks the hidden part reuses runs them)
            failed[part["grade_id"]] = failed.get(part["grade_id"], "") + errors
            refused[part["grade_id"]] = refused.get(part["grade_id"], "") + errors + collected  # ("raised", its class)
        else:
            assert not errors, (part, errors)
    assert all("ReferenceRefused" in refused[g + "_tests"] for g in cheats), refused
    assert failed["reshard_tests"] == failed["quiz_tests"] == "", "the instructor's own calls (sharding.shard_state)"


def test_the_feedback_says_a_reference_was_refused():
    """A collect cell that failed with ReferenceRefused: the judge's message says what it means, not "an exception of
    its own" (graders/judge.py puts the run's failure in the feedback)."""
    cell = nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output("error", ename="ReferenceRefused", evalue="",
                                                                          traceback=[])])
    assert "reference implementations" in hidden_runs._collected(cell, None, False)[1]
    cell.outputs[0]["ename"] = "MyError"
    assert hidden_runs._collected(cell, None, False)[1] == "an exception of its own"
    cell.outputs[0]["ename"] = "NameError"  # the answer cell itself failed on a reference: its function is not there
    assert "reference implementations" in hidden_runs._collected(cell, None, False, answer_refused=True)[1]


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_feedback_page_says_why_a_refused_answer_failed(lang, tmp_path, monkeypatch):
    """The judge's verdict on a run whose answer met a refusal says so in words a feedback page shows, in the
    submission's language (graders/redact.py hides a run's own error text); any other failure says less."""
    import json

    from graders import judge, redact

    solution = nbformat.v4.new_notebook()
    solution.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["prelude"]}),
                      nbformat.v4.new_code_cell("f(1)\n### BEGIN HIDDEN TESTS\n# [collect]\n_got = grading.collect("
                                                "\"t_tests\", f(2))\n# [judge]\nassert _got == 2\n### END HIDDEN TESTS\n",
                                                metadata={"nbgrader": {"grade": True, "grade_id": "t_tests"}})]
    shown = {}
    for failure in (judge.REFUSED["ReferenceRefused"], "an exception of its own"):
        graded = nbformat.from_dict(json.loads(json.dumps(solution)))
        graded.cells[1].outputs = [hidden_runs.record(grading.FIXED_SEED, failure, 0)]
        verdicts = tmp_path / "verdicts.json"
        verdicts.write_text(json.dumps(judge.judge(solution, graded)))
        monkeypatch.setenv("GRADER_VERDICTS_FILE", str(verdicts))
        shown[failure] = redact.verdict_line(graded.cells[1], redact.words(lang), lang=lang)
    refused, other = shown.values()
    assert redact.words(lang)["judge_refused"] in refused and redact.words(lang)["problem"] not in refused, refused
    assert redact.words(lang)["judge_refused"] not in other and redact.words(lang)["problem"] in other, other


def test_every_cell_of_the_lessons_but_the_answers_is_known_as_released():
    """The student kernel's notice (below) tells the lesson's own cells from the others by their code: every code
    cell of the student notebooks of both editions but the answer cells, as written and as IPython runs it."""
    from IPython.core.inputtransformer2 import TransformerManager

    released = refusal._released_cells()
    for path in (REPO / "notebooks").glob("**/*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                answer = cell.metadata.get("nbgrader", {}).get("solution", False)
                ran = TransformerManager().transform_cell(cell.source).strip()
                assert (ran in released) is (not answer) or (answer and ran == "pass"), (path, cell.get("id"))
    assert any("tr" in p.parts for p in (REPO / "notebooks").glob("**/*.ipynb"))


@pytest.mark.parametrize("lang, said", [("en", "is one of the grader's references"),
                                        ("tr", "notlandırıcının referans uygulamalarından biridir")])
def test_a_students_kernel_says_once_when_an_answer_reaches_a_reference(lang, said, capsys):
    """In a student's own kernel a reference runs (nothing is refused there), but an answer that reaches it, or a
    cell the student changed, is told at once, in the notebook's language, that the hidden tests would refuse it;
    the lesson's own cells call it silently. Outside a kernel (a script, the judge) nothing is said."""
    import nbclient

    released = ["print(sharding.zero_bytes(10, 2, 1))", "assert zero_bytes_per_rank(10) > 0"]
    cells = [f"from helpers import language, refusal, sharding\nlanguage.use({lang!r})\n"
             f"refusal._released_cells().update({released!r})",
             released[0],  # the lesson's own call
             "def zero_bytes_per_rank(n):\n    return sharding.zero_bytes(n, 2, 1)",  # an answer
             released[1], released[1],  # the lesson's check calls the answer, twice
             "print(sharding.zero_bytes(12, 2, 1))"]  # a cell the student changed
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    stderr = ["".join(o.text for o in cell.outputs if o.get("name") == "stderr") for cell in nb.cells]
    assert [said in text for text in stderr] == [False, False, False, True, False, True], stderr
    assert "zero_bytes" in stderr[3] and "zero_bytes" in stderr[5]
    sharding.zero_bytes(10, 2, 1)
    assert not capsys.readouterr().err
