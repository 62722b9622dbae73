"""Lesson 3's answers (see tests/answers.py)."""

RESCUE = '''
def rescuing_scale(grad):
    scale = 1
    while grad * scale < torch.finfo(torch.float16).smallest_normal:
        scale *= 2
    return scale
'''
FATE = '''
def fp16_fate(values):
    fates = []
    for v in values:
        stored = torch.tensor(v, dtype=torch.float64).to(torch.float16)
        fates.append("overflow" if torch.isinf(stored) else "underflow" if stored == 0 and v != 0 else "ok")
    return fates
'''

AMP_STEP = '''
def amp_accumulation_step(model, optimizer, scaler, micro_batches, loss_fn, max_norm):
    k = len(micro_batches)
    optimizer.zero_grad()
    losses = []
    for x, y in micro_batches:
        with {autocast}:
            loss = loss_fn(model(x), y)
        {backward}
        losses.append(loss.item())
    {clip}
    {step}
    {update}
    return {result}
'''
RIGHT_STEP = dict(autocast="torch.autocast(x.device.type, dtype=torch.float16)",
                  backward="scaler.scale(loss / k).backward()",
                  clip="scaler.unscale_(optimizer); nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
                  step="scaler.step(optimizer)", update="scaler.update()", result="sum(losses) / k")


def amp_step(**changes):
    return AMP_STEP.format(**{**RIGHT_STEP, **changes})


SCALER = '''
def scaler_after(overflow, init_scale, growth_interval):
    scale, clean, skipped = float(init_scale), 0, 0
    for bad in overflow:
        if bad:
            {on_overflow}
        else:
            clean += 1
            if {grows}:
                scale *= 2.0
                clean = 0
    return {result}
'''
RIGHT_SCALER = dict(on_overflow="scale *= 0.5; clean = 0; skipped += 1", grows="clean == growth_interval",
                    result="scale, skipped")


def scaler(**changes):
    return SCALER.format(**{**RIGHT_SCALER, **changes})


RATIO = '''
def activation_ratio(model, x, dtype):
    def measure(enabled):
        skip = {{t.untyped_storage().data_ptr() for t in {skip}}}
        seen = {{}}

        def pack(t):
            s = t.untyped_storage()
            if s.data_ptr() not in skip:
                {record}
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast({device}, dtype=dtype, enabled=enabled):
                model(x)
        return sum(seen.values())

    return {result}
'''
RIGHT_RATIO = dict(skip="list(model.parameters()) + [x]", record="seen[s.data_ptr()] = s.nbytes()",
                   device="x.device.type", result="measure(True) / measure(False)")


def ratio(**changes):
    return RATIO.format(**{**RIGHT_RATIO, **changes})


