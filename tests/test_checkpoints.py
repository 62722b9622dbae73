import pytest
import torch
from torch import nn

from helpers import checkpoints
from helpers import dataparallel as dp
from helpers import models


def _equal(a, b):
    sa, sb = checkpoints.clean_state_dict(a), checkpoints.clean_state_dict(b)
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("wrap_src", [False, True])
@pytest.mark.parametrize("wrap_dst", [False, True])
def test_save_and_load_between_wrapped_and_plain(tmp_path, wrap_src, wrap_dst):
    src = models.seeded(models.MLP, seed=1)
    dst = models.seeded(models.MLP, seed=2)
    src_model = dp.make_data_parallel(src, emulate=True) if wrap_src else src
    dst_model = nn.DataParallel(dst) if wrap_dst else dst
    checkpoints.save(src_model, tmp_path / "ckpt.pt")
    assert not any(k.startswith("module.") for k in torch.load(tmp_path / "ckpt.pt"))
    checkpoints.load(dst_model, tmp_path / "ckpt.pt")
    assert _equal(dst, src)


def test_old_prefixed_checkpoints_load_into_plain_models():
    src = models.seeded(models.MLP, seed=1)
    dst = models.seeded(models.MLP, seed=2)
    checkpoints.load_clean(dst, nn.DataParallel(src).state_dict())
    assert _equal(dst, src)


def test_the_plain_error_is_real():
    with pytest.raises(RuntimeError, match=r"(?s)Missing key\(s\).*Unexpected key\(s\)"):
        models.MLP().load_state_dict(nn.DataParallel(models.MLP()).state_dict())


class HasModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.module = nn.Linear(2, 2)


def test_a_layer_named_module_is_not_stripped():
    a, b = HasModule(), HasModule()
    checkpoints.load_clean(b, a.state_dict())
    assert torch.equal(a.module.weight, b.module.weight)
    c = HasModule()
    checkpoints.load_clean(nn.DataParallel(c), nn.DataParallel(a).state_dict())
    assert torch.equal(a.module.weight, c.module.weight)


def test_prefix_helpers():
    sd = models.MLP().state_dict()
    assert list(checkpoints.strip_prefix(checkpoints.add_prefix(sd))) == list(sd)
    assert list(checkpoints.strip_prefix(sd)) == list(sd)
    assert checkpoints.unwrap(nn.DataParallel(nn.DataParallel(m := models.MLP()))) is m


def test_bad_arguments():
    with pytest.raises(ValueError, match="state_dict"):
        checkpoints.strip_prefix([1, 2])
    with pytest.raises(ValueError, match="state_dict"):
        checkpoints.load_clean(models.MLP(), "ckpt.pt")
    with pytest.raises(ValueError, match="model"):
        checkpoints.unwrap({"weight": 1})
