"""Servers started ahead of their first job (`launch.warm_up`, `accel.warm_up`, `xla.warm_up`): lessons 2 and 4 call
them in their import cells, so that the seconds a fork server spends importing torch (and torch_xla) overlap with the
cells before the first launch. Only in a notebook's kernel: a script, a test or the grader's judge (which runs the
import cells too) starts nothing it may never use. And the grader kills a kernel once its last cell has run
(graders/nbgrader_config.py): what the kernel started ends with it.
"""

import subprocess
import sys
import time

import nbformat
import psutil
import pytest
from nbclient import NotebookClient
from traitlets.config.loader import PyFileConfigLoader

from conftest import REPO
from helpers import xla

needs_xla = pytest.mark.skipif(not xla.available(), reason="needs torch_xla")

SERVERS = """
import multiprocessing.forkserver as _fs
from helpers import accel, xla

def servers():
    return {"launch": _fs._forkserver._forkserver_pid, "probe": accel.PROBE_SERVER._proc and accel.PROBE_SERVER._proc.pid,
            "xla": xla.CPU_SERVER._proc and xla.CPU_SERVER._proc.pid}
"""


def test_outside_a_kernel_warm_up_starts_nothing():
    code = SERVERS + "accel.warm_up(); xla.warm_up()\nimport time; time.sleep(1)\nprint(servers())"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "{'launch': None, 'probe': None, 'xla': None}"


def _grader_shutdown() -> str:
    config = PyFileConfigLoader("nbgrader_config.py", path=str(REPO / "graders")).load_config()
    return config.Execute.shutdown_kernel


@needs_xla
def test_in_a_kernel_the_servers_start_before_the_first_job_and_end_with_the_kernel():
    """In a kernel, the servers run before any job asks for them, and the first launch, probe and XLA run use them
    (the same processes). The grader kills the kernel at the end ("immediate"): none of them outlives it."""
    assert _grader_shutdown() == "immediate"
    cells = [SERVERS + "from helpers import launch\naccel.warm_up(); xla.warm_up()",
             "import time\ndeadline = time.monotonic() + 120\n"
             "while None in servers().values() and time.monotonic() < deadline:\n    time.sleep(0.2)\n"
             "before = servers()\nprint(before)",
             "def rank(rank, world_size):\n    return rank\n"
             "assert launch.launch(rank, 2) == [0, 1]\n"
             "assert accel.accelerator_device({'USE_TORCH_XLA': '0'}).startswith('cpu')\n"
             "assert xla.run(xla.device_summary)['device_type'] == 'CPU'\n"
             "assert servers() == before, (servers(), before)"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3", shutdown_kernel=_grader_shutdown(),
                   resources={"metadata": {"path": str(REPO)}}).execute()
    errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[0].get("traceback")[-3:]
    started = eval(nb.cells[1].outputs[0].text)  # noqa: S307 - the kernel printed a dict of ints
    assert None not in started.values(), f"a server did not start ahead of its first job: {started}"
    deadline = time.monotonic() + 30
    while (alive := [pid for pid in started.values() if psutil.pid_exists(pid)
                     and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive, f"still running after the kernel was killed: {alive}"
