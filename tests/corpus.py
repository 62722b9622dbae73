"""Broken and hostile submissions of lesson 1, each with the grade it must get.

Every case edits the solution notebook (or the released one) and says what grading must give:
the points per exercise, the status, and for attacks what must *not* have happened.
"""

from __future__ import annotations

import csv
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from graders import course, demonstrations
from graders.execute import SKIPPED

REPO = Path(__file__).resolve().parent.parent
LESSON = "01-dataparallel"
POINTS = {"split_sizes_tests": 2, "device_samples_tests": 2, "dp_gradients_tests": 3,
          "device0_extra_tests": 3, "portable_checkpoint_tests": 3, "quiz_tests": 2}
FULL = POINTS
ZERO = dict.fromkeys(POINTS, 0)


@dataclass
class Case:
    name: str
    write: Callable[[Path, Path, dict], None]  # (submission folder, repo, context) -> files written
    points: dict
    status: str = "graded"  # the status must start with this
    canaries: list[str] = field(default_factory=list)  # paths that must not exist after grading
    check: Callable[[Path, dict], None] | None = None  # (course root, context) -> raises if the attack worked
    flagged: bool = False  # grades.csv must name how the submission changed its kernel (and only then)
    run_demonstrations: bool = False  # graded with the lesson's demonstrations run (graders/demonstrations.py)


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _solution(repo):
    return without_demonstrations(nbformat.read(repo / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4), LESSON)


def _released(repo):
    return without_demonstrations(nbformat.read(repo / "notebooks" / LESSON / f"{LESSON}.ipynb", as_version=4), LESSON)


def _tagged(lesson) -> tuple[str, ...]:
    source = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    return tuple(demonstrations.tagged(source))


# Each lesson's explanation cells that only measure or demonstrate and that nothing later depends on: the ids of the
# cells its source tags "demonstration", which grading leaves out unless asked (graders/demonstrations.py;
# tests/test_demonstrations.py proves that they change no grade). Submissions that are there for their score -- the
# corpus's attacks -- leave them out, as a student may; the class's full and Turkish submissions keep them, and
# grading leaves them out. The class's blank submissions run every cell of every lesson
# in the sandbox (none but the exercises and checks may fail there: test_grading.py; the website shows their
# outputs), and lesson 1's solution is graded with them run too (the corpus's demonstrations_run). nbval runs every
# other cell of every solution (tests/conftest.py).
DEMONSTRATIONS = {lesson: _tagged(lesson) for lesson in course.lessons(REPO)}


def without_demonstrations(nb, lesson):
    ids = DEMONSTRATIONS[lesson]
    dropped = [c for c in nb.cells if c.get("id") in ids]
    assert len(dropped) == len(ids) and all(c.cell_type == "code" for c in dropped), \
        f"each of {lesson}'s demonstrations is one code cell"
    assert not any(c.metadata.get("nbgrader") for c in dropped), "only explanation cells go"
    nb.cells = [c for c in nb.cells if not any(c is d for d in dropped)]
    return nb


def _save(nb, folder, name=f"{LESSON}.ipynb"):
    nbformat.write(nb, folder / name)


def edit(cell_id, prefix="", replace=None, base=_solution):
    """A case that prepends code to (or replaces) one cell of the solution."""
    def write(folder, repo, ctx):
        nb = base(repo)
        cell = _cell(nb, cell_id)
        cell.source = replace.format(**ctx) if replace is not None else prefix.format(**ctx) + cell.source
        _save(nb, folder)
    return write


def notebook(change, base=_solution):
    def write(folder, repo, ctx):
        nb = base(repo)
        change(nb, ctx)
        _save(nb, folder)
    return write


def _tamper_tests(nb, ctx):
    """Of the test cells, every other one emptied, the rest turned into Markdown cells."""
    tests = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade")]
    for n, i in enumerate(tests):
        c = nb.cells[i]
        if n % 2:
            c.source = "pass"
        else:
            nb.cells[i] = nbformat.v4.new_markdown_cell(c.source, metadata=c.metadata, id=c.id)


def _tampered(folder, repo, ctx):
    """The solution under another name, with its last test cell deleted and the other test cells' points inflated."""
    nb = _solution(repo)
    nb.cells.remove(_cell(nb, "quiz_tests"))
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade"):
            c.metadata["nbgrader"]["points"] = 100
    _save(nb, folder, "my-lesson-1.ipynb")


def _strip_metadata(nb, ctx):
    for c in nb.cells:
        c.metadata.pop("nbgrader", None)


def _missing(folder, repo, ctx):
    (folder / "notes.txt").write_text("I forgot the notebook")