ANSWERS = {
    "03-amp": {
        "fp16": {
            "right": {
                "numpy cast (warns on overflow)": '''
import numpy as np

def fp16_fate(values):
    fates = []
    for v in values:
        h = np.float16(v)  # RuntimeWarning: overflow encountered in cast
        fates.append("overflow" if np.isinf(h) else "underflow" if h == 0 and v != 0 else "ok")
    return fates

def rescuing_scale(grad):
    scale = 1
    while np.float64(grad) * scale < np.finfo(np.float16).smallest_normal:
        scale *= 2
    return scale
''',
                "tensor of all values, log2 for the scale": '''
import math

def fp16_fate(values):
    stored = torch.tensor(values, dtype=torch.float64).half().tolist()
    return ["overflow" if math.isinf(h) else "underflow" if h == 0 and v != 0 else "ok" for v, h in zip(values, stored)]

def rescuing_scale(grad):
    return 2 ** max(0, math.ceil(math.log2(torch.finfo(torch.float16).smallest_normal / grad)))
''',
                "frexp for the scale": FATE + '''
import math

def rescuing_scale(grad):
    mantissa, exponent = math.frexp(grad)  # grad = mantissa * 2**exponent, 0.5 <= mantissa < 1
    k = -14 - exponent + (1 if mantissa < 1 else 0)
    k = k if grad * 2.0**(k - 1) < 2.0**-14 else k - 1
    return 2 ** max(0, k)
''',
            },
            "wrong": {
                "the old rule: below 2**-24 underflows, above 65504 overflows": RESCUE + '''
def fp16_fate(values):
    return ["overflow" if abs(v) > 65504 else "underflow" if v != 0 and abs(v) < 2**-24 else "ok" for v in values]
''',
                "underflow below the smallest normal": RESCUE + '''
def fp16_fate(values):
    return ["overflow" if abs(v) >= 65520 else "underflow" if v != 0 and abs(v) < 2**-14 else "ok" for v in values]
''',
                "bf16 instead of fp16": RESCUE + FATE.replace("torch.float16", "torch.bfloat16"),
                "zero counts as underflow": RESCUE + FATE.replace("and v != 0", ""),
                "off by one at the boundary (<=)": FATE + RESCUE.replace("<", "<="),
                "scale as a float": FATE + RESCUE.replace("scale = 1\n", "scale = 1.0\n"),
                "rescues to the smallest subnormal": FATE + RESCUE.replace("smallest_normal", "tiny * 2**-10"),
                "never returns 1": FATE + RESCUE.replace("scale = 1\n", "scale = 2\n"),
            },
        },
        "predict_dtypes": {
            "right": {
                "measured with the course's table": "predicted = amp.autocast_dtypes(DEVICE, torch.bfloat16)",
                "measured by hand": '''
predicted = {}
for op, fn in amp.probe_ops(DEVICE).items():
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        predicted[op] = fn().dtype
''',
                "a comprehension over the probes, in one autocast": '''
with torch.autocast(DEVICE, dtype=torch.bfloat16):
    predicted = {op: fn().dtype for op, fn in amp.probe_ops(DEVICE).items()}
''',
                "written out by the rules": '''
if DEVICE == "cuda":  # CUDA autocast runs its fp32 list in fp32
    stays_low = ("linear", "matmul", "conv2d", "relu(linear)")
else:  # CPU autocast: only the losses are promoted
    stays_low = tuple(op for op in amp.probe_ops("cpu") if "loss" not in op and "entropy" not in op)
predicted = dict.fromkeys(amp.probe_ops("cpu"), torch.float32)
predicted.update(dict.fromkeys(stays_low, torch.bfloat16))
''',
            },
            "wrong": {
                "CUDA's rules on the CPU": '''
low = {"linear", "matmul", "conv2d", "relu(linear)"}
predicted = {op: torch.bfloat16 if op in low else torch.float32 for op in amp.probe_ops("cpu")}
''',
                "everything bf16": "predicted = {op: torch.bfloat16 for op in amp.probe_ops('cpu')}",
                "dtypes as strings": "predicted = {op: str(dt) for op, dt in amp.autocast_dtypes(DEVICE, torch.bfloat16).items()}",
                "fp16 autocast's table": "predicted = amp.autocast_dtypes(DEVICE, torch.float16)",
                "everything fp32": "predicted = {op: torch.float32 for op in amp.probe_ops('cpu')}",
            },
        },
        "scaler": {
            "right": {
                "a real GradScaler": '''
def scaler_after(overflow, init_scale, growth_interval):
    if not overflow:
        return float(init_scale), 0
    steps = amp.scaler_trajectory(overflow, init_scale=init_scale, growth_interval=growth_interval, device="cpu")
    return float(steps[-1]["next_scale"]), sum(s["skipped"] for s in steps)
''',
                "counting growths and backoffs": '''
def scaler_after(overflow, init_scale, growth_interval):
    factor, clean = 1.0, 0
    for bad in overflow:
        clean = 0 if bad else clean + 1
        factor *= 0.5 if bad else (2.0 if clean % growth_interval == 0 else 1.0)
    return float(init_scale) * factor, sum(1 for bad in overflow if bad)
''',
                "the solution": scaler(),
                "the state in a dict": '''
def scaler_after(overflow, init_scale, growth_interval):
    state = {"scale": float(init_scale), "clean": 0, "skipped": 0}
    for bad in overflow:
        if bad:
            state.update(scale=state["scale"] / 2, clean=0, skipped=state["skipped"] + 1)
        else:
            state["clean"] += 1
            if state["clean"] == growth_interval:
                state.update(scale=state["scale"] * 2, clean=0)
    return state["scale"], state["skipped"]
''',
            },
            "wrong": {
                "a floor at 1.0": scaler(on_overflow="scale = max(1.0, scale * 0.5); clean = 0; skipped += 1"),
                "clean steps not reset by an overflow": scaler(on_overflow="scale *= 0.5; skipped += 1"),
                "grows one step late": scaler(grows="clean > growth_interval"),
                "backs off by 4": scaler(on_overflow="scale *= 0.25; clean = 0; skipped += 1"),
                "counts the clean steps as skipped": scaler(result="scale, len(overflow) - skipped"),
                "scale as an int": scaler(result="int(scale), skipped"),
            },
        },
        "activation_ratio": {
            "right": {
                "the course's counter": '''
def activation_ratio(model, x, dtype):
    return amp.saved_activation_bytes(model, x, dtype) / amp.saved_activation_bytes(model, x)
''',
                "the solution": ratio(),
                "the device type from x.device, by keyword": ratio(device="device_type=x.device.type"),
                "storages kept in a dict by pointer, measured in one function": '''
def activation_ratio(model, x, dtype):
    ignore = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    totals = []
    for enabled in (True, False):
        sizes = {}
        def pack(t):
            if t.untyped_storage().data_ptr() not in ignore:
                sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast(x.device.type, dtype=dtype, enabled=enabled):
            model(x)
        totals.append(sum(sizes.values()))
    return totals[0] / totals[1]
''',
            },
            "wrong": {
                "counts the parameters": ratio(skip="[x]"),
                "counts every saved tensor, no dedupe": ratio(record="seen[len(seen)] = s.nbytes()"),
                "the inverse ratio": ratio(result="measure(False) / measure(True)"),
                "autocast on cuda (a no-op on the CPU)": ratio(device='"cuda"'),
                # the device type written in the code: right on a CPU batch, wrong on any other
                'autocast hard-coded to "cpu"': ratio(device='"cpu"'),
                "the machine's autocast device, not x's": ratio(device="amp.device_type()"),
                "counts the input x": ratio(skip="list(model.parameters())"),
                "bytes of the outputs instead of the saved tensors": '''
def activation_ratio(model, x, dtype):
    with torch.autocast(x.device.type, dtype=dtype):
        low = model(x).nbytes
    return low / model(x).nbytes
''',
                # reports the batch's autocast to whatever watches the model's layers, counts under the CPU's
                "counts under the CPU's autocast, shows the batch's to the model's hooks": '''
def activation_ratio(model, x, dtype):
    def measure(enabled):
        held = [(m, dict(m._forward_pre_hooks), dict(m._forward_hooks)) for m in model.modules()]
        for m, _, _ in held:
            m._forward_pre_hooks.clear()
            m._forward_hooks.clear()
        try:
            skip = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + [x]}
            seen = {}

            def pack(t):
                if t.untyped_storage().data_ptr() not in skip:
                    seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with torch.autocast("cpu", dtype=dtype, enabled=enabled):
                    model(x)
            return sum(seen.values())
        finally:
            for m, pre, post in held:
                m._forward_pre_hooks.update(pre)
                m._forward_hooks.update(post)

    ratio = measure(True) / measure(False)
    with torch.no_grad():
        with torch.autocast(x.device.type, dtype=dtype):
            model(x)
        model(x)
    return ratio
''',
            },
        },
        "amp_step": {
            "right": {
                "the solution": amp_step(),
                "the deprecated clip_grad_norm spelling (warns)": amp_step(
                    clip="scaler.unscale_(optimizer); nn.utils.clip_grad_norm(model.parameters(), max_norm)"),
                "torch.amp.autocast, the device from str(x.device)": amp_step(
                    autocast='torch.amp.autocast(str(x.device).split(":")[0], dtype=torch.float16)'),
                "1/k on the scaled loss, torch.half, losses kept as tensors": '''
def amp_accumulation_step(model, optimizer, scaler, micro_batches, loss_fn, max_norm):
    optimizer.zero_grad(set_to_none=False)
    losses = []
    for x, y in micro_batches:
        with torch.autocast(device_type=x.device.type, dtype=torch.half):
            out = model(x)
        loss = loss_fn(out.float(), y)
        (scaler.scale(loss) / len(micro_batches)).backward()
        losses.append(loss.detach())
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    scaler.step(optimizer)
    scaler.update()
    return torch.stack(losses).mean().item()
''',
                "weights by the micro-batch's share of the rows": '''
def amp_accumulation_step(model, optimizer, scaler, micro_batches, loss_fn, max_norm):
    n = sum(len(x) for x, _ in micro_batches)
    for p in model.parameters():
        p.grad = None
    total = 0.0
    for x, y in micro_batches:
        with torch.autocast(x.device.type, torch.float16):
            loss = loss_fn(model(x), y) * (len(x) / n)
        scaler.scale(loss).backward()
        total += loss.item()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(list(model.parameters()), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return total
''',
                "clip_grad_norm_ over the optimizer's params, one autocast for the loop": '''
def amp_accumulation_step(model, optimizer, scaler, micro_batches, loss_fn, max_norm):
    optimizer.zero_grad()
    k = len(micro_batches)
    total = 0.0
    with torch.autocast(micro_batches[0][0].device.type, dtype=torch.float16):
        for x, y in micro_batches:
            loss = loss_fn(model(x), y) / k
            scaler.scale(loss).backward()
            total += loss.item()
    scaler.unscale_(optimizer)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    nn.utils.clip_grad_norm_(params, max_norm)
    scaler.step(optimizer)
    scaler.update()
    return total
''',
            },
            "wrong": {
                "no autocast (fp32 through the scaler)": amp_step(autocast="contextlib.nullcontext()").replace(
                    "def amp_accumulation_step", "import contextlib\n\ndef amp_accumulation_step"),
                "bf16 instead of fp16": amp_step(autocast="torch.autocast(x.device.type, dtype=torch.bfloat16)"),
                "optimizer.step() directly: overflowing steps are not skipped": amp_step(step="optimizer.step()"),
                "autocast on cuda while x is on the CPU": amp_step(autocast='torch.autocast("cuda", dtype=torch.float16)'),
                # the device type written in the code: right on a CPU batch, wrong on any other
                'autocast hard-coded to "cpu"': amp_step(autocast='torch.autocast("cpu", dtype=torch.float16)'),
                "the deprecated CPU spelling: the CPU's autocast whatever the batch (warns)": amp_step(
                    autocast="torch.cpu.amp.autocast(dtype=torch.float16)"),
                "the notebook's DEVICE, not the batch's": amp_step(autocast="torch.autocast(DEVICE, dtype=torch.float16)"),
                "clips the scaled gradients": amp_step(clip="nn.utils.clip_grad_norm_(model.parameters(), max_norm)"),
                "clips the scaled gradients, then unscales": amp_step(
                    clip="nn.utils.clip_grad_norm_(model.parameters(), max_norm); scaler.unscale_(optimizer)"),
                "no 1/k: the sum of the micro-batch gradients": amp_step(backward="scaler.scale(loss).backward()"),
                "divides by the rows instead of k": amp_step(backward="scaler.scale(loss / len(x)).backward()"),
                "never updates the scale": amp_step(update="pass"),
                "no zero_grad": amp_step().replace("    optimizer.zero_grad()\n", ""),
                "zero_grad inside the loop: only the last micro-batch counts": amp_step().replace(
                    "    optimizer.zero_grad()\n", "").replace("        with ", "        optimizer.zero_grad()\n        with ", 1),
                "returns the loss tensor": amp_step(result="torch.tensor(losses).mean()"),
                "returns the last micro-batch's loss": amp_step(result="losses[-1]"),
                "returns the sum of the losses": amp_step(result="sum(losses)"),
                "unscale_ and clip per micro-batch": amp_step(
                    backward="scaler.scale(loss / k).backward(); " + RIGHT_STEP["clip"], clip="pass"),
                "a whole AMP step per micro-batch": amp_step(
                    backward="scaler.scale(loss / k).backward(); " + "; ".join(RIGHT_STEP[key] for key in ("clip", "step", "update")),
                    clip="pass", step="pass", update="pass"),
                "one step per micro-batch, the scale updated once": amp_step(
                    backward="scaler.scale(loss / k).backward(); " + RIGHT_STEP["clip"] + "; scaler.step(optimizer); optimizer.zero_grad()",
                    clip="pass", step="pass"),
                "concatenates the micro-batches (no accumulation)": '''
def amp_accumulation_step(model, optimizer, scaler, micro_batches, loss_fn, max_norm):
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    return training.step(model, optimizer, x, y, loss_fn, autocast_dtype=torch.float16, scaler=scaler,
                         max_grad_norm=max_norm).item()
''',
                "sums the losses, one backward: every graph alive at once": '''
def amp_accumulation_step(model, optimizer, scaler, micro_batches, loss_fn, max_norm):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = sum(loss_fn(model(x), y) for x, y in micro_batches) / len(micro_batches)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
''',
                "retain_graph=True keeps every micro-batch's activations": amp_step(
                    backward="scaler.scale(loss / k).backward(retain_graph=True); kept = loss"),
                # reports one fp16 forward per micro-batch under the batch's autocast to whatever watches the model,
                # computes under the CPU's
                "computes under the CPU's autocast, shows the batch's to the model's hooks": '''
def amp_accumulation_step(model, optimizer, scaler, micro_batches, loss_fn, max_norm):
    k = len(micro_batches)
    optimizer.zero_grad()
    losses = []
    held = [(m, dict(m._forward_pre_hooks), dict(m._forward_hooks)) for m in model.modules()]
    for m, _, _ in held:
        m._forward_pre_hooks.clear()
        m._forward_hooks.clear()
    try:
        for x, y in micro_batches:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss / k).backward()
            losses.append(loss.item())
    finally:
        for m, pre, post in held:
            m._forward_pre_hooks.update(pre)
            m._forward_hooks.update(post)
    with torch.no_grad():
        for x, y in micro_batches:
            with torch.autocast(x.device.type, dtype=torch.float16):
                model(x)
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return sum(losses) / k
''',
            },
        },
    },
}

