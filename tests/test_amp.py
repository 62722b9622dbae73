"""Lesson 3's helpers against torch: formats, autocast, GradScaler dynamics, saved bytes, trainer."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from helpers import amp, data, launch, models, training


def test_format_table_is_torch_finfo():
    rows = {r["format"]: r for r in amp.format_table()}
    assert rows["fp16"]["largest"] == 65504 and rows["fp16"]["smallest subnormal"] == 2.0**-24
    assert rows["bf16"]["largest"] == torch.finfo(torch.bfloat16).max
    assert [rows[f]["mantissa bits"] for f in ("fp32", "fp16", "bf16")] == [23, 10, 7]
    assert [rows[f]["exponent bits"] for f in ("fp32", "fp16", "bf16")] == [8, 5, 8]
    # lesson 3: bf16 keeps about 2.4 significant decimal digits, fp16 about 3.3 (the implicit bit counts)
    digits = {f: math.log10(2 ** (rows[f]["mantissa bits"] + 1)) for f in ("fp16", "bf16")}
    assert (round(digits["fp16"], 1), round(digits["bf16"], 1)) == (3.3, 2.4)


def test_fp16_underflow_rule_of_lesson_3():
    # every float32 in [2^-26, 2^-23), one binade at a time: at or below 2^-25 -> 0 (2^-25 ties to even), strictly
    # between 2^-25 and 2^-24 -> 2^-24; in general the nearest multiple of 2^-24 (the subnormal spacing), ties to even
    for e in (-26, -25, -24):
        ends = torch.tensor([2.0**e, 2.0 ** (e + 1)]).view(torch.int32).tolist()
        v = torch.arange(*ends, dtype=torch.int32).view(torch.float32)
        half = v.half().float()
        assert (half[v <= 2**-25] == 0).all()
        assert (half[(v > 2**-25) & (v < 2**-24)] == 2**-24).all()
        assert torch.equal(half, torch.round(v * 2**24) / 2**24)
        assert torch.equal((-v).half().float(), -half)
    just_above = torch.nextafter(torch.tensor(2.0**-25), torch.tensor(1.0))
    assert torch.tensor(2.0**-25).half().item() == 0 and just_above.half().item() == 2**-24
    assert f"{torch.tensor(3e-8).half().item():.3g}" == "5.96e-08" and torch.tensor(1e-8).half().item() == 0


def test_representable_matches_fp16_rounding():
    assert amp.representable(65519.0, torch.float16) == "ok"
    assert amp.representable(65520.0, torch.float16) == "overflow"
    assert amp.representable(1e-8, torch.float16) == "underflow"
    assert amp.representable(2.0**-24, torch.float16) == "ok"
    assert amp.representable(1e-8, torch.bfloat16) == "ok"
    assert amp.representable(0.0, torch.float16) == "ok"


def test_cpu_autocast_table():
    table = amp.autocast_dtypes("cpu", torch.bfloat16)
    assert table["linear"] == table["matmul"] == table["conv2d"] == torch.bfloat16
    assert table["mse_loss(linear)"] == table["cross_entropy(linear)"] == torch.float32
    assert table["softmax(linear)"] == torch.bfloat16  # CPU autocast does not promote softmax; CUDA does
    assert amp.autocast_dtypes("cpu", torch.float16)["linear"] == torch.float16


def _rule(overflow, init_scale, interval):
    scale, clean, skipped = init_scale, 0, 0
    for bad in overflow:
        if bad:
            scale, clean, skipped = scale / 2, 0, skipped + 1
        else:
            clean += 1
            if clean == interval:
                scale, clean = scale * 2, 0
    return scale, skipped


def test_grad_scaler_dynamics_equal_the_rule_for_every_short_sequence():
    for length in range(1, 7):
        for overflow in itertools.product([False, True], repeat=length):
            for interval in (1, 2, 3):
                steps = amp.scaler_trajectory(list(overflow), init_scale=256.0, growth_interval=interval, device="cpu")
                assert (steps[-1]["next_scale"], sum(s["skipped"] for s in steps)) == _rule(overflow, 256.0, interval)
                assert [s["skipped"] for s in steps] == list(overflow)


def test_default_scaler_starts_at_65536():
    assert amp.scaler_trajectory([False], device="cpu")[0]["scale"] == 65536.0


def test_saved_bytes_shrink_for_large_batches_and_count_weight_copies():
    net = models.MLP(64, 256, 10, depth=3)
    big = torch.randn(1024, 64)
    ratio = amp.saved_activation_bytes(net, big, torch.bfloat16) / amp.saved_activation_bytes(net, big)
    assert 0.55 < ratio < 0.7
    small = torch.randn(4, 64)  # the bf16 weight copies dominate
    assert amp.saved_activation_bytes(net, small, torch.bfloat16) > amp.saved_activation_bytes(net, small)
    fp32 = amp.saved_activation_bytes(net, big)
    assert fp32 == 3 * 1024 * 256 * 4  # three ReLU outputs


def test_a_batch_said_to_be_elsewhere_shows_which_autocast_the_code_entered():
    """Lesson 3's hidden tests catch an autocast device written in the code, on a CPU: the batch says it is on
    SIMULATED_DEVICE, and torch's own autocast state, read in the forward, says for which device autocast is on."""
    net, x = models.MLP(8, 16, 2), torch.randn(4, 8)
    seen = []
    net.register_forward_pre_hook(lambda module, args: seen.append(amp.autocast_state()))
    there = amp.elsewhere(x)
    assert there.device.type == amp.SIMULATED_DEVICE and torch.equal(there, x) and there.data_ptr() == x.data_ptr()
    for device_type in (there.device.type, "cpu"):
        with torch.autocast(device_type, dtype=torch.float16):
            out = net(there)
        assert type(out) is torch.Tensor and out.device.type == "cpu"  # computed on the CPU, as plain tensors
    net(there)
    assert seen == [amp.autocast_on(amp.SIMULATED_DEVICE, torch.float16), amp.autocast_on("cpu", torch.float16),
                    amp.autocast_on(None)]
    assert amp.autocast_on("cpu", torch.float16) == {"cpu": torch.float16, amp.SIMULATED_DEVICE: None}
    # the right answers of lesson 3 that take the device from x run there (their autocast leaves the CPU's maths fp32)
    assert amp.saved_activation_bytes(net, there, torch.bfloat16) == amp.saved_activation_bytes(net, x)
    with pytest.raises(ValueError, match="x must be a tensor on the CPU"):
        amp.elsewhere(there)


