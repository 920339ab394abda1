"""``prepare``'s gathering pass (``miocore.torch.runtime.collect``), on the CPU: every miocore
convolution of a forward and backward pass records its problem and runs nothing, so no find
happens and no database is written; afterwards the layers run and find as usual."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import miocore.torch as mtorch  # noqa: E402
from miocore.torch import runtime  # noqa: E402


def test_the_gathering_pass_records_every_problem_and_runs_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(tmp_path))
    runtime.reset()
    model = torch.nn.Sequential(
        mtorch.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), mtorch.Conv2d(8, 4, 1)
    )
    x = torch.randn(2, 3, 9, 9)

    def one_pass() -> None:
        out = model(x)
        torch.autograd.grad(out.sum(), [p for p in model.parameters()])

    found = runtime.collect(one_pass)
    directions = sorted(p.direction.value for _, p in found)
    # two forwards, two weight gradients, one data gradient (the first layer's input needs none)
    assert directions == ["backward_data", "backward_weights", "backward_weights", "forward",
                          "forward"]  # fmt: skip
    assert {d.type for d, _ in found} == {"cpu"}
    assert not list(tmp_path.iterdir())  # nothing found, nothing written
    reference = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)
    )
    reference.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(x), reference(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(Exception, match="not reentrant"):
        runtime.collect(lambda: runtime.collect(lambda: None))
