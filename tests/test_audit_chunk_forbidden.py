"""Lesson 1's split exercise forbids torch's chunk rule: helpers.dataparallel.chunk_forbidden refuses it in torch's
dispatcher, so that no Python alias, no other thread and no route torch's own code takes reaches it."""

import threading

import pytest
import torch

import helpers.dataparallel as dp

ROUTES = {
    "torch.chunk": lambda x: torch.chunk(x, 3),
    "Tensor.chunk": lambda x: x.chunk(3),
    "an alias": lambda x: (lambda c: c(x, 3))(torch.chunk),
    "the C function": lambda x: torch._C._VariableFunctions.chunk(x, 3),
    "TensorBase": lambda x: torch._C.TensorBase.chunk(x, 3),
    "the aten overload": lambda x: torch.ops.aten.chunk.default(x, 3),
    "the aten packet": lambda x: torch.ops.aten.chunk(x, 3),
    "getattr": lambda x: getattr(torch, "ch" + "unk")(x, 3),
    "unsafe_chunk": lambda x: torch.unsafe_chunk(x, 3),
    "with autograd": lambda x: x.float().requires_grad_().chunk(3),
}


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_to_the_chunk_operator_is_refused(route):
    with dp.chunk_forbidden("no chunk"):
        with pytest.raises(AssertionError, match="no chunk"):
            ROUTES[route](torch.arange(10))
    assert [len(c) for c in ROUTES[route](torch.arange(10))] == [4, 4, 2]


def test_another_thread_is_refused_too():
    got = []

    def split():
        try:
            got.append(len(torch.arange(10).chunk(3)))
        except AssertionError as error:
            got.append(str(error))

    with dp.chunk_forbidden("no chunk"):
        thread = threading.Thread(target=split)
        thread.start()
        thread.join()
    assert got == ["no chunk"]


def test_nested_blocks_refuse_until_the_outer_one_ends_and_other_splits_work(capfd):
    with dp.chunk_forbidden("outer"):
        with dp.chunk_forbidden("inner"):
            with pytest.raises(AssertionError, match="inner"):
                torch.arange(4).chunk(2)
        with pytest.raises(AssertionError, match="outer"):
            torch.arange(4).chunk(2)
        assert [len(c) for c in torch.arange(10).split(4)] == [4, 4, 2]
    assert len(torch.arange(4).chunk(2)) == 2
    assert capfd.readouterr().err == ""  # a hidden test cell that writes to stderr scores nothing
