"""The judge's side of grading: the plain-data codec, the split of hidden tests, verdicts and flags, canaries."""

import collections
import json
import math

import nbformat
import pytest
import torch

from conftest import REPO
from graders import execute, hidden_runs, judge
from helpers import grading

LESSONS = ["01-dataparallel", "02-ddp", "03-amp", "04-accelerate-tpu"]


def _round_trip(value):
    return grading.loads(grading.dumps("t", value))["data"]


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 2**80, 1.5, -0.0, "text", "$looks like a tag", "", [], (), {}, [1, (2, 3), {"a": [4]}],
    {1: "int key", (1, 2): "tuple key", "b": None}, collections.OrderedDict([("z", 1), ("a", 2)]),
    "a lone surrogate \udc80", torch.float16, torch.device("cpu"),
])
def test_plain_values_keep_their_exact_types(value):
    back = _round_trip(value)
    assert back == value and type(back) is type(value)
    if isinstance(value, dict):
        assert list(back) == list(value) and [type(k) for k in back] == [type(k) for k in value]


def test_floats_keep_inf_and_nan():
    back = _round_trip([math.inf, -math.inf, math.nan, 0.1 + 0.2])
    assert back[:2] == [math.inf, -math.inf] and math.isnan(back[2]) and back[3] == 0.1 + 0.2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.bool, torch.complex64])
def test_tensors_keep_dtype_shape_and_values(dtype):
    t = (torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) - 5).to(dtype)
    for value in (t, t[:, 1], t.permute(2, 1, 0), torch.empty(0, 3, dtype=dtype), t[0, 0, 0].clone()):
        back = _round_trip(value)
        assert type(back) is torch.Tensor and back.dtype == value.dtype and back.shape == value.shape
        assert torch.equal(back, value)


def test_tensor_subclasses_and_grad_decode_as_plain_cpu_tensors():
    p = torch.nn.Parameter(torch.ones(3))
    back = _round_trip({"p": p, "g": p * 2})
    assert all(type(v) is torch.Tensor and not v.requires_grad and v.device.type == "cpu" for v in back.values())


def test_anything_else_decodes_to_a_value_no_test_accepts():
    import numpy as np

    back = _round_trip([np.int64(3), object(), lambda: 0, {1, 2}])
    assert all(isinstance(v, grading.Other) for v in back)
    assert back[0] != 3 and back[0].type_name == "numpy.int64"


def test_the_codec_uses_the_real_type_even_when_a_notebook_replaces_it():
    import builtins

    real = builtins.type
    builtins.type = lambda *args: list  # a notebook's lie about every value's type (no pytest code may run meanwhile)
    try:
        data = grading.encode((1, 2))
    finally:
        builtins.type = real
    assert type(grading.decode(data)) is tuple


@pytest.mark.parametrize("data", [
    {"$tensor": {"dtype": "float32", "shape": [3], "device": "cpu", "data": "AAAA"}},  # 3 bytes for 12
    {"$tensor": {"dtype": "os.system", "shape": [1], "device": "cpu", "data": ""}},
    {"$dtype": "Tensor"}, {"$unknown": 1}, {"$float": "1e999"}, {"$dict": [[1]]},
])
def test_malformed_data_is_refused(data):
    with pytest.raises((ValueError, KeyError, TypeError)):
        grading.decode(data)


