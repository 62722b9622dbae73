import functools
import gc
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # graders/ is imported by the grading tests
os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(1)
# The stop-button tests interrupt a process with SIGINT, as Jupyter does its kernel (whose SIGINT raises
# KeyboardInterrupt). A test run started in the background by a script (`make test &`) inherits SIGINT ignored,
# and so would every process it starts: they would wait out their timeouts instead.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Tests that read the session's graded class (tests/classroom.py): with pytest-xdist they run on one worker, so
# that the class is graded once, while the other workers run the rest. A test that reads it from elsewhere would grade
# it again on its own worker (it did: 420 s, 2026-12-05): collection refuses that (pytest_collection_modifyitems).
CLASS_TESTS = ("tests/test_grading.py", "tests/test_corpus.py", "tests/test_cluster.py", "tests/test_site.py",
               "tests/test_runtimes.py::test_lesson_4_part_b_runs_on_eight_xla_devices",
               "tests/test_turkish_outputs.py::test_a_turkish_lesson_run_shows_no_english_sentence")


# Tests that open no port on this machine's network but the ones a launch's ranks or a kernel take (XLA:CPU runs,
# answers judged in this process or with launches, nbval's and nbclient's kernels, the judge's, nbgrader's and the warm
# kernel's servers), in small scopes that any worker takes once its own is nearly done, heaviest first. A kernel takes
# its ports from the system's ephemeral range and a launch from below it (helpers.launch.free_port), so the two never
# race for one; two launches may, and the second then forms its group on another port. With three workers on two
# cores, the third starts on these while one grades the class and one runs everything else in order (with two,
# "everything else" was the longest stream, ~650 s of a run's ~690, 2026-12-02: these make up half of it).
ANYWHERE = ("tests/test_xla.py", "tests/test_answers.py::test_answer_is_judged_right",
            "tests/test_setup_cell.py", "tests/test_notebooks.py",  # setup cells in fresh interpreters; release checks
            "tests/test_runtimes.py::test_lesson_4_part_b_runs_on_one_xla_device",  # its kernel on unix sockets
            "tests/test_jail.py", "tests/test_account.py",  # kernels in jails, each with a network of its own
            "solutions", "tests/test_degenerate.py", "tests/test_backend_behaviour.py", "tests/test_tracebacks.py",
            "tests/test_forkserver.py", "tests/test_warm_up.py", "tests/test_launch.py", "tests/test_ddp.py",
            "tests/test_amp.py", "tests/test_sharding.py",
            "tests/test_exchange.py", "tests/test_selfcheck.py",  # grading in the sandbox: kernels on unix sockets
            "tests/test_hidden_grading.py", "tests/test_hidden_seeds.py", "tests/test_refusal.py",
            "tests/test_time_limits.py")  # grading in the sandbox and out of it (its kernels' ports: ephemeral ones)
# Lightning's DDP on gloo (its port from the ephemeral range, taken by a bind to port 0 long before its rank 0 listens)
ON_THE_NETWORK = ("tests/test_xla.py::test_lightning_inserts_a_distributed_sampler",)
# Heaviest first; but a test that mostly waits (a wall-clock backstop: 2 x 30 s) first of all, while the other workers
# keep both cores busy: scheduled last, it left them idle for the last two minutes of a run (2026-12-06).
HEAVIEST_FIRST = ("tests/test_time_limits.py", "tests/test_runtimes.py", "04-accelerate-tpu", "tests/test_xla.py",
                  "tests/test_setup_cell.py", "02-ddp", "05-sharding", "tests/test_degenerate.py", "tests/test_backend_behaviour.py",
                  "03-amp", "tests/test_sharding.py", "tests/test_tracebacks.py", "tests/test_forkserver.py",
                  "tests/test_warm_up.py", "tests/test_launch.py", "tests/test_ddp.py", "01-dataparallel")
CLASS, ELSE = "the graded class", "everything else"


def _matches(nodeid: str, tests) -> bool:
    return any(nodeid == t or nodeid.startswith((t + "::", t + "[", t + "/")) for t in tests)


def _answer_case(nodeid: str) -> tuple[str, str] | None:
    """A test_answers.py case's (lesson, exercise)."""
    from graders import course

    case = nodeid.partition("[")[2]
    lesson = next((name for name in course.lessons(REPO) if case.startswith(name + "-")), None)
    return (lesson, case[len(lesson) + 1:].split("-")[0]) if lesson else None


