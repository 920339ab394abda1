"""``miocore.torch.convert`` and ``prepare`` on a small model of every convolution kind, on
the CPU: the converted model computes what torch.nn computes, trains the same for one step,
keeps its state_dict, and refuses what miocore cannot run, naming the layer."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import miocore  # noqa: E402
import miocore.torch as mt  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_front_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_FIND_MODE", "FAST")
    mt.reset()


class SmallNet(torch.nn.Module):
    """A tiny encoder-decoder: strided, grouped, dilated, 1x1 and transposed convolutions,
    batch norm, and a Conv1d head over the flattened rows."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.block = torch.nn.Sequential(
            torch.nn.Conv2d(8, 8, 3, padding="same", groups=4),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 12, 1),
            torch.nn.Conv2d(12, 12, 3, padding=2, dilation=2),
        )
        self.up = torch.nn.ConvTranspose2d(12, 4, 3, stride=2, padding=1, output_padding=1)
        self.head = torch.nn.Conv1d(4, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.stem(x)))
        x = self.up(self.block(x))
        return self.head(x.flatten(2))


def _pair(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    reference = SmallNet()
    return reference, mt.convert(copy.deepcopy(reference))


def test_convert_swaps_every_conv_and_keeps_parameters() -> None:
    reference, model = _pair()
    kinds = {name: type(m) for name, m in model.named_modules()}
    assert kinds["stem"] is mt.Conv2d and kinds["up"] is mt.ConvTranspose2d
    assert kinds["head"] is mt.Conv1d and kinds["block.2"] is mt.Conv2d
    assert kinds["bn"] is torch.nn.BatchNorm2d
    for (name, p), (_, q) in zip(
        reference.state_dict().items(), model.state_dict().items(), strict=True
    ):
        assert torch.equal(p, q), name
    # A state_dict moves both ways between the two.
    model.load_state_dict(reference.state_dict())
    reference.load_state_dict(model.state_dict())


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_converted_model_trains_like_torch_nn(channels_last: bool) -> None:
    reference, model = _pair(seed=1)
    x = torch.randn(2, 3, 12, 10)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
        reference = reference.to(memory_format=torch.channels_last)
        model = model.to(memory_format=torch.channels_last)
    target = torch.randn(2, 2, 120)
    for net in (reference, model):
        net.train()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        loss = torch.nn.functional.mse_loss(net(x), target)
        loss.backward()
        optimizer.step()
    for (name, p), (_, q) in zip(
        reference.named_parameters(), model.named_parameters(), strict=True
    ):
        assert q.grad is not None and float(q.grad.abs().max()) > 0, name
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=name)
    reference.eval()
    model.eval()
    torch.testing.assert_close(model(x), reference(x), rtol=1e-4, atol=1e-5)


def test_convert_returns_a_converted_conv_itself() -> None:
    layer = torch.nn.Conv3d(2, 3, 2)
    assert mt.convert(layer) is layer and type(layer) is mt.Conv3d


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_convert_refuses_other_padding_modes_naming_the_layer(mode: str) -> None:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1, padding_mode=mode)),
    )
    with pytest.raises(miocore.MiocoreError, match=rf"1\.0\.padding_mode='{mode}'") as info:
        mt.convert(model)
    assert info.value.field == "1.0.padding_mode" and info.value.value == mode
    # Nothing was converted: a failed convert leaves the model as it was.
    assert type(model[0]) is torch.nn.Conv2d


def test_module_refuses_other_padding_modes() -> None:
    with pytest.raises(miocore.InvalidArgumentError, match="padding_mode='reflect'"):
        mt.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")


def test_prepare_finds_every_layer_and_direction_ahead() -> None:
    _, model = _pair(seed=2)
    x = torch.randn(2, 3, 12, 10)
    returned = mt.prepare(model, x, backward=True, progress=True)
    assert returned is model
    found = {(s.problem.direction.value, s.problem.key) for s in mt.runtime._solutions.values()}
    forward = {key for direction, key in found if direction == "forward"}
    weights = {key for direction, key in found if direction == "backward_weights"}
    assert len(forward) == 6 and len(weights) == 6  # six convolution layers
    # Every parameter's .grad and every buffer is untouched by prepare.
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(model.bn.running_mean, torch.zeros(8))
    assert int(model.bn.num_batches_tracked) == 0
    # Training afterwards finds only what prepare could not know was needed.
    before = len(mt.runtime._solutions)
    model(x.requires_grad_()).sum().backward()
    assert len(mt.runtime._solutions) == before + 1  # the stem's backward data, now needed


def test_prepare_forward_only_finds_forward_problems() -> None:
    _, model = _pair(seed=3)
    mt.prepare(model, torch.randn(1, 3, 8, 8), progress=False)
    directions = {s.problem.direction.value for s in mt.runtime._solutions.values()}
    assert directions == {"forward"}


def test_docs_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/torch.md's example runs as written."""
    page = Path(__file__).resolve().parent.parent / "docs" / "torch.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], "torch.md", "exec"), {})
    assert "torch.Size([2, 8, 30])" in capsys.readouterr().out


def test_import_miocore_does_not_import_torch() -> None:
    code = "import sys, miocore; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_prepare_backward_leaves_in_place_activations_alone() -> None:
    """A layer followed by an in-place activation (EfficientNet's blocks) is found in every
    direction; the progress count must not wrap the layer's output in a view."""
    torch.manual_seed(4)
    model = mt.convert(
        torch.nn.Sequential(
            torch.nn.Conv2d(3, 6, 3, padding=1),
            torch.nn.SiLU(inplace=True),
            torch.nn.Conv2d(6, 4, 1),
            torch.nn.ReLU(inplace=True),
        )
    )
    mt.prepare(model, torch.randn(2, 3, 9, 9), backward=True, progress=True)
    directions = sorted(s.problem.direction.value for s in mt.runtime._solutions.values())
    # The second layer's input needs a gradient, the first's does not.
    assert directions == ["backward_data"] + ["backward_weights"] * 2 + ["forward"] * 2


def test_prepare_backward_loads_no_symbolic_shapes(tmp_path: Path) -> None:
    """prepare's backward pass enters its random output gradients through a scalar, as a
    training loop's ``loss.backward()`` does: handed to ``autograd.grad`` as grad_outputs they
    make PyTorch import sympy (0.5-3.5 s per process), which plain training never loads."""
    code = (
        "import sys, torch, miocore.torch as mt\n"
        "m = mt.convert(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),"
        " torch.nn.Conv2d(4, 2, 1)))\n"
        "mt.prepare(m, torch.randn(1, 3, 6, 6), backward=True, progress=False)\n"
        "found = {s.problem.direction.value for s in mt.runtime._solutions.values()}\n"
        "assert found == {'forward', 'backward_data', 'backward_weights'}, found\n"
        "assert 'sympy' not in sys.modules, 'prepare imported sympy'\n"
    )
    env = {**os.environ, "MIOCORE_USER_DB_PATH": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)