def test_deep_or_huge_data_is_refused(monkeypatch):
    deep = []
    for _ in range(grading.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(ValueError, match="deeper"):
        grading.dumps("t", deep)
    monkeypatch.setattr(grading, "MAX_BYTES", 1000)
    with pytest.raises(ValueError, match="bytes"):
        grading.dumps("t", "x" * 2000)


def test_reference_is_memoized_in_the_judges_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADER_JUDGE_MEMO", raising=False)  # the test session's (tests/conftest.py)
    calls = []

    def compute():
        calls.append(1)
        return {"state": torch.arange(3.0)}

    assert torch.equal(grading.reference("k", compute)["state"], torch.arange(3.0)) and len(calls) == 1
    grading.reference("k", compute)
    assert len(calls) == 2, "without the judge's folder, a reference is simply computed"
    monkeypatch.setenv("GRADER_JUDGE_MEMO", str(tmp_path))
    first, second = grading.reference("k", compute), grading.reference("k", compute)
    assert len(calls) == 3 and torch.equal(first["state"], second["state"]) and len(list(tmp_path.iterdir())) == 1


def test_bad_arguments_get_a_clear_error():
    with pytest.raises(ValueError, match="name"):
        grading.collect("", 1)
    with pytest.raises(ValueError, match="key"):
        grading.reference(3, lambda: 1)
    with pytest.raises(ValueError, match="compute"):
        grading.reference("k", 1)
    with pytest.raises(ValueError, match="fn"):
        grading.outcome(None)


def test_outcome_records_returns_and_raises():
    assert grading.outcome(int, "3") == ("returned", 3)
    assert grading.outcome(int, "x") == ("raised", "ValueError")


# ---- the split --------------------------------------------------------------------------------------------

CELL = '''assert f(1) == 1
### BEGIN HIDDEN TESTS
_cases = [1, 2, 3]
# [collect]
_got = grading.collect("t_tests", [f(c) for c in _cases])
# [judge]
assert _got == [c * c for c in _cases], "SECRET-MESSAGE"
### END HIDDEN TESTS
'''


def test_the_kernel_gets_the_cell_without_its_judge_part():
    kernel = judge.for_kernel(CELL)
    assert "assert f(1) == 1" in kernel and "_cases = [1, 2, 3]" in kernel and "grading.collect" in kernel
    assert "SECRET" not in kernel and "c * c" not in kernel
    assert judge.for_kernel("print(1)") == "print(1)"
    namespace = {"f": lambda x: x * x}  # a notebook whose import cell lost `grading` still hands its data over
    exec(kernel, namespace)
    assert namespace["_got"] == [1, 4, 9]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_hidden_test_of_every_lesson_is_split(lesson):
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    with_hidden = [c for c in graded if judge.BEGIN in c.source]
    assert with_hidden and len(judge.judged_cells(nb)) == len(with_hidden), "a hidden block without its markers"
    for cell in with_hidden:
        parts = judge.split(cell.source)
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        assert f'grading.collect("{grade_id}"' in parts["collect"], grade_id
        assert "grading.collect" not in parts["setup"] + parts["judge"], grade_id
        assert parts["judge"].strip(), grade_id
    prelude = [c for c in nb.cells if judge.PRELUDE_TAG in c.metadata.get("tags", [])]
    assert len(prelude) == 2 and "from helpers import" in prelude[1].source and "grading" in prelude[1].source


# ---- verdicts ---------------------------------------------------------------------------------------------

def _notebooks(outputs, seed=grading.FIXED_SEED, published=0):
    """The instructor's notebook and a graded one whose cell holds `outputs` and the record of a hidden run that
    failed with the first error of `outputs` (graders/hidden_runs.py)."""
    solution = nbformat.v4.new_notebook()
    solution.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["prelude"]}),
                      nbformat.v4.new_code_cell(CELL, metadata={"nbgrader": {"grade": True, "grade_id": "t_tests"}})]
    graded = nbformat.from_dict(json.loads(json.dumps(solution)))
    failure = next((o["ename"] for o in outputs if o.get("output_type") == "error"), None)
    graded.cells[1].outputs = [nbformat.from_dict(o) for o in outputs] + [hidden_runs.record(seed, failure, published)]
    return solution, graded


def _collection(value, name="t_tests", changes=()):
    text = json.dumps({"name": name, "data": grading.encode(value), "kernel": list(changes)})
    return {"output_type": "display_data", "metadata": {}, "data": {grading.MIME: text, "text/plain": ""}}


