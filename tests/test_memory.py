"""The per-device ledger of the emulation: each row agrees with the tensors it claims to count."""

import pytest
import torch
import torch.nn.functional as F

from helpers import dataparallel as dp
from helpers import memory, models


def _report(optimizer="adam", n=64, k=2, in_features=16, hidden=32, out_features=4):
    net = models.seeded(models.MLP, in_features=in_features, hidden=hidden, out_features=out_features)
    wrapped = dp.make_data_parallel(net, device_ids=list(range(k)), emulate=True)
    opt = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
        "momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        "adam": lambda p: torch.optim.Adam(p),
    }[optimizer](wrapped.parameters())
    x, y = torch.randn(n, in_features), torch.randn(n, out_features)
    return net, memory.measure_step(wrapped, opt, x, y, F.mse_loss)


def _param_bytes(net):
    return sum(p.numel() * 4 for p in net.parameters())


def test_rows_match_the_tensors():
    net, report = _report("adam", n=64, k=2, in_features=16, hidden=32, out_features=4)
    p = _param_bytes(net)
    d0, d1 = report.per_device
    assert report.emulated and "emulated" in report.source
    assert d0["parameters"] == d1["parameters"] == p
    assert d0["gradients"] == d1["gradients"] == p
    assert d0["optimizer state"] == 2 * p + 4 * len(list(net.parameters()))  # exp_avg, exp_avg_sq, step
    assert d1["optimizer state"] == 0
    assert d0["inputs"] == 4 * (64 * 16 + 64 * 4) and d1["inputs"] == 4 * 32 * 16
    assert d0["outputs"] == d1["outputs"] == 4 * 32 * 4
    assert d0["gathered outputs"] == 4 * 64 * 4 and d1["gathered outputs"] == 0
    assert d0["loss"] == 4 and d1["loss"] == 0
    # two hidden ReLU outputs of 32 rows x 32 features are what autograd saves beyond inputs and weights
    assert d0["activations"] == d1["activations"] == 2 * 32 * 32 * 4
    assert report.totals() == [sum(d0.values()), sum(d1.values())]


def test_optimizer_state_by_optimizer():
    for name, expected in [("sgd", lambda p, n: 0), ("momentum", lambda p, n: p), ("adam", lambda p, n: 2 * p + 4 * n)]:
        net, report = _report(name)
        assert report.per_device[0]["optimizer state"] == expected(_param_bytes(net), len(list(net.parameters())))


def test_activations_scale_with_the_chunk_and_missing_devices_hold_nothing():
    _, report = _report("sgd", n=7, k=4)  # chunks [2, 2, 2, 1]
    acts = [d["activations"] for d in report.per_device]
    assert acts[0] == acts[1] == acts[2] == 2 * acts[3] > 0
    _, report = _report("sgd", n=6, k=4)  # chunks [2, 2, 2]: device 3 gets no replica
    assert sum(report.per_device[3].values()) == 0


def test_primary_extra_and_ratio():
    _, report = _report("adam", n=64, k=4)
    totals = report.totals()
    assert report.primary_extra_bytes == totals[0] - max(totals[1:])
    assert report.imbalance_ratio == pytest.approx(totals[0] / max(totals[1:]))
    assert report.imbalance_ratio > 1.5
    assert "device 3" in report.table() and "total" in report.table()


def test_measuring_does_not_change_training():
    x, y = torch.randn(16, 8), torch.randn(16, 2)
    measured = models.seeded(models.MLP, in_features=8, hidden=16, out_features=2)
    plain = models.seeded(models.MLP, in_features=8, hidden=16, out_features=2)
    for net, measure in ((measured, True), (plain, False)):
        wrapped = dp.make_data_parallel(net, device_ids=[0, 1], emulate=True)
        opt = torch.optim.Adam(wrapped.parameters())
        if measure:
            memory.measure_step(wrapped, opt, x, y, F.mse_loss)
        else:
            opt.zero_grad()
            F.mse_loss(wrapped(x), y).backward()
            opt.step()
    assert all(torch.equal(a, b) for a, b in zip(measured.parameters(), plain.parameters()))


def test_bad_arguments():
    net = models.MLP()
    wrapped = dp.make_data_parallel(net, emulate=True)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(4, 32), torch.randn(4, 4)
    with pytest.raises(ValueError, match="model"):
        memory.measure_step(net, opt, x, y, F.mse_loss)
    with pytest.raises(ValueError, match="optimizer"):
        memory.measure_step(wrapped, "adam", x, y, F.mse_loss)
    with pytest.raises(ValueError, match="loss_fn"):
        memory.measure_step(wrapped, opt, x, y, "mse")