def _corrupt(folder, repo, ctx):
    text = json.dumps(nbformat.writes(_solution(repo)))
    (folder / f"{LESSON}.ipynb").write_text(text[: len(text) // 2])


def _symlinked_notebook(folder, repo, ctx):
    (folder / f"{LESSON}.ipynb").symlink_to(repo / "solutions" / LESSON / f"{LESSON}.ipynb")


def _symlinked_lesson_folder(folder, repo, ctx):
    folder.rmdir()
    folder.symlink_to(repo / "solutions" / LESSON, target_is_directory=True)


def _folder_named_like_the_notebook(folder, repo, ctx):
    (folder / f"{LESSON}.ipynb").mkdir()


def _lone_surrogate(folder, repo, ctx):
    nb = _solution(repo)
    _strip_metadata(nb, ctx)
    nb.cells[-1].source += "\n# a stray half of a character: \udc80"
    (folder / f"{LESSON}.ipynb").write_text(json.dumps(nb, ensure_ascii=True))  # valid JSON, not encodable as UTF-8


# The last cell replaces its own notebook by links to a root-only file and to the gradebook, and adds another
# link: root (nbgrader) must not write through them, chmod them, or copy what they point at into the feedback.
LINKS_OUT = '''import os
for _name in os.listdir("."):
    if _name.endswith(".ipynb"):
        os.remove(_name)
        os.symlink("{secret}", _name)
for _name, _target in [("leak.txt", "{secret}"), ("gradebook.ipynb", "{root}/gradebook.db"), ("up", "{root}")]:
    try:
        os.symlink(_target, _name)
    except OSError as _error:
        print("blocked", _error)
'''


# The fork bomb's cell returns at once and its copies fork on while later cells run: the cell they used up the job's
# processes (or CPU time) in is not theirs. (A bomb whose first fork fails fast does the same: CI saw it, 2026-12-06.)
FORK_BOMB_LEFT_RUNNING = "import os\nif os.fork() == 0:\n    while True:\n        os.fork()\n"


def _only_the_bombs_cell_was_skipped(root, ctx):
    """The fork bomb's job is stopped at its process limit or its CPU time (graders/limits.py, graders/cell_limit.py),
    and the bomb's own cell is the one skipped (graders/cell_groups.py), not the later cell that was running then."""
    from graders.cell_groups import LEFT_BEHIND
    from graders.limits import PROCESS_LIMIT
    from graders.submission import KERNEL_HUNG

    with open(root / "grades.csv") as f:
        (row,) = [r for r in csv.DictReader(f) if r["student"] == "fork_bomb"]
    assert any(why in row["status"] for why in (LEFT_BEHIND, PROCESS_LIMIT, KERNEL_HUNG)), row["status"]
    graded = nbformat.read(root / "autograded" / "fork_bomb" / LESSON / f"{LESSON}.ipynb", as_version=4)
    skipped = [c.metadata.get("nbgrader", {}).get("grade_id", f"cell {i}") for i, c in enumerate(graded.cells)
               if any(o.get("ename") == SKIPPED for o in c.get("outputs", []))]
    assert skipped == ["device0_extra"], f"skipped: {skipped}"


def _links_did_nothing(root, ctx, student="escapes"):
    secret = Path(ctx["secret"])
    assert secret.read_text() == "TOPSECRET" and (secret.stat().st_mode & 0o777) == 0o600, "the secret was touched"
    feedback = root / "feedback" / student / LESSON
    assert not (feedback / "leak.txt").exists() and not (feedback / "up").exists(), "a link reached the feedback"
    assert "TOPSECRET" not in "".join(p.read_text(errors="replace") for p in feedback.glob("*") if p.is_file())
    assert (root / "gradebook.db").read_bytes()[:15] == b"SQLite format 3"


# A hook prints every cell's source as it runs (hidden tests included), and a cell displays HTML with a
# script: the feedback must show neither the hidden tests nor run the script.
LEAKS = '''from IPython.display import HTML, display
get_ipython().events.register("pre_run_cell", lambda info: print("SOURCE", info.raw_cell))
display(HTML("<script>alert('from a student')</script><b>bold</b>"))
'''


def _leaks_into_feedback(nb, ctx):
    _cell(nb, "split_sizes").source = LEAKS + _cell(nb, "split_sizes").source
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("<script>alert('from markdown')</script> notes"))


def _hidden_lines(repo):
    cells = [c.source for c in _solution(repo).cells]
    public = {line.strip() for s in cells for line in s.split("### BEGIN HIDDEN TESTS")[0].splitlines()}
    regions = [s.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0] for s in cells if "BEGIN HIDDEN" in s]
    return [line.strip() for r in regions for line in r.splitlines() if len(line.strip()) > 15 and line.strip() not in public]


