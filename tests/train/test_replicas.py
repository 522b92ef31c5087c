"""The two sim engines (loop, vmap) compute the same step: losses, gradients and BatchNorm running statistics."""
import pytest
import torch

from lowbw.train.models import build_model
from lowbw.train.replicas import Replicas


def _step(model_name: str, engine: str, R: int = 3, b: int = 6):
    torch.manual_seed(0)
    rep = Replicas(build_model(model_name, 10, 3, 32), R, "cpu", engine)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(b, 3, 32, 32, generator=g) * 2 + 0.5 for _ in range(R)]
    ys = [torch.randint(0, 10, (b,), generator=g) for _ in range(R)]
    before = rep.buffers.clone()
    losses, correct, _ = rep.forward_backward(xs, ys)
    return rep, before, losses, correct


@pytest.mark.parametrize("model_name", ["resnet20", "cnn"])
def test_vmap_matches_loop(model_name):
    loop, before, l_loss, l_corr = _step(model_name, "loop")
    vm, _, v_loss, v_corr = _step(model_name, "vmap")
    assert v_loss == pytest.approx(l_loss, rel=1e-4)
    assert v_corr == l_corr
    torch.testing.assert_close(vm.grads, loop.grads, rtol=1e-3, atol=1e-5)
    if loop.Q:  # BatchNorm statistics moved, and moved alike in both engines
        assert (loop.buffers - before).abs().max() > 1e-3
        torch.testing.assert_close(vm.buffers, loop.buffers, rtol=1e-4, atol=1e-6)
    for k in loop.int_buffers:
        assert torch.equal(vm.int_buffers[k], loop.int_buffers[k])
