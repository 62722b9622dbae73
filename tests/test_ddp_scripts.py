"""Lesson 2's script series, run as a student would: python, mp.spawn, torchrun, two "nodes" -- the README's
commands, each run once, compared with one process trained on the same global batches."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import ddp

BIN = Path(sys.executable).parent
PACKAGE = "helpers.ddp_scripts"


def _readme_commands() -> list[str]:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = readme.split("## Lesson 2 from a terminal")[1].split("```bash")[1].split("```")[0]
    return [line for line in block.strip().splitlines() if not line.startswith("source ")]


@pytest.fixture(scope="module")
def readme_runs(tmp_path_factory):
    """The README's four commands, each run once as written, in a folder of their own: the folder, and each
    command's JSON lines by the script it runs. The step tests below read these runs."""
    folder = tmp_path_factory.mktemp("readme")
    commands = _readme_commands()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    runs = {}
    for command in commands:
        out = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, (command, out.stderr[-2000:])
        step = next(name for name in ("step1_single", "step2_spawn", "step3_torchrun", "step4_multinode") if name in command)
        runs[step] = sorted((json.loads(l) for l in out.stdout.splitlines() if l.startswith('{"step"')), key=lambda l: l["rank"])
    return folder, commands, runs


def test_the_readme_commands_run_as_written(readme_runs):
    _, commands, runs = readme_runs
    assert len(commands) == 4 and len(runs) == 4, "one command per step"
    for step, lines in runs.items():
        assert lines and len({l["weights_sha256"] for l in lines}) == 1, step
        assert len(lines) == lines[0]["world_size"], step


def test_step1_single_process_trains(readme_runs):
    (line,) = readme_runs[2]["step1_single"]
    assert line["world_size"] == 1 and line["loss"] < 1.5


def test_step2_spawn_and_step3_torchrun_agree_with_one_process(readme_runs):
    folder, _, runs = readme_runs
    spawn, torchrun = runs["step2_spawn"], runs["step3_torchrun"]
    assert [l["rank"] for l in spawn] == [0, 1] == [l["rank"] for l in torchrun]
    fingerprints = {l["weights_sha256"] for l in spawn + torchrun}
    assert len(fingerprints) == 1, "every rank of both launchers must end with the same weights"
    reference = ddp.reference_train(ddp.TrainConfig(), 2)["state"]
    for name in ("spawn.pt", "torchrun.pt"):  # the README's --save
        assert ddp.same_state(torch.load(folder / name, weights_only=True), reference), name


def test_step4_two_nodes_on_localhost_equal_one_process_on_the_global_batches(readme_runs):
    """Two torchrun nodes of two ranks each (the README's last line) train what one process trains on the four ranks'
    global batches (ddp.reference_train), the reference the one-node steps above are held to as well. (A fifth
    launch, one node of four, compared with it added nothing but a torchrun and four ranks: ~12 CPU-seconds.)"""
    folder, _, runs = readme_runs
    multi = runs["step4_multinode"]
    assert [l["rank"] for l in multi] == [0, 1, 2, 3]
    assert len({l["weights_sha256"] for l in multi}) == 1
    reference = ddp.reference_train(ddp.TrainConfig(), 4)["state"]
    assert ddp.same_state(torch.load(folder / "checkpoint.pt", weights_only=True), reference)  # step 4's checkpoint


def test_slurm_example_uses_the_multinode_step():
    sbatch = (Path(ddp.__file__).parent / "ddp_scripts" / "slurm_multinode.sbatch").read_text()
    assert "torchrun" in sbatch and "--rdzv_backend=c10d" in sbatch and f"-m {PACKAGE}.step4_multinode" in sbatch
    assert os.access(Path(ddp.__file__).parent / "ddp_scripts" / "step4_multinode.py", os.R_OK)