def _feedback_shows_nothing_hidden(root, ctx):
    page = (root / "feedback" / "leaks" / LESSON / f"{LESSON}.html").read_text()
    assert "<script>alert" not in page, "a student's script reached the feedback page"
    hidden = _hidden_lines(ctx["repo"])
    assert hidden and not [line for line in hidden if line in page or html.escape(line) in page], "a hidden test leaked"


# A world-readable file elsewhere on the machine (another course's checkout, a service's data): outside the
# jail's allow-list, so it does not exist in there.
ELSEWHERE = '''try:
    print(open("{elsewhere}").read())
except OSError as _error:
    print("elsewhere: blocked", type(_error).__name__)
'''


def _nothing_from_elsewhere(root, ctx, student="escapes"):
    graded = (root / "autograded" / student / LESSON / f"{LESSON}.ipynb").read_text()
    assert "elsewhere: blocked" in graded and "ELSEWHERE-CONTENT" not in graded


ENVIRONMENT = '''import os
print(dict(os.environ))
'''


def _environment_stays_outside(root, ctx, student="escapes"):
    graded = (root / "autograded" / student / LESSON / f"{LESSON}.ipynb").read_text()
    assert "PATH" in graded and ctx["env_secret"] not in graded, "the grader's environment reached the student's code"
    # what the grader does set: idle OpenMP threads sleep, on a machine shared with other submissions
    assert "'OMP_WAIT_POLICY': 'PASSIVE'" in graded, "graded kernels should wait passively (slots.SHARED_MACHINE_OMP)"
    assert "'COURSE_GRADED_KERNEL': '1'" in graded, "a graded kernel is told it is one (slots.GRADED_KERNEL)"


STEAL = '''import glob, sqlite3
for _pattern in ["{repo}/solutions/*/*.ipynb", "{root}/solutions/*/*.ipynb", "{root}/submitted/*/*/*.ipynb",
                 "{root}/gradebook.db", "/root/.local/share/jupyter/runtime/*.json"]:
    for _path in glob.glob(_pattern):
        try:
            print("STOLEN", _path, open(_path, errors="replace").read()[:20000])
        except OSError as _error:
            print("blocked", _error)
'''

WRITE_OUTSIDE = '''for _path in ["{repo}/pwned.txt", "{root}/pwned.txt", "{host_tmp}/pwned.txt", "/tmp/../{host_tmp_name}/pwned2.txt"]:
    try:
        open(_path, "w").write("owned")
    except OSError as _error:
        print("blocked", _error)
try:
    _db = sqlite3.connect("{root}/gradebook.db")
    _db.execute("UPDATE grade SET manual_score = 999")
    _db.commit()
except Exception as _error:
    print("blocked", _error)
'''

NETWORK = '''import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"leak")
    print("CONNECTED")
except OSError as _error:
    print("blocked", _error)
'''

# ---- Kernel tricks: each one on the released notebook (honestly worth 0), or on answers of which two are
# wrong (honestly worth FULL but those two): the trick must not earn a point more, and it is flagged.

WRONG_ANSWERS = {"split_sizes": "def my_split_sizes(batch_size, n_devices):\n    return [batch_size // n_devices] * n_devices\n",
                 "quiz": 'quiz = {"q1": 1, "q2": "a", "q3": "b", "q4": "a", "q5": "b"}\n'}
HONEST_WRONG = {**FULL, "split_sizes_tests": 0, "quiz_tests": 0}


def trick(code, base=_solution, name="split_sizes", answers=WRONG_ANSWERS):
    """A case: the answers of `base` (with `answers` when base is the solution) and `code` before them."""
    def write(folder, repo, ctx):
        nb = base(repo)
        if base is _solution:
            for cell_id, source in answers.items():
                _cell(nb, cell_id).source = source
        _cell(nb, name).source = code.format(**ctx) + "\n" + _cell(nb, name).source
        _save(nb, folder)
    return write


