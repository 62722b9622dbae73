"""The DataParallel emulation against torch: split rule, gradients, structure handling, records."""

import importlib
import inspect
import re
import warnings
from contextlib import nullcontext
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import dataparallel as dp
from helpers import models


def test_split_sizes_equal_torch_chunk_exhaustively():
    for n in range(1, 257):
        rows = torch.arange(n)
        for k in range(1, 17):
            assert dp.split_sizes(n, k) == [len(c) for c in rows.chunk(k)], (n, k)


def test_split_sizes_known_uneven_cases():
    assert dp.split_sizes(64, 2) == [32, 32]
    assert dp.split_sizes(10, 3) == [4, 4, 2]  # not tensor_split's [4, 3, 3]
    assert dp.split_sizes(7, 4) == [2, 2, 2, 1]
    assert dp.split_sizes(6, 4) == [2, 2, 2]  # only 3 replicas
    assert dp.split_sizes(2, 4) == [1, 1]


def test_split_indices_are_the_chunks_of_arange():
    for n in range(1, 40):
        for k in range(1, 9):
            assert dp.split_indices(n, k) == [c.tolist() for c in torch.arange(n).chunk(k)]


@pytest.mark.parametrize("args", [(0, 2), (-1, 2), (4, 0), (4.0, 2), (4, 2.5), (True, 2), ("4", 2), (None, 2)])
def test_split_sizes_rejects_bad_arguments(args):
    with pytest.raises(ValueError, match="batch_size|n_devices"):
        dp.split_sizes(*args)


def _pair(model_fn, seed=0, **kwargs):
    return models.seeded(model_fn, seed, **kwargs), models.seeded(model_fn, seed, **kwargs)


@pytest.mark.parametrize("n, k", [(64, 2), (10, 3), (7, 4), (6, 4), (2, 4), (5, 1), (33, 5)])
def test_emulated_gradients_equal_full_batch(n, k):
    ref, inner = _pair(models.MLP, in_features=8, hidden=16, out_features=3)
    wrapped = dp.make_data_parallel(inner, device_ids=list(range(k)), emulate=True)
    x, y = torch.randn(n, 8), torch.randn(n, 3)
    F.mse_loss(ref(x), y).backward()
    out = wrapped(x)
    assert torch.allclose(out, ref(x), atol=1e-6)
    F.mse_loss(out, y).backward()
    for a, b in zip(ref.parameters(), inner.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)
    assert wrapped.steps[-1].chunk_sizes == dp.split_sizes(n, k)


def test_emulated_gradients_cnn_cross_entropy():
    ref, inner = _pair(models.SmallCNN, channels=3, n_classes=5, width=4, size=8)
    wrapped = dp.make_data_parallel(inner, device_ids=[0, 1, 2], emulate=True)
    x, y = torch.randn(10, 3, 8, 8), torch.randint(0, 5, (10,))
    F.cross_entropy(ref(x), y).backward()
    F.cross_entropy(wrapped(x), y).backward()
    for a, b in zip(ref.parameters(), inner.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_batchnorm_running_stats_come_from_replica_zero_like_real_dataparallel():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    wrapped = dp.make_data_parallel(net, device_ids=[0, 1], emulate=True)
    x = torch.randn(8, 4)
    expected = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    expected.load_state_dict(net.state_dict())
    expected(x[:4])  # only device 0's chunk updates the original buffers
    wrapped(x)
    assert torch.allclose(net[1].running_mean, expected[1].running_mean)
    assert net[1].num_batches_tracked.item() == 1


def test_state_dict_keys_equal_nn_dataparallel():
    inner = models.MLP()
    assert list(dp.make_data_parallel(inner, emulate=True).state_dict()) == list(nn.DataParallel(inner).state_dict())
    assert isinstance(dp.make_data_parallel(inner, emulate=True), nn.DataParallel)


class _TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x, extra=None, scale=1.0):
        out = self.lin(x) * scale
        if extra is not None:
            out = out + extra["bias"]
        return out, {"sum": out.sum(1)}


