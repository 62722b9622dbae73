"""What a released (student) notebook is: the instructor's source less its solutions and hidden tests, and its
exercise cells tagged so that JupyterLab's Run All goes on past an unsolved exercise.

nbgrader's generate_assignment runs LetRunAllGoOn last (graders/nbgrader_config.py), so every way of releasing
— `make release`, the formgrader's Generate button, `nbgrader generate_assignment` — writes the same notebooks/.
"""

from nbgrader.preprocessors import NbGraderPreprocessor

RUN_ALL_GOES_ON = "raises-exception"


def is_exercise_cell(cell) -> bool:
    """A code cell a student completes (a solution cell) or that checks it (a grade cell)."""
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("solution") or meta.get("grade"))


class LetRunAllGoOn(NbGraderPreprocessor):
    """Tag the released exercise and check cells "raises-exception": an unsolved exercise fails its cells, and
    JupyterLab's Run All (which stops at the first error) goes on to the rest of the lesson. Only the student
    version: on the solutions nbval must still fail on any error."""

    def preprocess_cell(self, cell, resources, index):
        if is_exercise_cell(cell):
            tags = cell.metadata.setdefault("tags", [])
            if RUN_ALL_GOES_ON not in tags:
                tags.append(RUN_ALL_GOES_ON)
        return cell, resources