ERROR = {"output_type": "error", "ename": "NameError", "evalue": "f", "traceback": []}


@pytest.mark.parametrize("outputs, passed, flagged", [
    ([_collection([1, 4, 9])], True, False),
    ([_collection([1, 4, 10])], False, False),  # a wrong answer
    ([_collection((1, 4, 9))], False, False),  # a tuple is not the list the judge wants
    ([ERROR], False, False),  # an honest crash: no data, no flag
    ([_collection([1, 4, 9]), ERROR], False, True),  # right data published by the answer, which then raised
    ([ERROR, _collection([1, 4, 9])], False, True),
    ([], False, True),  # no data and no error: the kernel stopped the collection
    ([_collection([1, 4, 9]), _collection([1, 4, 9])], False, True),  # a forged second collection
    ([_collection([1, 4, 9], name="other_tests")], False, True),
    ([_collection([1, 4, 9], changes=["a notebook added to ast_transformers"])], True, True),
    ([{"output_type": "display_data", "metadata": {}, "data": {grading.MIME: "{not json"}}], False, True),
])
def test_the_judge_scores_the_data_and_flags_a_tampered_kernel(outputs, passed, flagged):
    result = judge.judge(*_notebooks(outputs))
    assert result["cells"]["t_tests"]["passed"] is passed
    assert bool(result["flags"]) is flagged, result["flags"]


SLOW_REFERENCE = '''assert f(1) == 1
### BEGIN HIDDEN TESTS
# [collect]
_got = grading.collect("t_tests", f(2))
# [judge]
def _reference():  # the judge's own run, stopped at its time limit (an XLA run or a launch, on a busy machine)
    raise TimeoutError("the process used more than timeout_s=1 CPU-seconds and was stopped")
assert _got == grading.reference("t reference", _reference), "wrong"
### END HIDDEN TESTS
'''


def test_a_reference_the_judge_cannot_compute_is_no_verdict_on_the_submission(tmp_path, monkeypatch):
    """Issue 39: lesson 4's spmd test computes its references with XLA runs in the judge. One that fails (out of its
    time, or crashed) is the grader's failure: the judge reports an error (the submission is not graded), it does not
    fail the student's test."""
    monkeypatch.delenv("GRADER_JUDGE_MEMO", raising=False)
    solution, graded = _notebooks([_collection(4)])
    solution.cells[0].source = graded.cells[0].source = "from helpers import grading"
    solution.cells[1].source = graded.cells[1].source = SLOW_REFERENCE
    for name, nb in (("solution", solution), ("graded", graded)):
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    out = tmp_path / "verdicts.json"
    assert judge.main([str(tmp_path / "solution.ipynb"), str(tmp_path / "graded.ipynb"), str(out)]) == 0
    result = json.loads(out.read_text())
    assert "cells" not in result and "ReferenceFailed" in result["error"] and "t reference" in result["error"], result
    def slow():
        raise TimeoutError("slow")

    for memo in (None, tmp_path):  # the judge's folder of references, or none
        if memo:
            monkeypatch.setenv("GRADER_JUDGE_MEMO", str(memo))
        with pytest.raises(grading.ReferenceFailed, match="TimeoutError: slow"):
            grading.reference("k2", slow)
    assert not list(tmp_path.glob("*.json.*")), "nothing half-written is left for the next judge"


def test_the_judge_never_runs_the_students_code():
    """The judge part sees only data: a collected value that would run code if executed stays a string."""
    solution, graded = _notebooks([_collection("__import__('os').system('touch /tmp/judge-ran-student-code')")])
    result = judge.judge(solution, graded)
    assert not result["cells"]["t_tests"]["passed"]
    assert not __import__("os").path.exists("/tmp/judge-ran-student-code")


def test_the_judge_refuses_a_link_for_the_graded_notebook(tmp_path):
    target = tmp_path / "real.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), target)
    (tmp_path / "link.ipynb").symlink_to(target)
    with pytest.raises(OSError):
        judge.read_notebook(str(tmp_path / "link.ipynb"))