def test_tuple_dict_kwargs_and_nested_outputs_follow_torch_scatter_gather():
    torch.manual_seed(0)
    net = _TwoInputs()
    wrapped = dp.make_data_parallel(net, device_ids=[0, 1, 2], emulate=True)
    x, bias = torch.randn(7, 3), torch.randn(7, 2)
    out, extra = wrapped(x, extra={"bias": bias}, scale=2.0)
    ref_out, ref_extra = net(x, extra={"bias": bias}, scale=2.0)
    assert torch.allclose(out, ref_out) and torch.allclose(extra["sum"], ref_extra["sum"])
    assert wrapped.steps[-1].chunk_sizes == [3, 3, 1]


def test_scalar_outputs_are_unsqueezed_with_torchs_warning():
    class Scalar(nn.Module):
        def forward(self, x):
            return x.sum()

    wrapped = dp.make_data_parallel(Scalar(), device_ids=[0, 1], emulate=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = wrapped(torch.ones(4, 2))
    assert out.tolist() == [4.0, 4.0]
    assert any("all input tensors were scalars" in str(w.message) for w in caught)


def test_replicas_run_in_threads_of_one_process():
    import os
    import threading

    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append((os.getpid(), threading.get_ident()))
            return x

    dp.make_data_parallel(Probe(), device_ids=[0, 1, 2], emulate=True)(torch.zeros(6, 1))
    assert len(seen) == 3
    assert {pid for pid, _ in seen} == {os.getpid()}
    assert threading.get_ident() not in {tid for _, tid in seen}


def test_error_in_a_replica_is_raised_in_the_caller():
    class Fails(nn.Module):
        def forward(self, x):
            if x.shape[0] == 1:
                raise KeyError("boom")
            return x

    with pytest.raises(KeyError, match="boom"):
        dp.make_data_parallel(Fails(), device_ids=[0, 1], emulate=True)(torch.zeros(3, 1))


def test_autocast_and_no_grad_reach_the_replica_threads():
    net = models.MLP(in_features=4, hidden=8, out_features=2)
    wrapped = dp.make_data_parallel(net, device_ids=[0, 1], emulate=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert wrapped(torch.randn(4, 4)).dtype == torch.bfloat16
    with torch.no_grad():
        assert not wrapped(torch.randn(4, 4)).requires_grad


def test_torch_parallel_apply_passes_only_the_autocast_flag_and_replicas_get_fp16():
    # pytorch#125186, what _threaded_apply copies: if this fails, torch changed and the emulation must follow
    pa = importlib.import_module("torch.nn.parallel.parallel_apply")
    assert re.findall(r"torch\.amp\.autocast\(([^)]*)\)", inspect.getsource(pa.parallel_apply)) == [
        '"cuda", enabled=autocast_enabled'
    ]
    seen, calls = [], []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(torch.get_autocast_dtype("cuda"))
            return x

    def autocast(*args, **kwargs):
        calls.append((args, kwargs))
        return nullcontext()

    saved = torch.get_autocast_dtype("cuda")
    with mock.patch.object(torch.cuda, "current_stream"), mock.patch.object(torch.cuda, "device", lambda d: nullcontext()), \
            mock.patch.object(torch.cuda, "stream", lambda s: nullcontext()), mock.patch.object(torch.amp, "autocast", autocast):
        torch.set_autocast_enabled("cuda", True)  # what entering torch.autocast("cuda", dtype=bf16) does on a GPU
        torch.set_autocast_dtype("cuda", torch.bfloat16)
        try:
            pa.parallel_apply([Probe(), Probe()], [torch.zeros(1), torch.zeros(1)], devices=[0, 1])
        finally:
            torch.set_autocast_enabled("cuda", False)
            torch.set_autocast_dtype("cuda", saved)
    assert calls == [(("cuda",), {"enabled": True})] * 2
    assert seen == [torch.float16] * 2  # each replica thread starts from CUDA's default, not the caller's bf16


def test_emulated_replicas_compute_in_the_thread_default_dtype_like_torch():
    seen = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            out = self.lin(x)
            seen.append(out.dtype)
            return out

    wrapped = dp.make_data_parallel(Probe(), device_ids=[0, 1], emulate=True)
    x = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        assert wrapped(x).dtype == torch.bfloat16  # fp16 was asked; the CPU's default applies in the threads
    assert seen == [torch.bfloat16] * 2
    seen.clear()
    with torch.autocast("cpu", dtype=torch.float16, enabled=False):
        assert wrapped(x).dtype == torch.float32
    assert seen == [torch.float32] * 2
    seen.clear()
    with torch.autocast("cpu", dtype=torch.float16):
        wrapped(x[:1])  # one replica runs in the caller's thread, as in torch, and keeps the caller's dtype
    assert seen == [torch.float16]


def test_clock_synchronizes_every_device():
    with mock.patch("torch.cuda.is_available", return_value=True), mock.patch("torch.cuda.synchronize") as sync:
        dp.TimedDataParallel._clock(SimpleNamespace(emulated=False, device_ids=[0, 2, 3]))
        assert sync.call_args_list == [mock.call(0), mock.call(2), mock.call(3)]
        sync.reset_mock()
        dp.EmulatedDataParallel._clock(SimpleNamespace(emulated=True, device_ids=[0, 1]))
        sync.assert_not_called()


def test_single_device_and_tiny_batches():
    net = models.MLP(in_features=4, out_features=2)
    one = dp.make_data_parallel(net, device_ids=[0], emulate=True)
    assert one(torch.randn(5, 4)).shape == (5, 2)
    four = dp.make_data_parallel(net, device_ids=[0, 1, 2, 3], emulate=True)
    assert four(torch.randn(2, 4)).shape == (2, 2)
    assert four.steps[-1].chunk_sizes == [1, 1]


def test_phase_times_are_recorded_for_each_step():
    net = models.MLP(in_features=4, out_features=2)
    wrapped = dp.make_data_parallel(net, device_ids=[0, 1], emulate=True)
    for _ in range(3):
        wrapped.zero_grad()
        F.mse_loss(wrapped(torch.randn(8, 4)), torch.randn(8, 2)).backward()
    assert len(wrapped.steps) == 3
    for step in wrapped.steps:
        phases = step.phase_seconds()
        assert set(phases) == set(dp.PHASES)
        assert all(seconds > 0 for seconds in phases.values()), phases
        assert len(step.replica_forward_seconds) == 2
    totals = wrapped.phase_totals(last=2)
    assert totals["forward"] == pytest.approx(sum(s.phase_seconds()["forward"] for s in wrapped.steps[-2:]))


def test_automatic_choice_and_labels():
    wrapped = dp.make_data_parallel(models.MLP())
    if torch.cuda.device_count() < 2:
        assert wrapped.emulated and "emulated" in wrapped.label
        assert wrapped.primary_device == torch.device("cpu")
    assert wrapped.device_ids == ([0, 1] if torch.cuda.device_count() < 2 else list(range(torch.cuda.device_count())))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(device_ids=[]), "device_ids"),
        (dict(device_ids=[0, 0]), "device_ids"),
        (dict(device_ids=[0, -1]), "device_ids"),
        (dict(device_ids="01"), "device_ids"),
        (dict(device_ids=[0, 1.0]), "device_ids"),
        (dict(emulate="yes"), "emulate"),
    ],
)
def test_make_data_parallel_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dp.make_data_parallel(models.MLP(), **kwargs)