def _relative(a, b):
    return ((a - b).norm() / b.norm()).item()


def test_the_micro_batch_reference_is_the_exercises_step_done_by_torch():
    """Lesson 3's amp_step is judged by the weights, the scale and the loss of the step the exercise asks for, as torch
    takes it on the same micro-batches (amp.micro_batch_reference): one micro-batch is the whole batch's AMP step
    (helpers.training.step); several equal it up to fp16 rounding, which tells fp16 from fp32; micro-batches said to be
    on another device are stepped under that device's autocast, in fp32 on the CPU."""
    case = dict(k=1, rows=8, max_norm=0.5, steps=3, seed=3, bad={1: 0}, init_scale=2.0**8, growth_interval=2)
    for mine, whole in zip(amp.micro_batch_reference(**case), amp.accumulation_reference(**case)):
        assert mine["scale"] == whole["scale"] and torch.equal(mine["moved"], whole["moved"])
        assert mine["loss"] == pytest.approx(whole["loss"], rel=1e-6, nan_ok=True)
    assert not amp.micro_batch_reference(**case)[1]["moved"].any(), "a micro-batch with an inf: the step is skipped"
    case.update(k=4, bad={})
    micro, whole = amp.micro_batch_reference(**case), amp.accumulation_reference(**case)
    assert all(1e-6 < _relative(m["moved"], w["moved"]) < 1e-2 for m, w in zip(micro, whole))
    there = amp.micro_batch_reference(**case, elsewhere=True)
    assert all(_relative(t["moved"], m["moved"]) > 1e-4 for t, m in zip(there, micro)), "fp32 there, fp16 here"
    fp32 = models.seeded(models.MLP, 3, in_features=16, hidden=32, out_features=2)
    optimizer = torch.optim.SGD(fp32.parameters(), lr=0.05)
    for t, micro_batches in zip(there, amp.accumulation_batches(4, 8, 3, 3)):
        fp32.load_state_dict(t["start"])
        before = [p.detach().clone() for p in fp32.parameters()]
        x, y = torch.cat([x for x, _ in micro_batches]), torch.cat([y for _, y in micro_batches])
        training.step(fp32, optimizer, x, y, F.mse_loss, max_grad_norm=0.5)  # no autocast, no scaler: plain fp32
        moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(fp32.parameters(), before)])
        assert _relative(t["moved"], moved) < 1e-5
    with pytest.raises(ValueError, match="elsewhere"):
        amp.micro_batch_reference(2, 4, 1.0, elsewhere="yes")