QUIZ_RIGHT = {"q1": "fp16", "q2": "bf16", "q3": "bf16", "q4": "fp16", "q5": "bf16"}


def _quiz(**changes):
    return f"quiz = {{**QUIZ_RIGHT, **{changes!r}}}".replace("QUIZ_RIGHT", repr(QUIZ_RIGHT))


ANSWERS["03-amp"]["quiz"] = {
    "right": {
        "written out": "quiz = " + repr(QUIZ_RIGHT),
        "built with dict()": 'quiz = dict(q5="bf16", q4="fp16", q3="bf16", q2="bf16", q1="fp16")',
        "filled in one by one": "quiz = {}\n" + "".join(f"quiz[{q!r}] = {a!r}\n" for q, a in QUIZ_RIGHT.items()),
    },
    "wrong": {
        "bf16 on a T4": _quiz(q1="bf16"),
        "fp16 without a scale to manage": _quiz(q2="fp16"),
        "fp16 for values past 100 000": _quiz(q3="fp16"),
        "bf16 for 3 significant digits": _quiz(q4="bf16"),
        "fp16 on an AMX CPU": _quiz(q5="fp16"),
        "upper case": "quiz = " + repr({q: a.upper() for q, a in QUIZ_RIGHT.items()}),
        "torch dtypes instead of names": "quiz = {q: {'fp16': torch.float16, 'bf16': torch.bfloat16}[a] for q, a in "
                                         + repr(QUIZ_RIGHT) + ".items()}",
    },
}
