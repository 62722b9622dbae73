"""Lesson 2's script series, run as a student would: python, mp.spawn, torchrun, two "nodes"."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from helpers import ddp, launch

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


def test_step1_single_process_trains():
    (line,) = _run([sys.executable, "-m", f"{PACKAGE}.step1_single"])
    assert line["world_size"] == 1 and line["loss"] < 1.5


def test_step2_spawn_and_step3_torchrun_agree_with_one_process(tmp_path):
    spawn = _run([sys.executable, "-m", f"{PACKAGE}.step2_spawn", "--world-size", "2", "--save", str(tmp_path / "s.pt")])
    torchrun = _run(_torchrun("--standalone", "--nproc_per_node=2", "-m", f"{PACKAGE}.step3_torchrun",
                              "--save", str(tmp_path / "t.pt")))
    assert [l["rank"] for l in spawn] == [0, 1] == [l["rank"] for l in torchrun]
    fingerprints = {l["weights_sha256"] for l in spawn + torchrun}
    assert len(fingerprints) == 1, "every rank of both launchers must end with the same weights"
    reference = ddp.reference_train(ddp.TrainConfig(), 2)["state"]
    for name in ("s.pt", "t.pt"):
        assert ddp.same_state(torch.load(tmp_path / name, weights_only=True), reference)


def test_step4_two_nodes_on_localhost_equal_one_node_of_four(tmp_path):
    port = launch.free_port()
    nodes = [_torchrun("--nnodes=2", f"--node_rank={n}", "--nproc_per_node=2", "--rdzv_backend=c10d",
                       f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=test", "-m", f"{PACKAGE}.step4_multinode",
                       "--save", str(tmp_path / "multi.pt")) for n in (0, 1)]
    multi = _run(*nodes)
    single = _run(_torchrun("--standalone", "--nproc_per_node=4", "-m", f"{PACKAGE}.step3_torchrun"))
    assert [l["rank"] for l in multi] == [0, 1, 2, 3]
    assert {l["weights_sha256"] for l in multi} == {l["weights_sha256"] for l in single}
    assert len({l["weights_sha256"] for l in multi}) == 1
    reference = ddp.reference_train(ddp.TrainConfig(), 4)["state"]
    assert ddp.same_state(torch.load(tmp_path / "multi.pt", weights_only=True), reference)


def test_slurm_example_uses_the_multinode_step():
    sbatch = (Path(ddp.__file__).parent / "ddp_scripts" / "slurm_multinode.sbatch").read_text()
    assert "torchrun" in sbatch and "--rdzv_backend=c10d" in sbatch and f"-m {PACKAGE}.step4_multinode" in sbatch
    assert os.access(Path(ddp.__file__).parent / "ddp_scripts" / "step4_multinode.py", os.R_OK)


def test_the_readme_commands_run_as_written(tmp_path):
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = readme.split("## Lesson 2 from a terminal")[1].split("```bash")[1].split("```")[0]
    commands = [line for line in block.strip().splitlines() if not line.startswith("source ")]
    assert len(commands) == 4
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    for command in commands:
        out = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, (command, out.stderr[-2000:])
        lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith('{"step"')]
        assert lines and len({l["weights_sha256"] for l in lines}) == 1, command
        assert len(lines) == lines[0]["world_size"], command
