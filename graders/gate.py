"""Only the grading pipeline autogrades: nbgrader's own autograde, run any other way (a bare `nbgrader autograde`,
nbgrader's API), would run student code without the sandbox and the judge, and would first remove the graded
notebook it replaces. The course config refuses it before it touches anything: the command line while its config
loads, any other way (nbgrader's API) where nbgrader would remove that notebook. The formgrader's Autograde button
grades through the pipeline instead (graders/formgrader.py).
"""

import functools
import os
import textwrap

from nbgrader.preprocessors import NbGraderPreprocessor

PIPELINE = "GRADER_PIPELINE"  # set by graders/pipeline.py for the runs it starts
REFUSAL = ("This autograde would run student code without the grading sandbox and without the judge, so its "
           "grades could differ from the course's. Grade with `make grade` (python -m graders.pipeline grade; "
           "`make grade STUDENT=id LESSON=name` for one submission) from the course root, or with the "
           "formgrader's Autograde button in `make instructor`: every submission then gets the same sandbox and judge. "
           "Nothing was changed: the grades recorded before are kept.")


def refuse_outside_the_pipeline(**_) -> None:
    """nbgrader's pre-convert hook: the refusal, wrapped for the formgrader's error box, first in its log (nbgrader
    logs a failed hook and goes on; GradingPipelineOnly then stops the run)."""
    if os.environ.get(PIPELINE) != "1":
        raise RuntimeError("\n" + textwrap.fill(REFUSAL, 60))


def refuse_autograde_app() -> None:
    """`nbgrader autograde` run by hand: refused while its config loads, before nbgrader removes the graded notebooks
    it would replace (its own --force does that first). The pipeline's runs set GRADER_PIPELINE."""
    from nbgrader.apps.autogradeapp import AutogradeApp

    running = getattr(AutogradeApp, "_instance", None)  # (set on the base classes too: any nbgrader app's)
    if os.environ.get(PIPELINE) != "1" and isinstance(running, AutogradeApp):
        raise SystemExit(textwrap.fill(REFUSAL, 100))


def guard_autograde_destination() -> None:
    """nbgrader removes the graded notebook an autograde replaces before its pre-convert hook runs, and removes it
    again on any failure while it converts: an autograde the pipeline did not start is refused before the conversion
    begins, where nothing has been removed and no failure handler runs."""
    from nbgrader.converters import Autograde

    original = getattr(Autograde.convert_notebooks, "__wrapped__", Autograde.convert_notebooks)

    @functools.wraps(original)
    def convert_notebooks(self):
        refuse_outside_the_pipeline()
        return original(self)

    Autograde.convert_notebooks = convert_notebooks


class GradingPipelineOnly(NbGraderPreprocessor):
    """Refuse an autograde that graders/pipeline.py did not start (the formgrader's Autograde button, a bare
    `nbgrader autograde`): only the pipeline runs student code in the sandbox and judges it outside."""

    def preprocess(self, nb, resources):
        if os.environ.get(PIPELINE) != "1":
            raise RuntimeError(REFUSAL)
        return nb, resources