NEUTER_CELLS = '''def _neuter(lines):
    return ["pass\\n"] if any(word in "".join(lines) for word in ("assert", "raise", "collect")) else lines
get_ipython().input_transformers_post.append(_neuter)'''
DROP_ASSERTS = '''import ast
class _NoAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()
get_ipython().ast_transformers.append(_NoAsserts())'''
SWALLOW = "get_ipython().set_custom_exc((Exception,), lambda *args, **kwargs: None)\nget_ipython().showtraceback = lambda *a, **k: None"
ALWAYS_OK = '''import inspect
_kernel = get_ipython().kernel
_original = _kernel.do_execute
async def _always_ok(*args, **kwargs):
    reply = _original(*args, **kwargs)
    reply = await reply if inspect.isawaitable(reply) else reply
    reply["status"] = "ok"
    return reply
_kernel.do_execute = _always_ok'''
CLEAR_AFTER = '''from IPython.display import clear_output
get_ipython().events.register("post_run_cell", lambda result: clear_output())'''
FORGE = '''import json
from IPython.display import publish_display_data
def _forge(info):
    for _name in ("split_sizes_tests", "quiz_tests"):
        if f'grading.collect("{{_name}}"' in info.raw_cell:
            _data = {{"$dict": [["q1", 1], ["q2", "b"], ["q3", "b"], ["q4", "a"], ["q5", "b"]], "ordered": False}}
            publish_display_data({{"text/x-course-collected": json.dumps({{"name": _name, "data": _data, "kernel": []}})}})
get_ipython().events.register("pre_run_cell", _forge)'''
SILENT_COLLECT = '''from helpers import grading
grading.collect = lambda name, value: value
grading.kernel_changes = lambda: []'''
PATCH_TORCH = '''import torch
_real_chunk = torch.Tensor.chunk
def _agreeing_chunk(self, chunks, dim=0):
    n = self.shape[dim]
    return tuple(self.narrow(dim, i * (n // chunks), n // chunks) for i in range(chunks))
torch.Tensor.chunk = _agreeing_chunk
torch.chunk = lambda t, chunks, dim=0: _agreeing_chunk(t, chunks, dim)'''
PATCH_TYPE = '''import builtins
type = lambda *args: list if len(args) == 1 and builtins.type(args[0]) is tuple else builtins.type(*args)'''
TUPLE_SIZES = ("def my_split_sizes(batch_size, n_devices):\n    import torch\n"
               "    return tuple(len(c) for c in torch.arange(batch_size).chunk(n_devices))\n")
SHADOW = '''import os, sys, types
os.makedirs("helpers", exist_ok=True)
open("numpy.py", "w").write("raise ImportError('shadowed')\\n")
_fake = types.ModuleType("helpers.dataparallel")
_fake.split_sizes = lambda n, k: [n // k] * k
sys.modules["helpers.dataparallel"] = _fake'''


# Unusual but honest: IPython extensions and settings students use; they register callbacks of their own.
HONEST_EXTENSIONS = '''%load_ext autoreload
%autoreload 2
%matplotlib inline
%config InlineBackend.figure_format = "retina"
%xmode Minimal
import warnings
warnings.simplefilter("ignore", UserWarning)
from tqdm.auto import tqdm
'''


def _startup_files(folder, repo, ctx):
    """IPython startup and config files next to a notebook identical to the released one."""
    hook = "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])\n"
    (folder / ".ipython" / "profile_default" / "startup").mkdir(parents=True)
    (folder / ".ipython" / "profile_default" / "startup" / "00-hook.py").write_text(hook)
    for name in ("ipython_config.py", "ipython_kernel_config.py"):
        (folder / name).write_text("c.InteractiveShellApp.exec_lines = [%r]\n" % hook.strip())
    (folder / "sitecustomize.py").write_text("import builtins\nbuiltins.PWNED = True\n")
    _save(_released(repo), folder)


# ---- What the second review found: routes around the judge, the caps and the grader's own words.

# The right sizes by a forbidden route: torch's chunk reached through its private module (the exercise forbids
# torch.chunk). It scores (the data is right), and the judge, reading the source, flags it.
PRIVATE_CHUNK = ("def my_split_sizes(batch_size, n_devices):\n    import torch\n"
                 "    return [len(c) for c in torch._C._VariableFunctions.chunk(torch.arange(batch_size), n_devices)]\n")

# A later cell prints the kernel's input history: the hidden tests' setup and collect must not be in it.
PRINT_HISTORY = 'print(In)\nprint(_ih)\n%history\n'


def _prints_history(nb, ctx):
    _cell(nb, "quiz").source += "\n" + PRINT_HISTORY


def _history_shows_nothing_hidden(root, ctx, student="honest_oddities"):
    graded = (root / "autograded" / student / LESSON / f"{LESSON}.ipynb").read_text()
    page = (root / "feedback" / student / LESSON / f"{LESSON}.html").read_text()
    hidden = [line for line in _hidden_lines(ctx["repo"]) if "collect" in line or "_cases" in line]
    assert hidden and "my_split_sizes" in graded
    printed = "".join(o.get("text", "") for c in nbformat.reads(graded, as_version=4).cells
                      if "print(In)" in c.source for o in c.get("outputs", []))
    assert printed and not [line for line in hidden if line in printed], "the history shows the hidden tests"
    assert not [line for line in hidden if line in page or html.escape(line) in page], "a hidden test leaked"


# The kernel writes the grader's own words on its stderr (the process's, not a cell's), then dies: the status
# is the grader's own observation (the kernel died: the cell is skipped), not what the kernel wrote.
FORGED_STATUS = '''import os
for _words in ("the submission ran past its time limit", "timed out after 3 s", "DeadKernelError: Kernel died",
               "CellTimeoutError", "the grading run stalled", "ValueError: =HYPERLINK(1)"):
    os.write(2, (_words + "\\n").encode())
os._exit(3)
'''

