"""The course's Jupyter server settings, found through JUPYTER_CONFIG_PATH=graders (make instructor): the formgrader's
Autograde button grades through the grading pipeline (graders/formgrader.py)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)
c.ServerApp.jpserver_extensions.update({"graders.formgrader": True})