@functools.lru_cache(maxsize=None)
def _scope(nodeid: str) -> str:
    if _matches(nodeid, CLASS_TESTS):
        return CLASS
    if not _matches(nodeid, ANYWHERE) or _matches(nodeid, ON_THE_NETWORK):
        return ELSE
    if "test_answers" in nodeid:
        case = _answer_case(nodeid)
        return ELSE if case is None else "anywhere: {} {}".format(*case)
    return "anywhere: " + nodeid.split("::")[0]


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs on three pytest-xdist workers: one grades the class (tests/classroom.py: its kernels run in
    the sandbox, in network namespaces of their own) and runs the tests that read it; one runs everything else in
    order, so that no two of those tests ever start processes on this machine's network at once (torchrun and
    Accelerate's launcher on their default ports, the README's multi-node commands on theirs, Dask, JupyterLab); the
    third, and the other two once their own scope is nearly done, take the ANYWHERE scopes, heaviest first, one at a
    time. (xdist's `--dist loadgroup` could not express this with pytest 9.2 anyway: its group marks are lost with
    pytest's structured node ids, pytest-xdist #1386.)"""
    from xdist.scheduler import LoadScopeScheduling

    def weight(scope: str) -> int:
        return next((i for i, name in enumerate(HEAVIEST_FIRST) if name in scope), len(HEAVIEST_FIRST))

    class CourseScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            first = None
            if not self.assigned_work.get(node):  # a worker's first scope: the class, or everything else
                first = next((s for s in (CLASS, ELSE) if s in self.workqueue), None)
            if first is None:
                first = min((s for s in self.workqueue if s.startswith("anywhere: ")), key=weight, default=None)
            if first is not None:
                self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return CourseScheduling(config, log)


# nbval runs every cell of every solution but its demonstrations (graders/demonstrations.py: the cells a lesson's source
# tags, which nothing after them reads and grading leaves out unless asked): the graded class runs them, in the
# sandbox, in every lesson's released notebook (its blank submissions: none may fail there, test_grading.py; the
# website shows their outputs) and in lesson 1's solution (the corpus's demonstrations_run). Run in nbval as well,
# they took 158 of its 210 s (2026-12-02). `pytest solutions/...` without this file (make test-versions) runs them.
def pytest_collection_modifyitems(config, items):
    from nbval.plugin import IPyNbCell

    from graders import demonstrations

    strays = [item.nodeid for item in items
              if "graded_class" in getattr(item, "fixturenames", ()) and _scope(item.nodeid) != CLASS]
    if strays:
        raise pytest.UsageError("these tests read the graded class but are not in conftest.CLASS_TESTS (their worker "
                                "would grade the class again): " + ", ".join(strays))
    tagged, kept, left_out = {}, [], []
    for item in items:
        if isinstance(item, IPyNbCell):
            path = str(item.path)
            if path not in tagged:
                import nbformat

                tagged[path] = set(demonstrations.tagged(nbformat.read(path, as_version=4)))
            if item.cell.get("id") in tagged[path]:
                left_out.append(item)
                continue
        kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


# The judge's references (torch's own results, helpers.grading.reference), computed once per test session and kept
# in one folder, as a grading run keeps them for its submissions: nbval's kernels (a solution's hidden tests run
# whole there), tests/test_answers.py and tests/test_degenerate.py judge the same cells on the same inputs (a key
# names every input). The controller makes it before the xdist workers start, so they inherit it. The graded class
# does not use it: its judges keep their own (graders/slots.py), as any grading run does.
JUDGE_MEMO = "GRADER_JUDGE_MEMO"


def pytest_configure(config):
    if not hasattr(config, "workerinput") and not os.environ.get(JUDGE_MEMO):
        import tempfile

        config._judge_memo = os.environ[JUDGE_MEMO] = tempfile.mkdtemp(prefix="judge-memo-")


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Collection imports torch, torch_xla, nbgrader...: with the garbage collector off, then frozen, as a fork server
    imports (helpers.fresh.import_for_forks), so that the tests collect only their own garbage, never those objects."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.freeze()


def pytest_unconfigure(config):
    if getattr(config, "_judge_memo", None):
        import shutil

        shutil.rmtree(config._judge_memo, ignore_errors=True)
        os.environ.pop(JUDGE_MEMO, None)


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


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory):
    """The class of tests/classroom.py, graded once on a Dask LocalCluster with a worker killed mid-way."""
    from classroom import grade_the_class

    graded = grade_the_class(tmp_path_factory.mktemp("class"))
    yield graded
    graded.close()


# `make test PYTEST_ARGS=--module-times=FILE` writes each test file's seconds (setup, call and teardown summed) and
# the worker that ran it: what the split between the xdist workers above is balanced on.
def pytest_addoption(parser):
    parser.addoption("--module-times", default=None, help="write each test file's seconds to this JSON file")
    parser.addoption("--launching-seeds", type=int, default=0,
                     help="draw the hidden inputs of the exercises that launch processes on this many seeds "
                          "(tests/test_hidden_seeds.py; make test-seeds)")


_module_times: dict = {}


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::")[0]
    entry = _module_times.setdefault(module, {"seconds": 0.0, "worker": getattr(report, "node", None) and report.node.gateway.id,
                                              "start": report.start, "stop": report.stop})
    entry["seconds"] += report.duration
    entry["start"], entry["stop"] = min(entry["start"], report.start), max(entry["stop"], report.stop)


def pytest_sessionfinish(session):
    path = session.config.getoption("--module-times")
    if path and not hasattr(session.config, "workerinput"):  # the controller, which saw every report
        import json

        with open(path, "w") as f:
            json.dump(dict(sorted(_module_times.items(), key=lambda kv: -kv[1]["seconds"])), f, indent=1)