def test_amp_trainer_tracks_fp32_with_a_scaler_and_clipping():
    dataset = data.regression(256, 16, 2)
    curves = {}
    for name, dtype, scaler in [("fp32", None, None), ("fp16", torch.float16, torch.amp.GradScaler("cpu"))]:
        net = models.seeded(models.MLP, 0, in_features=16, hidden=32, out_features=2)
        loader = DataLoader(dataset, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
        curves[name] = training.train(net, loader, torch.optim.SGD(net.parameters(), lr=0.05), F.mse_loss, epochs=2,
                                      progress=False, autocast_dtype=dtype, scaler=scaler, max_grad_norm=1.0)
    assert curves["fp16"][-1] < curves["fp16"][0]
    assert max(abs(a - b) for a, b in zip(*curves.values())) < 0.02


def test_ddp_with_autocast_tracks_fp32():
    curves = {name: launch.launch(amp.amp_worker, 2, args=(name, 10))[0]["losses"] for name in ("fp32", "bf16")}
    assert abs(curves["fp32"][-1] - curves["bf16"][-1]) < 0.02


def test_step_seconds_stop_early_once_the_time_is_spent(monkeypatch):
    """max_seconds bounds the measured steps (after the warm-up, at least one); without it every step runs."""
    calls, clock = [], iter(range(0, 1000, 2))  # each step "takes" 2 s
    monkeypatch.setattr(amp.training, "step", lambda *args: calls.append(args))
    monkeypatch.setattr(amp.time, "perf_counter", lambda: next(clock))
    net, x, y = models.MLP(16, 8, 2), torch.randn(4, 16), torch.randn(4, 2)
    assert amp.step_seconds(net, x, y, None, steps=5, max_seconds=3) == 2 and len(calls) == 1 + 2
    calls.clear()
    assert amp.step_seconds(net, x, y, None, steps=5, max_seconds=0.5) == 2 and len(calls) == 1 + 1
    calls.clear()
    assert amp.step_seconds(net, x, y, None, steps=5) == 2 and len(calls) == 1 + 5


def test_step_seconds_are_measured():
    net = models.MLP(16, 32, 2)
    assert amp.step_seconds(net, torch.randn(8, 16), torch.randn(8, 2), torch.bfloat16, steps=2) > 0


@pytest.mark.parametrize("call, match", [
    (lambda: amp.autocast_dtypes("tpu"), "device"),
    (lambda: amp.autocast_dtypes("cpu", torch.float32), "dtype"),
    (lambda: amp.saved_activation_bytes("net", torch.ones(1)), "model"),
    (lambda: amp.scaler_trajectory([True], init_scale=0), "init_scale"),
    (lambda: amp.scaler_trajectory([True], growth_interval=0), "growth_interval"),
    (lambda: amp.step_seconds(models.MLP(), torch.ones(1, 32), torch.ones(1, 4), None, steps=0), "steps"),
    (lambda: training.train(models.MLP(), [], torch.optim.SGD(models.MLP().parameters(), lr=1), F.mse_loss,
                            autocast_dtype=torch.float64), "autocast_dtype"),
    (lambda: training.train(models.MLP(), [], torch.optim.SGD(models.MLP().parameters(), lr=1), F.mse_loss,
                            scaler="yes"), "scaler"),
    (lambda: training.step(models.MLP(), None, torch.ones(1, 32), None, F.mse_loss, torch.int8), "autocast_dtype"),
    (lambda: training.step(models.MLP(), None, torch.ones(1, 32), None, F.mse_loss, max_grad_norm=0), "max_grad_norm"),
    (lambda: amp.step_seconds(models.MLP(), torch.ones(1, 32), torch.ones(1, 4), torch.float32), "dtype"),
    (lambda: amp.step_seconds(models.MLP(), torch.ones(1, 32), torch.ones(1, 4), None, max_seconds=0), "max_seconds"),
    (lambda: amp.matmul_tflops(n=0), "n"),
    (lambda: amp.amp_worker(0, 1, "fp8"), "dtype_name"),
    (lambda: amp.autocast_on("cuda", torch.float16), "device_type"),
    (lambda: amp.autocast_on("cpu"), "dtype"),
    (lambda: amp.elsewhere([1.0]), "x must be a tensor"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_matmul_throughput_needs_a_gpu():
    with pytest.raises(ValueError, match="GPU"):
        amp.matmul_tflops()