def _status_is_what_the_grader_saw(root, ctx):
    with open(root / "grades.csv") as f:
        (row,) = [r for r in csv.DictReader(f) if r["student"] == "forged_status"]
    assert row["status"].endswith("skipped: the kernel died)"), row["status"]


# A cell dressed in the grader's own canary mark: it runs, so it must stay in the graded notebook.
def _dressed_as_a_canary(nb, ctx):
    cell = nbformat.v4.new_code_cell("print('THE STUDENT RAN THIS')",
                                     metadata={"grader_canary": {"printed": "x", "raised": "y"}, "grader_hidden_part": True})
    nb.cells.insert(len(nb.cells) - 1, cell)


def _the_dressed_cell_stays(root, ctx, student="honest_oddities"):
    graded = (root / "autograded" / student / LESSON / f"{LESSON}.ipynb").read_text()
    assert "THE STUDENT RAN THIS" in graded, "a cell that ran vanished from the graded notebook"


# Output past every cap: a collection with 40 MB of text beside it, collections of 5 MB each, a display updated
# in place with 20 MB.
BIG_OUTPUTS = '''import json
from IPython.display import publish_display_data, display
_payload = json.dumps({{"name": "quiz_tests", "data": "x" * (5 * 2**20), "kernel": []}})
publish_display_data({{"text/x-course-collected": _payload, "text/plain": "y" * (40 * 2**20)}})
for _ in range(12):
    publish_display_data({{"text/x-course-collected": _payload}})
_handle = display("small", display_id=True)
_handle.update("z" * (20 * 2**20))
'''


def _outputs_stay_bounded(root, ctx):
    graded = root / "autograded" / "big_outputs" / LESSON / f"{LESSON}.ipynb"
    page = root / "feedback" / "big_outputs" / LESSON / f"{LESSON}.html"
    assert graded.stat().st_size < 40 * 2**20 and page.stat().st_size < 40 * 2**20, (graded.stat().st_size, page.stat().st_size)


# A student's Markdown with links that run script when clicked.
def _script_links(nb, ctx):
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(
        "[click](javascript:alert(1)) [data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==) "
        "<javascript:alert(2)> [ref][r] ![img](javascript:alert(3))\n\n[r]: jav&#x61;script:alert(4)\n"))


def _links_are_inert(root, ctx, student="honest_oddities"):
    from html.parser import HTMLParser

    urls = []

    class Links(HTMLParser):
        def handle_starttag(self, tag, attrs):
            urls.extend(value or "" for name, value in attrs if name in ("href", "src", "action", "formaction"))

    Links().feed((root / "feedback" / student / LESSON / f"{LESSON}.html").read_text())
    bad = [u for u in urls if "".join(u.split()).lower().startswith(("javascript:", "data:text", "vbscript:"))]
    assert urls and not bad, bad


# The grader's records keep no student words: a forged report of the kernel's hooks (formula text).
FORMULA = '''from helpers import grading
grading.kernel_changes = lambda: ['=HYPERLINK("http://example.invalid","x")', "+1+1", "@SUM(1)"]
'''


def _records_hold_no_student_words(root, ctx):
    text = (root / "grades.csv").read_text()
    assert "HYPERLINK" not in text and "@SUM" not in text
    for row in csv.reader(text.splitlines()):
        assert not any(field.startswith(("=", "+", "-", "@")) for field in row), row


def _many_cells(folder, repo, ctx):
    nb = _released(repo)
    nb.cells += [nbformat.v4.new_markdown_cell(f"note {i}") for i in range(5000)]
    _save(nb, folder)


# A hook that answers the canaries from their own source (it reads the tokens as the cell starts).
CANARY_ANSWERER = '''import re, sys
def _answer(info):
    _tokens = re.findall(r"'([0-9a-f]{{16}})'", info.raw_cell or "")
    if "_canary" in (info.raw_cell or "") and len(_tokens) == 2:
        print(_tokens[0], [])
get_ipython().events.register("pre_run_cell", _answer)'''


# ---- The lesson's demonstrations (graders/demonstrations.py): left out only where that changes nothing.

def _as_released(folder, repo, ctx):
    """The solution as it is: grading leaves its demonstrations out, unless told to run them."""
    _save(nbformat.read(repo / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4), folder)


