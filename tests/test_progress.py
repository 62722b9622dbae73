"""One progress bar for the ranks of a launch (DDP, Accelerate): it follows the steps the ranks count, reaches its
total, and never waits for a rank that died."""

import os
import time

import pytest
import torch.distributed as dist

from helpers import accel, launch


class RecordedBar:
    """Stands in for tqdm: what the launch showed."""

    def __init__(self, total, desc):
        self.total, self.desc, self.n, self.seen, self.closed = total, desc, 0, [], False

    def update(self, n):
        self.n += n
        self.seen.append(self.n)

    def reset(self, total):
        self.total, self.n = total, 0

    def close(self):
        self.closed = True


@pytest.fixture
def bars(monkeypatch):
    made = []

    def new_bar(total, desc):
        made.append(RecordedBar(total, desc))
        return made[-1]

    monkeypatch.setattr(launch, "_new_bar", new_bar)
    return made


def counting(rank, world_size, steps, pause_s):
    bar = launch.progress(steps)
    for _ in range(steps):
        time.sleep(pause_s)
        dist.barrier()  # the ranks step together, as DDP's do
        bar.update()
    return rank


def test_the_bar_follows_the_ranks_steps_to_its_total(bars):
    assert launch.launch(counting, 2, args=(20, 0.05)) == [0, 1]
    (bar,) = bars
    assert bar.desc == "2 ranks" and bar.total == 2 * 20  # steps x world size
    assert bar.n == bar.total and bar.closed
    assert len(set(bar.seen)) > 3, f"the bar moved only at {bar.seen}: it should follow the ranks as they go"


def test_a_launch_whose_worker_counts_nothing_shows_no_bar(bars):
    assert launch.launch(lambda rank, world_size: rank, 2) == [0, 1]
    assert bars == []


def dies_after_a_few_steps(rank, world_size):
    bar = launch.progress(100)
    for step in range(100):
        if rank == 1 and step == 3:
            os._exit(3)
        bar.update()
        time.sleep(0.05)
    return rank


def test_a_dead_rank_stops_the_launch_and_leaves_the_bar_where_it_was(bars):
    start = time.monotonic()
    with pytest.raises(launch.WorkerFailed, match="exited with code 3"):
        launch.launch(dies_after_a_few_steps, 2, timeout_s=30)
    assert time.monotonic() - start < 25  # not the 30 s timeout
    (bar,) = bars
    assert bar.closed and bar.total == 200 and 3 <= bar.n < 200


def test_outside_a_launch_progress_counts_nothing():
    bar = launch.progress(5)
    bar.update()
    assert bar.shared is None
    with pytest.raises(ValueError, match="total"):
        launch.progress(-1)


def test_accelerates_training_loop_shows_one_bar_for_its_processes(bars):
    runs = accel.launch(accel.train_worker, 2, args=(64, 8, 2))
    (bar,) = bars
    assert bar.total == 2 * 2 * 64 // (8 * 2) and bar.n == bar.total  # epochs x batches per process x processes
    assert len(runs[0]["losses"]) == bar.total // 2


def test_the_bar_is_text_in_a_terminal(capsys):
    launch.launch(counting, 2, args=(3, 0.0))
    assert "2 ranks: 100%" in capsys.readouterr().err


def test_every_progress_bar_a_notebook_shows_is_still_a_widget_when_it_is_saved(tmp_path):
    """JupyterLab saves the widgets that are alive (saveState): a bar whose widget closed when it finished is saved as
    an output with no model, which shows "Error displaying widget: model not found" once the notebook is reopened.
    A training's bar and a launch's bar stay alive, in a real kernel."""
    import json

    import nbformat
    from nbclient import NotebookClient

    code = ("import torch, torch.nn as nn, torch.nn.functional as F\nfrom helpers import launch, training\n"
            "model = nn.Linear(4, 1)\nloader = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(5)]\n"
            "training.train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)\n")
    alive = "import json, ipywidgets\nprint(json.dumps(sorted(ipywidgets.Widget.widgets)))"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code), nbformat.v4.new_code_cell(alive)])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = [o.data["application/vnd.jupyter.widget-view+json"]["model_id"] for o in nb.cells[0].outputs
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert shown and set(shown) <= set(json.loads(nb.cells[1].outputs[0].text)), shown
