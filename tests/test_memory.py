"""The per-device ledger of the emulation: each row agrees with the tensors it claims to count."""

import importlib
import inspect
from types import SimpleNamespace
from unittest import mock

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
    assert d0["reduced gradients"] == sum(q.grad.nbytes for q in net.parameters()) == p
    assert d1["reduced gradients"] == 0
    assert d0["optimizer state"] == 2 * p + 4 * len(list(net.parameters()))  # exp_avg, exp_avg_sq, step
    assert d1["optimizer state"] == 0
    assert d0["inputs"] == 4 * (64 * 16 + 64 * 4) and d1["inputs"] == 4 * 32 * 16
    assert d0["outputs"] == d1["outputs"] == 4 * 32 * 4
    assert d0["gathered outputs"] == 4 * 64 * 4 and d1["gathered outputs"] == 0
    assert d0["loss"] == 4 and d1["loss"] == 0
    # two hidden ReLU outputs of 32 rows x 32 features are what autograd saves beyond inputs and weights
    assert d0["activations"] == d1["activations"] == 2 * 32 * 32 * 4
    assert report.totals() == [sum(d0.values()), sum(d1.values())]


def test_torch_reduces_the_gradients_onto_the_source_device():
    # the "reduced gradients" row: Broadcast's backward sums every replica's gradients on device 0
    functions = importlib.import_module("torch.nn.parallel._functions")
    assert "ReduceAddCoalesced.apply(\n            ctx.input_device" in inspect.getsource(functions.Broadcast.backward)
    assert "comm.reduce_add_coalesced(grads_, destination)" in inspect.getsource(functions.ReduceAddCoalesced.forward)


@pytest.mark.parametrize("optimizer, n, k", [("sgd", 64, 2), ("momentum", 48, 3), ("adam", 40, 4)])
def test_device0_extra_is_state_batch_outputs_loss_and_reduced_gradients(optimizer, n, k):
    net, report = _report(optimizer, n=n, k=k, in_features=10, hidden=16, out_features=3)
    p, tensors = _param_bytes(net), len(list(net.parameters()))
    state = {"sgd": 0, "momentum": p, "adam": 2 * p + 4 * tensors}[optimizer]
    batch = 4 * n * (10 + 3) - 4 * (n // k) * 10  # the whole batch and targets, less device 1's chunk
    assert report.primary_extra_bytes == state + batch + 4 * n * 3 + 4 + p


def test_frozen_parameters_have_no_gradients():
    net = models.seeded(models.MLP, in_features=8, hidden=16, out_features=2)
    net[0].requires_grad_(False)
    wrapped = dp.make_data_parallel(net, device_ids=[0, 1], emulate=True)
    report = memory.measure_step(wrapped, torch.optim.SGD(wrapped.parameters(), lr=0.1), torch.randn(8, 8),
                                 torch.randn(8, 2), F.mse_loss)
    trainable = sum(q.nbytes for q in net.parameters() if q.requires_grad)
    assert [d["gradients"] for d in report.per_device] == [trainable] * 2
    # torch reduces zeros for the frozen parameters too (autograd materialises them for Broadcast's
    # non-differentiable outputs), and the trainable .grad are views of that one flat sum: all of it stays alive
    everything = sum(q.nbytes for q in net.parameters())
    assert [d["reduced gradients"] for d in report.per_device] == [everything, 0]
    assert [d["flattened gradients"] for d in report.per_device] == [(everything - trainable) + everything] * 2


def test_cuda_report_synchronizes_every_device_and_names_cublas_workspace():
    model = SimpleNamespace(device_ids=[0, 1, 3])
    with mock.patch.object(memory, "_train_step"), mock.patch("torch.cuda.reset_peak_memory_stats"), \
            mock.patch("torch.cuda.max_memory_allocated", return_value=7), mock.patch("torch.cuda.synchronize") as sync:
        report = memory._measure_cuda(model, None, None, None, None)
    assert sync.call_args_list == [mock.call(0), mock.call(1), mock.call(3)]
    assert report.totals() == [7, 7, 7] and not report.emulated
    assert "cuBLAS" in report.source and "32 MiB on Hopper" in report.source


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
    with pytest.raises(ValueError, match="model"):
        memory.measure_step(dp.make_data_parallel(net, device_ids=[0], emulate=True), opt, x, y, F.mse_loss)


def test_every_replica_device_holds_a_flat_copy_of_its_gradients_while_they_are_reduced():
    # reduce_add_coalesced flattens each device's gradients (_flatten_dense_tensors) and sums the flat buffers
    comm = importlib.import_module("torch.nn.parallel.comm")
    source = inspect.getsource(comm.reduce_add_coalesced)
    assert "_flatten_dense_tensors(chunk) for chunk in chunks" in source and "reduce_add(flat_tensors, destination)" in source
    assert "_unflatten_dense_tensors(flat_result, chunks[0])" in source and "output.append(t.data)" in source
    net, report = _report("sgd", n=48, k=3, in_features=10, hidden=16, out_features=3)
    p = _param_bytes(net)
    assert [d["flattened gradients"] for d in report.per_device] == [p, p, p]
    assert report.primary_extra_bytes == 4 * 48 * (10 + 3) - 4 * 16 * 10 + 4 * 48 * 3 + 4 + p  # lesson 1's exercise 4
    # .grad are views of the one flat sum, as torch's unflattened outputs are
    assert len({q.grad.untyped_storage().data_ptr() for q in net.parameters()}) == 1
    _, report = _report("sgd", n=6, k=4)  # 3 replicas: device 3 holds no copy
    assert [d["flattened gradients"] > 0 for d in report.per_device] == [True, True, True, False]


def test_flat_buffers_follow_torchs_10_mib_chunks():
    comm = importlib.import_module("torch.nn.parallel.comm")
    assert inspect.signature(comm.reduce_add_coalesced).parameters["buffer_size"].default == 10 * 2**20
    net = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
                              torch.nn.Linear(2048, 1536))
    wrapped = dp.make_data_parallel(net, device_ids=[0, 1], emulate=True)
    report = memory.measure_step(wrapped, torch.optim.SGD(wrapped.parameters(), lr=0.1), torch.randn(4, 1024),
                                 torch.randn(4, 1536), F.mse_loss)
    # torch._utils._take_tensors cuts the gradients into chunks of at most 10 MiB: [w1, b1] 4 MiB + 4 KiB,
    # [w2, b2] 8 MiB + 8 KiB, [w3] 12 MiB, [b3] 6 KiB. A one-tensor chunk is only viewed, not copied; a chunk's
    # flat buffer is still referenced while the next one is built: the peak is w1's and w2's chunks together
    mib, kib = 2**20, 2**10
    assert [d["flattened gradients"] for d in report.per_device] == [12 * mib + 12 * kib] * 2
    assert report.per_device[0]["reduced gradients"] == _param_bytes(net)