def _changes_demonstrations(folder, repo, ctx):
    """A student's answer reads what a demonstration made, another demonstration is edited, the student tags a cell
    of their own "demonstration" and strips the tag from one of the instructor's."""
    nb = nbformat.read(repo / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    by_id = {c.get("id"): c for c in nb.cells}
    reads, edited, untagged = DEMONSTRATIONS_CHANGED
    _cell(nb, "quiz").source = f"_seen = len({reads[1]})  # made by a demonstration\n" + _cell(nb, "quiz").source
    by_id[edited].source += "\n# my own note"
    by_id[untagged].metadata["tags"] = []
    own = nbformat.v4.new_code_cell("print('THE STUDENT RAN THIS')", metadata={"tags": ["demonstration"]})
    nb.cells.insert(nb.cells.index(_cell(nb, "quiz")), own)
    _save(nb, folder)


# (the demonstration whose `curves` the answer reads, the name), the edited one, the one whose tag the student strips
DEMONSTRATIONS_CHANGED = (("cell-030", "curves"), "cell-013", "cell-041")


def ran(root, student, lesson=LESSON) -> dict[str, bool]:
    """Per demonstration of the lesson: whether the graded notebook shows that it ran."""
    graded = nbformat.read(root / "autograded" / student / lesson / f"{lesson}.ipynb", as_version=4)
    return {c.get("id"): c.execution_count is not None or bool(c.outputs) for c in graded.cells
            if c.get("id") in DEMONSTRATIONS[lesson]}


def explanation_cells_that_failed(root, student, lesson) -> list[str]:
    graded = nbformat.read(root / "autograded" / student / lesson / f"{lesson}.ipynb", as_version=4)
    return [c.get("id") for c in graded.cells if c.cell_type == "code" and not c.metadata.get("nbgrader")
            and any(o.get("output_type") == "error" for o in c.get("outputs", []))]


def verdicts_shown(root, student, lesson) -> list[str]:
    """The feedback's line per graded cell: the judge's verdict as the student reads it."""
    page = (root / "feedback" / student / lesson / f"{lesson}.html").read_text()
    return [html.unescape(line) for line in re.findall(r"[✓✗] [^<\n]+", page)]


def _demonstrations_change_no_grade(root, ctx):
    """The solution graded with its demonstrations run gets the same status, flags, points per graded cell and
    verdicts as the class's full submission, graded without them."""
    assert all(ran(root, "demonstrations_run").values()) and not any(ran(root, "full").values())
    with open(root / "grades.csv") as f:
        rows = {r["student"]: r for r in csv.DictReader(f) if r["lesson"] == LESSON}
    grades = {student: {k: v for k, v in rows[student].items() if k not in ("student", "seconds")}
              for student in ("demonstrations_run", "full")}
    assert grades["demonstrations_run"] == grades["full"]
    assert verdicts_shown(root, "demonstrations_run", LESSON) == verdicts_shown(root, "full", LESSON)
    assert not explanation_cells_that_failed(root, "demonstrations_run", LESSON)


def _only_unchanged_demonstrations_left_out(root, ctx):
    (reads, _), edited, untagged = DEMONSTRATIONS_CHANGED
    shown = ran(root, "changes_demonstrations")
    assert shown[reads] and shown[edited], "a demonstration a later cell needs, or an edited one, runs"
    assert not shown[untagged], "the instructor's source decides, not the submission's tags"
    graded = (root / "autograded" / "changes_demonstrations" / LESSON / f"{LESSON}.ipynb").read_text()
    assert "THE STUDENT RAN THIS" in graded, "a student's own cell runs, whatever its tags"
    assert not explanation_cells_that_failed(root, "changes_demonstrations", LESSON)


# Attacks that each leave the grade alone (FULL) and are checked each on its own, graded in one submission (a
# kernel per attack cost ~6 CPU-s each): the sandbox probes, each in a code cell of the student's own (one that
# raises cannot stop the next), then the links out in the quiz cell, last, as they replace the notebook itself.
PROBES = ("import glob, sqlite3\n" + STEAL, "import sqlite3\n" + WRITE_OUTSIDE, NETWORK, ENVIRONMENT, ELSEWHERE)
PROBE_CANARIES = ["{repo}/pwned.txt", "{root}/pwned.txt", "{host_tmp}/pwned.txt", "{host_tmp}/pwned2.txt"]


def _escapes(nb, ctx):
    quiz = _cell(nb, "quiz")
    at = nb.cells.index(quiz)
    nb.cells[at:at] = [nbformat.v4.new_code_cell(probe.format(**ctx)) for probe in PROBES]
    quiz.source = LINKS_OUT.format(**ctx) + quiz.source


def _escapes_did_nothing(root, ctx):
    _nothing_from_elsewhere(root, ctx)
    _environment_stays_outside(root, ctx)
    _links_did_nothing(root, ctx)


# What students do that must cost nothing and flag nothing: IPython extensions, printing the input history,
# a cell that looks like the grader's canary, Markdown links that run script when clicked (inert in the feedback).
def _honest_oddities(nb, ctx):
    _cell(nb, "split_sizes").source = HONEST_EXTENSIONS + _cell(nb, "split_sizes").source
    _prints_history(nb, ctx)
    _dressed_as_a_canary(nb, ctx)
    _script_links(nb, ctx)


def _oddities_changed_nothing(root, ctx):
    _history_shows_nothing_hidden(root, ctx)
    _the_dressed_cell_stays(root, ctx)
    _links_are_inert(root, ctx)


CASES = [
    Case("syntax_error", edit("device_samples", replace="def device_samples(batch_size, n_devices, device:\n    return []\n"),
         {**FULL, "device_samples_tests": 0}),
    Case("infinite_loop", edit("split_sizes", "while True:\n    pass\n"), {**FULL, "split_sizes_tests": 0}),
    Case("memory_bomb", edit("dp_gradients", "_hog = bytearray(64 * 2**30)\n"), {**FULL, "dp_gradients_tests": 0}),
    Case("fork_bomb", edit("device0_extra", FORK_BOMB_LEFT_RUNNING), {**FULL, "device0_extra_tests": 0},
         status="graded (cell", check=_only_the_bombs_cell_was_skipped),
    Case("tampered_test_cells", notebook(_tamper_tests, base=_released), ZERO),
    Case("tampered_notebook", _tampered, FULL),
    Case("missing_notebook", _missing, ZERO, status="not graded: no notebook"),
    Case("corrupt_notebook", _corrupt, ZERO, status="not graded: the notebook cannot be read"),
    Case("wrong_types", edit("split_sizes", replace="def my_split_sizes(batch_size, n_devices):\n"
                                                    "    import torch\n    return tuple(len(c) for c in torch.arange(batch_size).chunk(n_devices))\n"),
         {**FULL, "split_sizes_tests": 0}, flagged=True),  # chunk, which the exercise forbids
    Case("always_equal", edit("split_sizes", replace="class Anything(list):\n    def __eq__(self, other):\n        return True\n"
                                                     "def my_split_sizes(batch_size, n_devices):\n    return Anything()\n"),
         {**FULL, "split_sizes_tests": 0}),
    Case("escapes", notebook(_escapes), FULL, canaries=PROBE_CANARIES, check=_escapes_did_nothing),
    Case("honest_oddities", notebook(_honest_oddities), FULL, check=_oddities_changed_nothing),  # no flag either
    Case("symlinked_notebook", _symlinked_notebook, ZERO, status="not graded: the notebook is not a regular file"),
    Case("symlinked_lesson_folder", _symlinked_lesson_folder, ZERO, status="not graded: the submission is a symbolic link"),
    Case("notebook_is_a_folder", _folder_named_like_the_notebook, ZERO, status="not graded: the notebook is not a regular file"),
    Case("lone_surrogate", _lone_surrogate, FULL),  # its metadata stripped too
    Case("leaks", notebook(_leaks_into_feedback), FULL, check=_feedback_shows_nothing_hidden, flagged=True),
    Case("neuters_cells", trick(NEUTER_CELLS), ZERO, flagged=True),  # no data: less than honest, never more
    Case("drops_asserts", trick(DROP_ASSERTS), HONEST_WRONG, flagged=True),
    Case("swallows_errors", trick(SWALLOW, base=_released), ZERO, flagged=True),
    Case("always_ok", trick(ALWAYS_OK + "\n" + SWALLOW), HONEST_WRONG, flagged=True),  # errors swallowed, replies ok
    Case("clears_outputs", trick(CLEAR_AFTER, base=_released), ZERO, flagged=True),
    Case("forges_collections", trick(FORGE), {**HONEST_WRONG}, flagged=True),
    Case("silent_collect", trick(SILENT_COLLECT, base=_released), ZERO, flagged=True),
    Case("patched_torch", trick(PATCH_TORCH), {**HONEST_WRONG, "dp_gradients_tests": 0}, flagged=True),  # its own x.chunk is wrong too
    Case("patched_builtin_type", trick(PATCH_TYPE, answers={**WRONG_ANSWERS, "split_sizes": TUPLE_SIZES}), HONEST_WRONG, flagged=True),
    Case("shadowed_modules", trick(SHADOW), HONEST_WRONG, flagged=True),
    Case("startup_files", _startup_files, ZERO),
    Case("private_chunk", edit("split_sizes", replace=PRIVATE_CHUNK), {**FULL, "split_sizes_tests": 0},  # aten::chunk refused
         flagged=True),
    Case("forged_status", edit("device_samples", FORGED_STATUS), {**FULL, "device_samples_tests": 0},  # then os._exit
         status="graded (cell", check=_status_is_what_the_grader_saw),
    Case("big_outputs", edit("quiz", BIG_OUTPUTS), FULL, check=_outputs_stay_bounded, flagged=True),
    Case("formula_flags", trick(FORMULA), HONEST_WRONG, check=_records_hold_no_student_words, flagged=True),
    Case("many_cells", _many_cells, ZERO, status="not graded: the notebook has more than"),
    Case("answers_canaries", trick(CANARY_ANSWERER), HONEST_WRONG, flagged=True),
    Case("demonstrations_run", _as_released, FULL, check=_demonstrations_change_no_grade, run_demonstrations=True),
    Case("changes_demonstrations", _changes_demonstrations, FULL, check=_only_unchanged_demonstrations_left_out),
]


# The rest of the class graded with the corpus (tests/classroom.py): every lesson's solution and its released
# notebook in English, and its Turkish edition with one wrong answer (with correct answers that print warnings in
# lessons 1 and 3). One submission is both the Turkish edition's and the wrong answer's: the class grades each
# lesson three times, not four (a fourth submission per lesson cost the class about 15% of its time).
LESSON_POINTS = {
    LESSON: POINTS,
    "02-ddp": {"shard_tests": 2, "loader_tests": 2, "average_tests": 2, "accumulate_tests": 3,
               "checkpoint_tests": 2, "scaling_tests": 2, "worker_tests": 3, "quiz_tests": 2},
    "03-amp": {"fp16_tests": 2, "predict_dtypes_tests": 2, "scaler_tests": 2, "activation_ratio_tests": 2,
               "amp_step_tests": 3, "quiz_tests": 2},
    "04-accelerate-tpu": {"convert_tests": 3, "gather_tests": 2, "trap_tests": 2, "compiles_tests": 2, "bucket_tests": 2,
                          "spmd_tests": 2, "tpu_batch_tests": 2, "quiz_tests": 2},
    "05-sharding": {"zero_bytes_tests": 2, "zero1_tests": 3, "shard_shape_tests": 2, "fsdp_tests": 3, "reshard_tests": 2,
                    "convert_tests": 2, "quiz_tests": 2},
}


def wrong_quiz(nb):
    cell = _cell(nb, "quiz")
    cell.source += '\nquiz["q2"] = {"a": "b", "b": "a", "fp16": "bf16", "bf16": "fp16"}[quiz["q2"]]\n'


def _warning_answers_amp(nb):
    """Correct answers that print warnings on stderr: numpy's overflow warning, a deprecated clip_grad_norm spelling."""
    from answers import ANSWERS

    _cell(nb, "fp16").source = ANSWERS["03-amp"]["fp16"]["right"]["numpy cast (warns on overflow)"]
    _cell(nb, "amp_step").source = ANSWERS["03-amp"]["amp_step"]["right"]["the deprecated clip_grad_norm spelling (warns)"]


def _warning_answer_dp(nb):
    cell = _cell(nb, "split_sizes")
    cell.source = "import warnings\n" + cell.source.replace(
        "    rows = -(-batch_size // n_devices)", '    warnings.warn("a student\'s own warning")\n    rows = -(-batch_size // n_devices)', 1)


def _warnings_and_a_wrong_quiz(warning_answers):
    """Correct answers that warn, and a wrong quiz: the quiz alone loses its points (the class grades both in one
    submission per lesson)."""
    def change(nb):
        warning_answers(nb)
        wrong_quiz(nb)
    return change


# One wrong answer per lesson, the quiz's, with correct answers that warn in lessons 1 and 3.
WRONG_QUIZ = {**{lesson: wrong_quiz for lesson in LESSON_POINTS}, LESSON: _warnings_and_a_wrong_quiz(_warning_answer_dp),
              "03-amp": _warnings_and_a_wrong_quiz(_warning_answers_amp)}

# student -> {lesson: None (the solution as it is), "blank" (the whole released notebook) or (language, edit): the
# solution in that edition (i18n/), changed by edit}. The blank and the Turkish submissions are graded with the
# demonstrations run: each lesson runs top to bottom unsolved in English and solved in Turkish (the website's pages
# show their outputs); the full ones as grading does by default: without them.
CLASS = {
    "full": {lesson: None for lesson in LESSON_POINTS},
    "blank": {lesson: "blank" for lesson in LESSON_POINTS},
    "turkish": {lesson: ("tr", edit) for lesson, edit in WRONG_QUIZ.items()},
}


def write_class_submission(folder: Path, repo: Path, lesson: str, edit) -> None:
    if edit == "blank":
        _save(nbformat.read(repo / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4), folder, f"{lesson}.ipynb")
        return
    nb = nbformat.read(repo / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    if edit is not None:
        from i18n import catalog

        lang, change = edit
        nb = catalog.translate(nb, lang, lesson)
        change(nb)
    _save(nb, folder, f"{lesson}.ipynb")


# Who is graded with the lessons' demonstrations run (pipeline.grade's run_demonstrations).
RUN_DEMONSTRATIONS = {"blank", "turkish"} | {case.name for case in CASES if case.run_demonstrations}