# ---- canaries ---------------------------------------------------------------------------------------------

def test_canaries_go_in_after_each_graded_cell_and_come_out_again(monkeypatch, tmp_path):
    solution, _ = _notebooks([])
    nb, _ = execute.PrepareCells()(solution, {})
    canaries = [c for c in nb.cells if execute.CANARY in c.metadata]
    assert len(nb.cells) == 5 and len(canaries) == 2 and nb.cells[3] is canaries[0]
    assert "SECRET" not in nb.cells[1].source + nb.cells[2].source, "the judge part is gone before the kernel starts"
    expected = canaries[0].metadata[execute.CANARY]
    good = [nbformat.from_dict(o) for o in (
        {"output_type": "stream", "name": "stdout", "text": expected["printed"] + " []\n"},
        {"output_type": "error", "ename": "AssertionError", "evalue": expected["raised"], "traceback": []})]
    for canary in canaries:
        canary.outputs = good if canary is canaries[0] else [good[0]]  # the second one's error was swallowed
    monkeypatch.setenv("GRADER_CANARY_FILE", str(tmp_path / "c.json"))
    nb, _ = execute.CheckCanaries()(nb, {})
    nb, _ = execute.JoinHiddenParts()(nb, {})
    assert len(nb.cells) == 2 and not any(execute.CANARY in c.metadata for c in nb.cells)
    assert json.loads((tmp_path / "c.json").read_text()) == ["the kernel swallowed an error the grader raised on purpose"]


def test_the_hidden_part_runs_as_a_cell_of_its_own_and_goes_back_into_its_graded_cell():
    """The kernel runs a graded cell's visible tests as the cell, and its hidden setup and collect as a cell of
    the grader's (run without storing it in the kernel's history); afterwards they are one cell again, holding
    what the kernel ran and all its outputs."""
    solution, _ = _notebooks([])
    original = solution.cells[1].source
    nb, _ = execute.PrepareCells()(solution, {})
    visible, hidden = nb.cells[1], nb.cells[2]
    assert execute.HIDDEN_PART in hidden.metadata and execute.HIDDEN_PART not in visible.metadata
    assert judge.BEGIN not in visible.source and judge.BEGIN in hidden.source and "# [collect]" in hidden.source
    assert visible.source + hidden.source == judge.for_kernel(original)
    visible.outputs = [nbformat.from_dict({"output_type": "stream", "name": "stdout", "text": "visible\n"})]
    hidden.outputs = [nbformat.from_dict(_collection([1, 4, 9]))]
    nb.cells = [c for c in nb.cells if execute.CANARY not in c.metadata]
    nb, _ = execute.JoinHiddenParts()(nb, {})
    assert [c.source for c in nb.cells] == ["x = 1", judge.for_kernel(original)]
    assert [o.output_type for o in nb.cells[1].outputs] == ["stream", "display_data"]


def test_a_students_cell_dressed_as_the_graders_is_kept():
    """A cell carrying the grader's marks would run, then vanish from the graded notebook: the marks go first."""
    solution, _ = _notebooks([])
    for mark in execute.INSERTED:
        solution.cells.insert(1, nbformat.v4.new_code_cell("print('mine')", metadata={mark: {"printed": "P", "raised": "R"}}))
    nb, _ = execute.PrepareCells()(solution, {})
    nb, _ = execute.CheckCanaries()(nb, {})
    nb, _ = execute.JoinHiddenParts()(nb, {})
    assert [c.source for c in nb.cells].count("print('mine')") == len(execute.INSERTED)