def test_emulation_rejects_bad_output_device_and_dim():
    with pytest.raises(ValueError, match="output_device"):
        dp.EmulatedDataParallel(models.MLP(), device_ids=[0, 1], output_device=3)
    with pytest.raises(ValueError, match="dim"):
        dp.EmulatedDataParallel(models.MLP(), device_ids=[0, 1], dim="0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_real_wrapper_refuses_without_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        dp.make_data_parallel(models.MLP(), emulate=False)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_real_dataparallel_matches_emulation_on_gpus():
    ref, inner = _pair(models.MLP, in_features=8, hidden=16, out_features=3)
    real = dp.make_data_parallel(inner, device_ids=[0, 1], emulate=False)
    x, y = torch.randn(10, 8), torch.randn(10, 3)
    F.mse_loss(ref(x), y).backward()
    F.mse_loss(real(x.cuda()), y.cuda()).backward()
    for a, b in zip(ref.parameters(), inner.parameters()):
        assert torch.allclose(a.grad, b.grad.cpu(), atol=1e-5)
    assert real.steps[-1].chunk_sizes == [5, 5]


class _ThreadProbe(nn.Module):
    """Records, per call, the intra-op threads its thread computes with."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.threads = []

    def forward(self, x):
        self.threads.append(torch.get_num_threads())
        return self.lin(x)


@pytest.mark.parametrize("caller, devices, rows, expected", [(2, 2, 8, [1, 1]), (4, 2, 8, [2, 2]), (2, 4, 8, [1] * 4),
                                                              (3, 2, 8, [1, 1]), (2, 2, 1, [2])])
def test_replica_threads_share_the_callers_cpu_threads(caller, devices, rows, expected):
    # each replica thread once built an OpenMP team as large as the caller's: on 2 cores, 2 replicas x 2 threads
    # plus spin-waiting workers made a 0.2 ms step take 100-300 ms
    saved = torch.get_num_threads()
    torch.set_num_threads(caller)
    try:
        probe = _ThreadProbe()
        wrapped = dp.make_data_parallel(probe, device_ids=list(range(devices)), emulate=True)
        for _ in range(2):
            F.mse_loss(wrapped(torch.randn(rows, 4)), torch.randn(rows, 2)).backward()
            assert torch.get_num_threads() == caller, "the caller's thread count is restored"
        assert probe.threads == expected * 2  # a single replica runs in the caller's thread, with its count
    finally:
        torch.set_num_threads(saved)


def test_replica_threads_rule_and_arguments():
    assert [dp.replica_threads(c, n) for c, n in [(1, 2), (2, 2), (4, 2), (5, 2), (8, 3), (16, 1)]] == [1, 1, 2, 2, 2, 16]
    for args, name in [((0, 2), "cpu_threads"), ((2.0, 2), "cpu_threads"), ((True, 2), "cpu_threads"),
                       ((2, 0), "n_replicas"), ((2, "2"), "n_replicas")]:
        with pytest.raises(ValueError, match=name):
            dp.replica_threads(*args)


def test_threads_restored_when_a_replica_fails():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        class Fails(nn.Module):
            def forward(self, x):
                raise KeyError("boom")

        with pytest.raises(KeyError):
            dp.make_data_parallel(Fails(), device_ids=[0, 1], emulate=True)(torch.zeros(4, 1))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


def test_emulated_step_costs_a_sane_multiple_of_a_plain_step():
    # a generous bound: best of 30 steps, so a machine busy with other work does not decide it
    import time

    def best(step, n=30):
        times = []
        for _ in range(n):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return min(times)

    kwargs = dict(in_features=32, hidden=64, out_features=4)
    plain, inner = _pair(models.MLP, **kwargs)
    wrapped = dp.make_data_parallel(inner, device_ids=[0, 1], emulate=True)
    x, y = torch.randn(64, 32), torch.randn(64, 4)

    def plain_step():
        plain.zero_grad()
        F.mse_loss(plain(x), y).backward()

    def emulated_step():
        wrapped.zero_grad()
        F.mse_loss(wrapped(x), y).backward()

    plain_step(), emulated_step()
    plain_seconds, emulated_seconds = best(plain_step), best(emulated_step)
    assert emulated_seconds < 20 * plain_seconds + 2e-3, (emulated_seconds, plain_seconds)
    backward = min(s.phase_seconds()["backward"] for s in wrapped.steps[-30:])
    assert backward < 20 * plain_seconds + 2e-3, (backward, plain_seconds)


def test_chunk_forbidden_refuses_chunk_and_the_helpers_then_restores_them():
    from helpers.dataparallel import split_sizes

    with dp.chunk_forbidden("no chunk"):
        for call in (lambda: torch.chunk(torch.arange(4), 2), lambda: torch.arange(4).chunk(2),
                     lambda: split_sizes(4, 2), lambda: dp.split_sizes(4, 2), lambda: dp.split_indices(4, 2)):
            with pytest.raises(AssertionError, match="no chunk"):
                call()
        assert [len(c) for c in torch.arange(5).split(2)] == [2, 2, 1]  # other APIs still work
    assert split_sizes(10, 3) == [4, 4, 2] and len(torch.arange(4).chunk(2)) == 2 and dp.split_indices(3, 2) == [[0, 1], [2]]
    with pytest.raises(ValueError, match="message"):
        with dp.chunk_forbidden(""):
            pass


def _lesson1_visible_test(grade_id):
    """Lesson 1's test cell for an exercise, without its hidden tests: what a student sees and runs."""
    import nbformat

    from conftest import REPO

    nb = nbformat.read(REPO / "solutions" / "01-dataparallel" / "01-dataparallel.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return source.split("### BEGIN HIDDEN TESTS")[0]


def _lesson1_namespace():
    import os
    import threading

    from helpers import checkpoints, compare, data, grading, memory, plotting

    return dict(torch=torch, F=F, nn=nn, dp=dp, models=models, memory=memory, checkpoints=checkpoints, data=data,
                plotting=plotting, grading=grading, compare=compare, os=os, threading=threading)


@pytest.mark.parametrize("grade_id, answer", [
    ("dp_gradients", "mean of the chunks' mean losses"),  # passed the old, even visible test (12 over 2)
    ("split_sizes", "calls torch.chunk (forbidden)"),  # the text forbade it, the test did not
    ("split_sizes", "calls Tensor.chunk (forbidden)"),
    ("split_sizes", "calls the course's helper (forbidden)"),
])
def test_lesson1_visible_tests_already_reject_the_common_mistakes(grade_id, answer):
    from answers_01 import ANSWERS

    namespace = _lesson1_namespace()
    exec(ANSWERS["01-dataparallel"][grade_id]["wrong"][answer], namespace)
    with pytest.raises(AssertionError):
        exec(_lesson1_visible_test(f"{grade_id}_tests"), namespace)


def test_lesson1_gradients_test_accepts_model_forward():
    # the hidden test once counted calls with a forward pre-hook on the model, which model.forward(x) bypasses
    from answers_01 import ANSWERS

    import nbformat

    from conftest import REPO

    nb = nbformat.read(REPO / "solutions" / "01-dataparallel" / "01-dataparallel.ipynb", as_version=4)
    test = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "dp_gradients_tests")
    namespace = _lesson1_namespace()
    exec(ANSWERS["01-dataparallel"]["dp_gradients"]["right"]["model.forward instead of model(...)"], namespace)
    exec(test, namespace)  # visible and hidden


def test_the_emulated_backward_is_torchs_reduce_add_coalesced():
    from unittest import mock

    real = dp.comm.reduce_add_coalesced
    calls = []

    def spy(inputs, destination=None, *args, **kwargs):
        calls.append((len(inputs), destination))
        return real(inputs, destination, *args, **kwargs)

    net = models.seeded(models.MLP, in_features=8, hidden=16, out_features=2)
    wrapped = dp.make_data_parallel(net, device_ids=[0, 1, 2], emulate=True)
    with mock.patch.object(dp.comm, "reduce_add_coalesced", spy):
        F.mse_loss(wrapped(torch.randn(9, 8)), torch.randn(9, 2)).backward()
    assert calls == [(3, 0)], "one reduction of the three replicas' gradients onto device 0"
    # like torch's: the gradients are views (.data) of one flat sum
    assert len({p.grad.untyped_storage().data_ptr() for p in net.parameters()}) == 1


def test_copies_of_frozen_parameters_are_not_differentiable_like_torchs_broadcast():
    import inspect

    functions = __import__("torch.nn.parallel._functions", fromlist=["Broadcast"])
    assert "ctx.mark_non_differentiable(*non_differentiables)" in inspect.getsource(functions.Broadcast.forward)
    net = models.seeded(models.MLP, in_features=8, hidden=16, out_features=2)
    net[0].requires_grad_(False)
    wrapped = dp.make_data_parallel(net, device_ids=[0, 1], emulate=True)
    with dp._virtual_collectives():
        replicas = nn.DataParallel.replicate(wrapped, net, [0, 1])
    for replica in replicas:
        assert not replica[0].weight.requires_grad and replica[2].weight.requires_grad
