"""helpers/ddp_scripts/slurm_multinode.sbatch under a stand-in SLURM (srun and scontrol that record what they are
asked): the one step per node gets the job's CPUs (since Slurm 22.05 srun does not inherit --cpus-per-task), and it
runs in the repository root with its .venv/ active, whatever folder the job starts in."""

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "helpers" / "ddp_scripts" / "slurm_multinode.sbatch"


@pytest.fixture
def slurm(tmp_path):
    """A fake cluster: bin/ with srun and scontrol, a course checkout with .venv/, and a job folder elsewhere."""
    bin_dir, course, job = tmp_path / "bin", tmp_path / "course", tmp_path / "job"
    for folder in (bin_dir, course / ".venv" / "bin", job):
        folder.mkdir(parents=True)
    (course / ".venv" / "bin" / "activate").write_text(f'export VIRTUAL_ENV="{course / ".venv"}"\n')
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'node-a\\nnode-b\\n'\n")
    (bin_dir / "srun").write_text(f'#!/bin/bash\n{{ echo "cwd=$PWD"; echo "venv=$VIRTUAL_ENV"; '
                                  f'printf "arg=%s\\n" "$@"; }} > "{tmp_path / "srun.log"}"\n')
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_SUBMIT_DIR": str(course), "SLURM_CPUS_PER_TASK": "16",
           "SLURM_JOB_NODELIST": "node-[a-b]", "SLURM_NNODES": "2", "SLURM_JOB_ID": "77"}
    return tmp_path, course, job, env


def _submit(slurm, **extra):
    tmp_path, course, job, env = slurm
    done = subprocess.run(["bash", str(SCRIPT)], cwd=job, env={**env, **extra}, capture_output=True, text=True,
                          timeout=60)
    log = (tmp_path / "srun.log").read_text().splitlines() if (tmp_path / "srun.log").exists() else []
    return done, log


def test_the_step_gets_the_jobs_cpus_in_the_course_with_its_venv(slurm):
    _, course, _, _ = slurm
    done, log = _submit(slurm)
    assert done.returncode == 0, done.stderr
    assert f"cwd={course}" in log and f"venv={course / '.venv'}" in log
    args = [line.removeprefix("arg=") for line in log if line.startswith("arg=")]
    assert args[:2] == ["--cpus-per-task=16", "torchrun"], args
    assert "--rdzv_endpoint=node-a:29500" in args and "helpers.ddp_scripts.step4_multinode" in args


def test_a_job_submitted_elsewhere_says_where_to_submit_it(slurm):
    tmp_path, _, job, _ = slurm
    done, log = _submit(slurm, SLURM_SUBMIT_DIR=str(job))
    assert done.returncode == 1 and not log
    assert f"no .venv/ in {job}: submit from the repository root, or set COURSE_DIR" in done.stderr


def test_course_dir_names_the_checkout(slurm):
    _, course, job, _ = slurm
    done, log = _submit(slurm, SLURM_SUBMIT_DIR=str(job), COURSE_DIR=str(course))
    assert done.returncode == 0 and f"cwd={course}" in log, done.stderr


def test_the_script_says_how_to_name_the_nodes_network_interface():
    """On nodes with several interfaces nccl and gloo may pick one the other node cannot reach (the runtime review)."""
    text = SCRIPT.read_text()
    assert "NCCL_SOCKET_IFNAME" in text and "GLOO_SOCKET_IFNAME" in text