def test_the_kernels_reports_reach_the_flags_only_in_the_graders_words():
    """What a kernel says about its hooks is the submission's text: only sentences the grader itself writes pass."""
    forged = ["=HYPERLINK(\"http://x\")", "a notebook added to ast_transformers", "a notebook registered a =1+1 hook", 7]
    result = judge.judge(*_notebooks([_collection([1, 4, 9], changes=forged)]))
    assert "a notebook added to ast_transformers" in result["flags"]
    assert all(flag in grading.KERNEL_CHANGES or flag == grading.UNKNOWN_CHANGE or flag.startswith("t_tests")
               for flag in result["flags"]), result["flags"]
    outputs = [{"output_type": "stream", "name": "stdout", "text": "P ['=cmd|calc', 'a notebook added an import hook']\n"}]
    assert execute.reported_changes(outputs, {"printed": "P"}) == [grading.UNKNOWN_CHANGE, "a notebook added an import hook"]


@pytest.mark.parametrize("outputs, problem", [
    ([("stdout", "P []\n"), ("error", "AssertionError", "R")], None),
    ([("stdout", "P []\n")], "swallowed"),
    ([("stdout", "P []\n"), ("error", "RuntimeError", "R")], "rewrote"),
    ([("error", "AssertionError", "R")], "hid"),
    ([("stdout", "P []\n"), ("error", "AssertionError", "R"), ("result",)], "forged"),
    ([("stdout", "a thread's line\nP []\n"), ("stderr", "a warning"), ("error", "AssertionError", "R")], None),
])
def test_a_canary_tells_an_honest_kernel_from_a_tampered_one(outputs, problem):
    made = []
    for o in outputs:
        if o[0] in ("stdout", "stderr"):
            made.append({"output_type": "stream", "name": o[0], "text": o[1]})
        elif o[0] == "error":
            made.append({"output_type": "error", "ename": o[1], "evalue": o[2], "traceback": []})
        else:
            made.append({"output_type": "execute_result", "data": {"text/plain": "1"}, "metadata": {}, "execution_count": 1})
    found = execute.canary_problem(made, {"printed": "P", "raised": "R"})
    assert (found is None) if problem is None else (problem in found)


def test_a_canary_reports_what_the_kernel_says_about_its_hooks():
    outputs = [{"output_type": "stream", "name": "stdout", "text": "P ['a notebook registered a pre_run_cell hook']\n"}]
    assert execute.reported_changes(outputs, {"printed": "P"}) == ["a notebook registered a pre_run_cell hook"]
    assert execute.reported_changes([{"output_type": "stream", "name": "stdout", "text": "P [oops\n"}], {"printed": "P"})


def test_the_kernel_reports_what_a_notebook_changed(monkeypatch):
    """kernel_changes, as the canaries call it in the grading kernel, on a stand-in IPython shell."""
    import sys
    import types

    import IPython

    notebook = types.ModuleType("__main__")
    exec("def hook(*args):\n    return args\nclass Finder:\n    def find_spec(self, *args):\n        return None", notebook.__dict__)
    shell = types.SimpleNamespace(input_transformers_cleanup=[], input_transformers_post=[notebook.hook], ast_transformers=[],
                                  events=types.SimpleNamespace(callbacks={"pre_run_cell": [notebook.hook], "post_execute": [print]}),
                                  custom_exceptions=(), kernel=None)
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    monkeypatch.setattr(sys, "meta_path", [notebook.Finder()] + sys.meta_path)
    changes = grading.kernel_changes()
    assert "a notebook added to input_transformers_post" in changes
    assert "a notebook registered a pre_run_cell hook" in changes
    assert "a notebook added an import hook" in changes
    assert not any("post_execute" in c for c in changes), "a library's own callback is not a notebook's change"
    monkeypatch.setattr(sys, "meta_path", sys.meta_path[1:])
    shell.input_transformers_post, shell.events.callbacks = [], {}
    assert grading.kernel_changes() == []


