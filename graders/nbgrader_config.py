"""nbgrader configuration of the course.

The course root is the repository root: `solutions/` holds the instructor sources (one assignment
folder per lesson), `notebooks/` the released student versions. The gradebook (gradebook.db) and
submitted/, autograded/, feedback/ live at the root too and stay out of git.

Use it through `make release` / `make grade` (graders/pipeline.py), `make instructor` (whose formgrader finds it
through JUPYTER_CONFIG_PATH=graders) and `make lab` (the students' Validate button: graders/student/), or by hand from the root, with the venv's bin
on PATH (nbgrader runs `alembic` from PATH when it creates the gradebook):
    PATH=$PWD/.venv/bin:$PATH nbgrader <command> --JupyterApp.config_file=graders/nbgrader_config ...
(nbgrader adds the ".py" itself, and ignores a `--config=` option.)
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from graders.edition_cells import OverwriteCellsInEdition  # noqa: E402
from graders.execute import CheckCanaries, CrashSafeExecute, JoinHiddenParts, PrepareCells  # noqa: E402
from graders.gate import (GradingPipelineOnly, guard_autograde_destination, refuse_autograde_app,  # noqa: E402
                          refuse_outside_the_pipeline)
from graders.gradebook import install as stamp_gradebooks_without_a_subprocess  # noqa: E402
from graders.hidden_runs import HiddenRuns, HoldHiddenTests  # noqa: E402
from graders.redact import RedactHiddenTests, SanitizeOutputs  # noqa: E402
from graders.release import LetRunAllGoOn  # noqa: E402
from graders.words import ENGLISH, unsolved_stub  # noqa: E402

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

refuse_autograde_app()  # a bare `nbgrader autograde`, before it removes anything; the formgrader's button grades
# through the pipeline (graders/formgrader.py)
guard_autograde_destination()  # nbgrader's API, run any other way: refused before it removes a graded notebook
stamp_gradebooks_without_a_subprocess()  # a new gradebook's version without `alembic heads` (graders/gradebook.py)

c.CourseDirectory.root = ROOT
c.CourseDirectory.course_id = "multi-device-course"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"

# Releasing (make release, the formgrader's Generate button) tags the exercise cells so that Run All goes on past
# an unsolved exercise: nbgrader's own steps, then that one.
from nbgrader.converters import GenerateAssignment  # noqa: E402

c.GenerateAssignment.preprocessors = GenerateAssignment.class_traits()["preprocessors"].default() + [LetRunAllGoOn]

# An unsolved exercise says so when it runs (nbgrader's stub raises an empty NotImplementedError); the Turkish
# edition's stub says it in Turkish (i18n/catalog.py translates it from i18n/tr/feedback.po).
c.ClearSolutions.code_stub = {"python": unsolved_stub(ENGLISH["unsolved"])}

# A student who deletes a test cell gets it back from the gradebook instead of escaping it; the locked cells come
# back in the submission's edition (graders/edition_cells.py: a Turkish submission runs its checks in Turkish).
c.OverwriteCells.add_missing_cells = True
from nbgrader.converters import Autograde  # noqa: E402
from nbgrader.preprocessors import OverwriteCells  # noqa: E402

c.Autograde.sanitize_preprocessors = [OverwriteCellsInEdition if step is OverwriteCells else step
                                      for step in Autograde.class_traits()["sanitize_preprocessors"].default()]

# Each cell of a submission may run this long; an infinite loop then fails one cell, not the batch.
c.Execute.timeout = int(os.environ.get("GRADER_CELL_TIMEOUT", "300"))
c.Execute.interrupt_on_timeout = True
# Once the last cell has run, the kernel is killed, not asked to shut down: a graceful shutdown waited 2-3 s for a
# kernel that had launched processes (their fork servers), and nothing a kernel does then changes the grade. What it
# started dies with it (the sandbox's PID namespace and job cgroups; unsandboxed, fork servers end with their caller).
c.Execute.shutdown_kernel = "immediate"

# A kernel crash costs the cell that caused it, not the submission; the kernel of the student's notebook runs no
# hidden test: each graded cell's hidden checks run apart, in a fresh kernel of their own, from the submission's
# source, with hidden inputs drawn from a seed that kernel never sees (graders/hidden_runs.py); canary cells show
# whether the submission changed how its kernel runs cells (graders/execute.py).
c.Autograde.pre_convert_hook = refuse_outside_the_pipeline  # says so first, readably, in the formgrader's error box
c.Autograde.autograde_preprocessors = [
    GradingPipelineOnly,  # the formgrader's Autograde button and a bare `nbgrader autograde` are refused
    HoldHiddenTests,
    PrepareCells,
    CrashSafeExecute,
    CheckCanaries,
    JoinHiddenParts,
    HiddenRuns,
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Student code runs in the "course-sandbox" kernel (graders/sandbox.py), reached over unix
# sockets in a folder the pipeline makes for each submission.
if os.environ.get("GRADER_SANDBOX") == "1":
    c.Execute.kernel_name = "course-sandbox"
    c.KernelManager.transport = "ipc"
    c.KernelManager.ip = os.environ["GRADER_IPC_PREFIX"]

# Feedback: nbgrader shows hidden tests by default. Remove them and all their output, and anything a
# browser would run or render as markup.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    RedactHiddenTests,
    SanitizeOutputs,
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
