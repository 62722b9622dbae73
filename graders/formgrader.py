"""The formgrader's Autograde button, graded as `make grade` grades: a Jupyter server extension (enabled by
graders/jupyter_server_config.py, which `make instructor` finds through JUPYTER_CONFIG_PATH) that answers the button's
request by running the grading pipeline (graders/pipeline.py) for that one submission, in the same sandbox, with
the same judge, the same records (autograded/, the gradebook, feedback/, grades.csv) and the same feedback page.

nbgrader's own autograde removes the submission's graded notebook before it runs anything; the pipeline replaces a
grade only with a new one, so a refused or failed grading (no sandbox on this machine, a submission that cannot be
graded) keeps the grade it had.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import sys
from pathlib import Path

from nbgrader.server_extensions.formgrader.apihandlers import AutogradeHandler
from nbgrader.server_extensions.formgrader.base import check_notebook_dir, check_xsrf
from tornado import web

from graders.course import REPO

BUTTON = r"/formgrader/api/submission/([^/]+)/([^/]+)/autograde"  # nbgrader's route for the button
_one_at_a_time = asyncio.Lock()  # two clicks grade one after the other (grades.csv and the gradebook are shared)


class PipelineAutograde(AutogradeHandler):
    @web.authenticated
    @check_xsrf
    @check_notebook_dir
    async def post(self, assignment_id, student_id):
        self.write(json.dumps(await grade_one(Path(self.coursedir.root), assignment_id, student_id)))


async def grade_one(root: Path, lesson: str, student: str) -> dict:
    """`make grade STUDENT=student LESSON=lesson` on the course at `root`, as nbgrader's API answers: success, log
    and, when there is no new grade, the error."""
    command = [sys.executable, "-m", "graders.pipeline", "grade", f"--root={root}", f"--student={student}",
               f"--lesson={lesson}"]
    bin_dir = str(Path(sys.executable).parent)  # nbgrader runs `alembic` from PATH
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    async with _one_at_a_time:
        proc = await asyncio.create_subprocess_exec(*command, cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        output, _ = await proc.communicate()
    log = output.decode(errors="replace")
    status = recorded_status(root, student, lesson) if proc.returncode == 0 else None
    if status is not None and status.startswith("graded"):
        return {"success": True, "log": log}
    why = status or f"the grading pipeline stopped (exit status {proc.returncode}); its output is above"
    return {"success": False, "log": log, "error": f"{why}\nThe grade it had before, if any, is kept."}


def recorded_status(root: Path, student: str, lesson: str) -> str | None:
    """The status grades.csv gives the submission, or None."""
    try:
        with open(root / "grades.csv", newline="") as f:
            return next((r["status"] for r in csv.DictReader(f) if (r["student"], r["lesson"]) == (student, lesson)), None)
    except FileNotFoundError:
        return None


def _jupyter_server_extension_points():
    return [{"module": "graders.formgrader"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Route the button to PipelineAutograde, ahead of nbgrader's handler whichever extension loaded first."""
    from jupyter_server.utils import url_path_join

    web_app = serverapp.web_app
    rules = web_app.default_router.rules
    before = list(rules)
    web_app.add_handlers(".*$", [(url_path_join(web_app.settings["base_url"], BUTTON), PipelineAutograde)])
    ours = [rule for rule in rules if not any(rule is old for old in before)]
    rules[:] = ours + before  # tornado takes the first rule that matches
    serverapp.log.info("The formgrader's Autograde button grades through the course's grading pipeline")