def test_the_judge_reads_only_what_the_hidden_run_recorded():
    """Issue 40: a graded cell's hidden tests run apart (graders/hidden_runs.py), which leaves its record in the cell.
    Without one nothing ran apart, whatever collection the cell holds; results the notebook's own kernel published
    are a flag."""
    solution, graded = _notebooks([_collection([1, 4, 9])])
    assert judge.judge(solution, graded)["cells"]["t_tests"]["passed"]
    graded.cells[1].outputs = graded.cells[1].outputs[:1]  # the kernel's collection, no record
    result = judge.judge(solution, graded)
    assert not result["cells"]["t_tests"]["passed"] and "the hidden tests' run left no record" in result["flags"]
    result = judge.judge(*_notebooks([_collection([1, 4, 9])], published=1))
    assert judge.KERNEL_COLLECTED in result["flags"]


@pytest.mark.parametrize("failure", ["it ran past its time limit", "the kernel died or hung", "ValueError",
                                     judge.REFUSED["ReferenceRefused"]])
def test_results_from_a_run_that_failed_score_nothing_and_are_flagged(failure):
    """The collect part publishes its results last: a run that failed after results arrived (an answer that published
    right data itself, then raised or looped) is judged by its failure, never by the data."""
    solution, graded = _notebooks([_collection([1, 4, 9])])
    graded.cells[1].outputs[-1] = hidden_runs.record(grading.FIXED_SEED, failure, 0)
    result = judge.judge(solution, graded)
    assert not result["cells"]["t_tests"]["passed"] and result["flags"]
    graded.cells[1].outputs = graded.cells[1].outputs[-1:]  # the same failure without results: no flag
    result = judge.judge(solution, graded)
    assert not result["cells"]["t_tests"]["passed"] and not result["flags"]


def test_a_cell_whose_visible_tests_failed_is_judged_without_a_hidden_run():
    """graders/hidden_runs.py leaves a cell whose visible tests failed in the student's kernel out of the hidden run
    (it scores nothing whatever they say): its record says so. The judge fails it without a flag when the cell shows
    that error, and flags a record that claims it of a cell that shows none, or that holds results anyway."""
    solution, graded = _notebooks([ERROR])
    graded.cells[1].outputs[-1] = hidden_runs.record(grading.FIXED_SEED, judge.VISIBLE_FAILED, 0)
    result = judge.judge(solution, graded)
    assert result["cells"]["t_tests"] == {"passed": False, "message": "the hidden tests did not run", "flags": []}
    assert result["flags"] == []
    for outputs in ([], [_collection([1, 4, 9])], [ERROR, _collection([1, 4, 9])]):
        graded.cells[1].outputs = [nbformat.from_dict(o) for o in outputs] + [
            hidden_runs.record(grading.FIXED_SEED, judge.VISIBLE_FAILED, 0)]
        result = judge.judge(solution, graded)
        assert not result["cells"]["t_tests"]["passed"] and result["flags"], outputs


def test_a_judge_part_that_could_not_judge_as_elsewhere_flags_the_cell(monkeypatch):
    """Issue 43: lesson 4's part B judged on a grading machine without torch_xla reads the answer's source instead of
    its XLA runs: the verdict stands, and the cell is flagged for a person (grading.JUDGED_WITHOUT_XLA)."""
    from helpers import xla

    monkeypatch.setattr(xla, "available", lambda: False)
    lesson = "04-accelerate-tpu"
    solution = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    graded = nbformat.from_dict(json.loads(json.dumps(solution)))
    cell = next(c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "spmd_tests")
    source = "def shard_batch(batch, mesh):\n    xs.mark_sharding(batch, mesh, ('data', None))\n    return batch\n"
    cell.outputs = [nbformat.from_dict(_collection({"source": source}, name="spmd_tests")),
                    hidden_runs.record(grading.FIXED_SEED, None, 0)]
    verdict = judge.judge(solution, graded)["cells"]["spmd_tests"]
    assert verdict["passed"] and verdict["flags"] == [f"spmd_tests: {grading.JUDGED_WITHOUT_XLA}"]
