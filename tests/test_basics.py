"""Hardware summary, datasets, models, the training loop and the plots."""

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from helpers import data, hardware, memory, models, plotting, training
from helpers import dataparallel as dp


def test_hardware_summary_reports_this_machine():
    hw = hardware.detect()
    assert hw.cpu_cores >= 1
    assert hw.n_gpus == torch.cuda.device_count()
    text = hw.summary()
    assert f"CPU cores : {hw.cpu_cores}" in text and f"CUDA GPUs : {hw.n_gpus}" in text
    assert ("emulated" in text) == (hw.n_gpus < 2)
    assert ("gloo" in text) == (hw.n_gpus < 2)


def test_datasets_are_deterministic_and_shaped():
    a, b = data.regression(50, 8, 3, seed=1), data.regression(50, 8, 3, seed=1)
    assert torch.equal(a.tensors[0], b.tensors[0]) and a.tensors[1].shape == (50, 3)
    assert not torch.equal(a.tensors[0], data.regression(50, 8, 3, seed=2).tensors[0])
    x, y = data.images(20, channels=1, size=8, n_classes=3).tensors
    assert x.shape == (20, 1, 8, 8) and y.dtype == torch.int64 and int(y.max()) < 3
    assert data.indexed(5).tensors[0].squeeze(1).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("call", [lambda: data.regression(0), lambda: data.images(size=2), lambda: data.images(n_classes=1),
                                  lambda: models.MLP(depth=0), lambda: models.SmallCNN(size=10), lambda: data.indexed(-3)])
def test_bad_arguments_name_the_argument(call):
    with pytest.raises(ValueError, match="n_samples|size|n_classes|depth"):
        call()


def test_models_forward_and_seeding():
    assert models.MLP(8, 16, 3, depth=3)(torch.randn(2, 8)).shape == (2, 3)
    assert models.SmallCNN(3, 10, width=4, size=16)(torch.randn(2, 3, 16, 16)).shape == (2, 10)
    a, b = models.seeded(models.MLP, 5), models.seeded(models.MLP, 5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    state = torch.random.get_rng_state()
    models.seeded(models.MLP, 7)
    assert torch.equal(state, torch.random.get_rng_state()), "seeding must not touch the global generator"


def test_training_loop_lowers_the_loss_and_matches_dataparallel():
    dataset = data.regression(256, 16, 2)
    curves = []
    for wrap in (False, True):
        net = models.seeded(models.MLP, in_features=16, hidden=32, out_features=2)
        net = dp.make_data_parallel(net, emulate=True) if wrap else net
        loader = DataLoader(dataset, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
        curves.append(training.train(net, loader, torch.optim.SGD(net.parameters(), lr=0.05), F.mse_loss, epochs=2, progress=False))
    assert len(curves[0]) == 16 and curves[0][-1] < curves[0][0]
    assert max(abs(a - b) for a, b in zip(*curves)) < 1e-4


def test_training_rejects_bad_arguments():
    loader = DataLoader(data.regression(8, 32, 4), batch_size=4)
    with pytest.raises(ValueError, match="epochs"):
        training.train(models.MLP(), loader, torch.optim.SGD(models.MLP().parameters(), lr=0.1), F.mse_loss, epochs=0)
    with pytest.raises(ValueError, match="optimizer"):
        training.train(models.MLP(), loader, "sgd", F.mse_loss)


def test_plots_draw_what_they_show():
    matplotlib.use("Agg")
    ax = plotting.plot_split(10, 3)
    assert "[4, 4, 2]" in ax.get_title() and len(ax.patches) == 3
    ax = plotting.plot_split(6, 4)
    assert len(ax.patches) == 3  # device 3 gets no rows
    net = models.MLP(8, 16, 2)
    wrapped = dp.make_data_parallel(net, emulate=True)
    report = memory.measure_step(wrapped, torch.optim.Adam(wrapped.parameters()), torch.randn(8, 8), torch.randn(8, 2), F.mse_loss)
    ax = plotting.plot_memory(report)
    assert "emulated" in ax.get_title(loc="right")
    heights = [p.get_height() for p in ax.patches]
    assert sum(heights) == pytest.approx(sum(report.totals()) / 1024)
    # lesson 2's pair of panels on one y scale, the DDP ranks' bars as tall as the axes allow: no label on a bar
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    taller = {name: int(v * 1.3) for name, v in report.per_device[0].items()}  # taller than DataParallel's device 0
    ddp_report = memory.MemoryReport([taller, dict(taller)], "DDP ranks, ledger")
    for ax, r, title in ((axes[0], report, "DataParallel"), (axes[1], ddp_report, "DDP")):
        plotting.plot_memory(r, ax=ax, title=title)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in axes:
        labels = [ax.title, ax._left_title, ax._right_title, *ax.texts]
        for bar in ax.patches:
            box = bar.get_window_extent(renderer)
            for label in labels:
                if label.get_text():
                    assert not box.overlaps(label.get_window_extent(renderer)), f"{label.get_text()!r} overlaps a bar"
    plt.close(fig)
    ax = plotting.plot_phases({"a": dict.fromkeys(dp.PHASES, 1.0)})
    assert sum(p.get_width() for p in ax.patches) == pytest.approx(1.0)
    plotting.plot_losses({"x": [1.0, 0.5]})
