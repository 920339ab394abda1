"""miocore tune's problem sources: the corpus sample, MIOpen FindDb keys, MIOpenDriver lines,
a PyTorch model, and their expansion by data type, direction and layout."""

from __future__ import annotations

from pathlib import Path

import pytest
from tune_fixtures import tiny_problems

from miocore.errors import InvalidArgumentError, MiocoreError
from miocore.problem.conv import ConvProblem
from miocore.tune import expand, problems_from_corpus, problems_from_finddb_text


def test_expand_gives_every_dtype_and_direction_once() -> None:
    p = ConvProblem.from_sizes("forward", n=1, c=2, k=2, in_spatial=(4, 4), filter_spatial=(3, 3))
    out = expand(
        [p, p], dtypes=["float32", "float16", "bfloat16"], directions=["forward", "backward_data"]
    )
    assert len(out) == 6
    assert {q.key.split("-")[-2] + "-" + q.key.split("-")[-1] for q in out} == {
        f"{t}-{d}" for t in ("FP32", "FP16", "BF16") for d in ("F", "B")
    }


def test_expand_rejects_an_unknown_dtype_naming_it() -> None:
    p = ConvProblem.from_sizes("forward", n=1, c=2, k=2, in_spatial=(4, 4), filter_spatial=(3, 3))
    with pytest.raises(InvalidArgumentError, match="float64") as info:
        expand([p], dtypes=["float64"])
    assert info.value.field == "dtype"


def test_expand_gives_each_layout_of_every_rank_and_keeps_the_problem() -> None:
    flat = ConvProblem.from_key("128-28-28-3x3-128-56-56-8-1x1-2x2-1x1-0-NCHW-FP16-B")
    cube = ConvProblem.from_key(
        "256-1-57-57-1x3x3-256-1-29-29-2-0x1x1-1x2x2-1x1x1-0-NCDHW-FP32-F_g32"
    )
    out = expand([flat, cube], layouts=["NHWC", "nchw"])
    assert [q.key for q in out] == [
        "128-28-28-3x3-128-56-56-8-1x1-2x2-1x1-0-NHWC-NHWC-NHWC-FP16-B",
        flat.key,
        "256-1-57-57-1x3x3-256-1-29-29-2-0x1x1-1x2x2-1x1x1-0-NDHWC-NDHWC-NDHWC-FP32-F_g32",
        cube.key,
    ]
    nhwc = out[0]
    assert (nhwc.direction, nhwc.conv, nhwc.x.lengths, nhwc.w.lengths) == (
        flat.direction,
        flat.conv,
        flat.x.lengths,
        flat.w.lengths,
    )
    assert all(d.is_packed and d.layout == "NHWC" for d in (nhwc.x, nhwc.w, nhwc.y))


def test_expand_rejects_an_unknown_layout_naming_it() -> None:
    p = ConvProblem.from_sizes("forward", n=1, c=2, k=2, in_spatial=(4, 4), filter_spatial=(3, 3))
    with pytest.raises(InvalidArgumentError, match="CHWN") as info:
        expand([p], layouts=["CHWN"])
    assert info.value.field == "layout"


def test_problems_from_a_text_finddb(tmp_path: Path) -> None:
    keys = [p.key for p in tiny_problems()[:3]]
    text = tmp_path / "gfx90a.fdb.txt"
    text.write_text("\n".join(f"{k}=miopenConvolutionFwdAlgoGEMM:1.5,0,gemm" for k in keys) + "\n")
    assert [p.key for p in problems_from_finddb_text(text)] == keys
    with pytest.raises(InvalidArgumentError):
        problems_from_finddb_text(tmp_path / "missing.txt")


def test_corpus_sample_covers_every_family() -> None:
    from miocore.corpus import find_corpus

    if find_corpus() is None:
        pytest.skip("the corpus (../shared/corpus) is not here")
    problems = problems_from_corpus(60)
    keys = [p.key for p in problems]
    assert any("1x1-" in k and "-1x1-1x1-" in k for k in keys)  # pointwise
    assert any("_g" in k for k in keys)  # grouped or depthwise
    assert any("NCDHW" in k or "NDHWC" in k for k in keys)  # 3-D
    assert any("NHWC" in k for k in keys)
    assert {k[-1] if "_g" not in k else k.split("_g")[0][-1] for k in keys} == {"F", "B", "W"}
    assert {t for t in ("FP32", "FP16", "BF16") if any(t in k for k in keys)} == {
        "FP32",
        "FP16",
        "BF16",
    }


def test_a_work_cap_cuts_only_the_batch_of_heavy_problems() -> None:
    from miocore.corpus import find_corpus

    if find_corpus() is None:
        pytest.skip("the corpus (../shared/corpus) is not here")

    def without_batch(p: ConvProblem) -> tuple[object, ...]:
        # Every other size, the filter, the convolution, layout and dtype must stay real.
        return (p.direction, p.c, p.k, p.in_spatial, p.filter_spatial, p.conv, p.x.layout, p.dtype)

    full = {without_batch(p): p for p in problems_from_corpus(30, shrink=False)}
    capped = problems_from_corpus(30, shrink=False, max_gflop=5.0)
    assert len(capped) == len(full)
    cut = 0
    for p in capped:
        same = full[without_batch(p)]
        assert p.n <= same.n
        if p.n < same.n:
            cut += 1
            assert same.flops > 5e9 and (p.flops <= 5e9 or p.n == 1)
        else:
            assert p.flops <= 5e9 or p.n == 1
    assert cut > 0


