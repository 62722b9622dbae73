"""The student's view (`make lab`): the course's nbgrader config (graders/nbgrader_config.py), for the Validate
button; nbgrader's instructor tools are off (labconfig/page_config.json, jupyter_server_config.json beside this)."""
import os

load_subconfig(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "nbgrader_config.py"))  # noqa: F821
