"""Lesson 2's script series, run as a student would: python, mp.spawn, torchrun, two "nodes" -- the README's
commands, each run once, and one node of four to compare the two nodes with."""

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


def _run(*commands, timeout=240):
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-3000:]
        lines += [json.loads(l) for l in out.splitlines() if l.startswith('{"step"')]
    return sorted(lines, key=lambda l: l["rank"])


def _torchrun(*args):
    return [str(BIN / "torchrun"), *args]


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


def test_step4_two_nodes_on_localhost_equal_one_node_of_four(readme_runs, tmp_path):
    folder, _, runs = readme_runs
    multi = runs["step4_multinode"]
    single = _run(_torchrun("--standalone", "--nproc_per_node=4", "-m", f"{PACKAGE}.step3_torchrun",
                            "--save", str(tmp_path / "single.pt")))
    assert [l["rank"] for l in multi] == [0, 1, 2, 3]
    assert {l["weights_sha256"] for l in multi} == {l["weights_sha256"] for l in single}
    assert len({l["weights_sha256"] for l in multi}) == 1
    reference = ddp.reference_train(ddp.TrainConfig(), 4)["state"]
    for path in (folder / "checkpoint.pt", tmp_path / "single.pt"):  # step 4's default checkpoint, and --save
        assert ddp.same_state(torch.load(path, weights_only=True), reference), path.name


def test_slurm_example_uses_the_multinode_step():
    sbatch = (Path(ddp.__file__).parent / "ddp_scripts" / "slurm_multinode.sbatch").read_text()
    assert "torchrun" in sbatch and "--rdzv_backend=c10d" in sbatch and f"-m {PACKAGE}.step4_multinode" in sbatch
    assert os.access(Path(ddp.__file__).parent / "ddp_scripts" / "step4_multinode.py", os.R_OK)