def test_problems_from_a_torch_model() -> None:
    torch = pytest.importorskip("torch")
    from miocore.tune import problems_from_torch

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, groups=8, bias=False),
    )
    problems = problems_from_torch(
        model, torch.zeros(2, 3, 16, 16), directions=["forward", "backward_weights"]
    )
    assert len(problems) == 4
    first = problems[0]
    assert (first.x.lengths, first.w.lengths, first.y.lengths) == (
        (2, 3, 16, 16),
        (8, 3, 3, 3),
        (2, 8, 16, 16),
    )
    assert problems[2].conv.groups == 8 and problems[2].conv.strides == (2, 2)


def test_problems_from_a_miopendriver_file(tmp_path: Path) -> None:
    from miocore.cli.tune import problems_from_driver_file

    lines = tmp_path / "net.txt"
    lines.write_text(
        "# two layers as MIOpen's perf_models write them\n"
        "./bin/MIOpenDriver conv --batchsize 4 --spatial_dim 2 --pad_h 1 --pad_w 1 --pad_d 0 "
        "--conv_stride_h 1 --conv_stride_w 1 --conv_stride_d 0 --dilation_h 1 --dilation_w 1 "
        "--dilation_d 0 --group_count 1 --mode conv --pad_mode default --in_h 13 --in_w 13 "
        "--fil_h 3 --fil_w 3 --in_channels 192 --out_channels 384 --forw 1\n"
        "./bin/MIOpenDriver convfp16 -n 2 -c 8 -H 8 -W 8 -k 8 -y 1 -x 1 -F 6\n"
    )
    keys = [p.key for p in problems_from_driver_file(lines)]
    assert keys == [
        "192-13-13-3x3-384-13-13-4-1x1-1x1-1x1-0-NCHW-FP32-F",
        "8-8-8-1x1-8-8-8-2-0x0-1x1-1x1-0-NCHW-FP16-B",
        "8-8-8-1x1-8-8-8-2-0x0-1x1-1x1-0-NCHW-FP16-W",
    ]
    lines.write_text("./bin/MIOpenDriver conv -n 2 --no_such_flag 3\n")
    with pytest.raises(InvalidArgumentError) as info:
        problems_from_driver_file(lines)
    assert info.value.field == "net.txt:1"


def test_the_tune_command_multiplies_problems_by_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    import miocore.tune
    from miocore.cli import tune as tune_cli

    asked: list[str] = []

    def fake_tune(problems: list[ConvProblem], **kw: object) -> object:
        asked.extend(p.key for p in problems)
        raise MiocoreError("stop after the problems are built")

    monkeypatch.setattr(miocore.tune, "tune", fake_tune)
    key = tiny_problems()[0].key
    text = tmp_path / "theirs.fdb.txt"
    text.write_text(f"{key}=miopenConvolutionFwdAlgoGEMM:1.5,0,gemm\n")
    parser = argparse.ArgumentParser()
    tune_cli.add_parser(parser.add_subparsers(dest="command"))
    argv = ["tune", "--finddb", str(text), "--out", str(tmp_path / "run"), "--layouts", "NCHW,NHWC"]
    args = parser.parse_args(argv)
    with pytest.raises(MiocoreError, match="stop after"):
        args.handler(args)
    assert asked == [key, key.replace("-NCHW-", "-NHWC-NHWC-NHWC-")]
    args = parser.parse_args([*argv[:-1], "NWHC"])
    with pytest.raises(InvalidArgumentError, match="NWHC"):
        args.handler(args)


def test_problems_from_a_torch_model_are_the_keys_its_calls_look_up() -> None:
    """Tuned keys must be the ones the front end runs: a squeeze-and-excitation layer's 1x1 map
    in a channels-last network (stored both ways: NCHW to the front end) and a channels-last
    3-D network (NDHWC) once came out NHWC and NCDHW, so their tuned records were never hit;
    transposed layers and string padding were left out."""
    torch = pytest.importorskip("torch")
    import miocore.torch as mt
    from miocore.torch import runtime
    from miocore.tune import problems_from_torch

    class Squeeze(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Conv2d(4, 8, 3, padding=1)
            self.reduce = torch.nn.Conv2d(8, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.body(x)
            return y * self.reduce(y.mean((2, 3), keepdim=True)).sum(1, keepdim=True)

    cases = [
        (Squeeze(), torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)),
        (Squeeze(), torch.randn(2, 4, 6, 6)),
        (
            torch.nn.Conv3d(3, 4, 3, padding=1),
            torch.randn(1, 3, 4, 5, 5).to(memory_format=torch.channels_last_3d),
        ),
        (torch.nn.Conv1d(3, 4, 3), torch.randn(2, 3, 9)),
        (  # what a hook on Conv1d/2d/3d alone missed: transposed layers, string padding
            torch.nn.Sequential(
                torch.nn.Conv2d(3, 4, 3, padding="same"),
                torch.nn.ConvTranspose2d(4, 2, 2, stride=2),
            ),
            torch.randn(1, 3, 6, 6).to(memory_format=torch.channels_last),
        ),
    ]
    keys = []
    for model, x in cases:
        classes = [type(m) for m in model.modules()]
        tuned = {p.key for p in problems_from_torch(model, x, directions=["forward"])}
        assert [type(m) for m in model.modules()] == classes  # the model is left as it was
        converted = mt.convert(model)
        with torch.no_grad():
            run = {p.key for _, p in runtime.collect(lambda m=converted, x=x: m(x))}
        assert tuned == run, (type(model).__name__, x.stride())
        keys.append(sorted(tuned))
    # the channels-last network: its body NHWC, its 1x1 map NCHW; the 3-D one NDHWC
    assert ["NHWC" in k for k in keys[0]] == [True, False] or ["NHWC" in k for k in keys[0]] == [
        False,
        True,
    ]
    assert not any("NHWC" in k for k in keys[1])
    assert all("NDHWC" in k for k in keys[2])
    assert len(keys[4]) == 2  # both layers of the last case
