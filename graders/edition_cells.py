"""A submission of another edition gets its locked cells back in that edition.

nbgrader's OverwriteCells puts every locked cell (the checks, the explanations' code) back as the gradebook holds
it: the instructor's English source. A Turkish submission then ran English checks, and its graded notebook and
feedback page showed their English messages. Here the cells nbgrader restored are put in the submission's edition:
the same code with the literals its catalog translates (i18n/catalog.py; tests/test_edition.py keeps the code of
the editions the same), from the instructor's catalogs only. The student's own cells are left as they are.
"""

import nbformat
from nbgrader import utils
from nbgrader.preprocessors import OverwriteCells


class OverwriteCellsInEdition(OverwriteCells):
    """OverwriteCells, then the locked cells in the edition the notebook names (i18n.catalog.LANGUAGES)."""

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        return in_edition(nb, resources["nbgrader"]["assignment"]), resources


def in_edition(nb, lesson: str):
    """`nb` with its locked cells' sources translated into the edition its metadata names; English as it is."""
    from i18n import catalog

    lang = nb.metadata.get("course_edition")
    if lang not in catalog.LANGUAGES or lesson not in catalog.LESSONS:
        return nb
    locked = [cell for cell in nb.cells if utils.is_locked(cell)]
    shown = catalog.translate(nbformat.v4.new_notebook(cells=locked), lang, lesson, strict=False)
    for cell, translated in zip(locked, shown.cells):
        cell.source = translated.source
    return nb
