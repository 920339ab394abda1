"""MIOpenDriver compatibility of ``miocore conv``: MIOpen's own lines, flags, -S and output."""

from __future__ import annotations

import re
from pathlib import Path

import needs
import pytest

import miocore
from miocore import cli
from miocore.cli import miopen_solvers
from miocore.cli.driver_flags import parse_driver_line, problems_from_line, split_driver_line

PERF_MODELS = Path(__file__).resolve().parents[2] / "shared" / "miopen" / "perf_models"
SMALL = "-n 2 -c 4 -H 7 -W 6 -k 6 -y 3 -x 3 -p 1 -q 1"


@pytest.fixture(autouse=True)
def _user_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(tmp_path / "user-db"))


def _perf_model_lines() -> list[tuple[str, int, str]]:
    if not PERF_MODELS.is_dir():
        pytest.skip(f"MIOpen's perf_models are not at {PERF_MODELS}")
    return [
        (path.name, number, line)
        for path in sorted(PERF_MODELS.glob("*.txt"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line.strip()
    ]


def test_every_perf_models_line_parses() -> None:
    lines = _perf_model_lines()
    assert len(lines) >= 3000  # the README says 3,564
    refused = []
    directions = set()
    for name, number, line in lines:
        try:
            problems = problems_from_line(line)
        except miocore.MiocoreError as exc:
            refused.append(f"{name}:{number}: {exc}")
            continue
        assert len(problems) == 1  # each line names one direction with --forw
        directions.add(problems[0].direction)
    assert refused == []
    assert len(directions) == 3


def _shrunk(line: str) -> str:
    """The line with batch 1, at most 4 channels and 9 pixels: the same geometry, small."""
    _, args = parse_driver_line(line)
    values = {
        "batchsize": 1,
        "in_channels": min(args.in_channels, 4 * args.group_count),
        "out_channels": min(args.out_channels, 4 * args.group_count),
        "in_h": min(args.in_h, max(9, args.fil_h)),
        "in_w": min(args.in_w, max(9, args.fil_w)),
    }
    for dest, value in values.items():
        line = re.sub(rf"--{dest} \d+", f"--{dest} {value}", line)
    return line


@needs.plugins("direct", "gemm", "winograd")
def test_a_few_perf_models_lines_run_on_the_cpu(tmp_path: Path, capsys) -> None:
    lines = _perf_model_lines()
    # A spread of geometries: every 600th line (3x3, 1x1, strided, 5x5, 7x7; all directions).
    picked = [_shrunk(line) for _, _, line in lines[::600]]
    listing = tmp_path / "lines.txt"
    listing.write_text("# shrunk MIOpen perf_models lines\n" + "\n".join(picked) + "\n")
    status = cli.main(["conv", "--from-file", str(listing), "-V", "1", "--quiet"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.count("Verifies OK on CPU reference") == len(picked)
    assert out.count("MIOpen ") == len(picked)


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        ("--conv_stride_d 0 --dilation_d 0 --pad_d 0 --in_d 1 --fil_d 1", None),
        ("--pad_mode valid -p 3 -q 3", "pads (0, 0)"),
        ("--pad_mode same -u 2 -v 2", "y 2x6x4x3"),
        ("-z same", "pads (1, 1)"),
    ],
)
def test_depth_fields_and_pad_modes(flags: str, problem: str | None, capsys) -> None:
    assert cli.main(["conv", *SMALL.split(), *flags.split(), "-F", "1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4-7-6-3x3-6" in out
    if problem:
        assert problem in out


def test_depth_fields_still_checked_in_3d(capsys) -> None:
    assert cli.main(["conv", "-_", "3", "--conv_stride_d", "0", "--dry-run"]) == 2
    assert "--conv_stride_d=0" in capsys.readouterr().err


def test_every_miopendriver_flag_is_accepted(capsys) -> None:
    ignored = "-r 1 -C /tmp/c -o 0 -b 0 -Z 0 -L 1 -a b.bin -G 0"
    files = "-d in.bin -e w.bin -D dy.bin"  # read only when a run needs them
    line = f"conv {SMALL} -F 1 -P 1 -w 0 {ignored} {files} -U -1 -T -1 -R -1 -z default -~ 0"
    command, args = parse_driver_line(line)
    assert command == "conv" and args.wall == 0 and args.pad_val == "1"
    assert cli.main([*line.split(), "--dry-run"]) == 0
    err = capsys.readouterr().err
    # Only non-default values of the ignored flags are reported, each once.
    assert "-r/--pad_val=1 ignored" in err and "-a/--in_bias=b.bin ignored" in err
    assert "-U/--in_cast_type" not in err and "-b/--bias" not in err and "in.bin" not in err


def test_line_forms() -> None:
    assert split_driver_line("./bin/MIOpenDriver convfp16 -n 2") == ("convfp16", ["-n", "2"])
    assert split_driver_line("miocore convbfp16 -n 2  # comment") == ("convbfp16", ["-n", "2"])
    assert split_driver_line("-n 2") == ("conv", ["-n", "2"])
    with pytest.raises(miocore.InvalidArgumentError, match="convint8"):
        split_driver_line("MIOpenDriver convint8 -n 2")
    with pytest.raises(miocore.InvalidArgumentError, match="--bogus"):
        problems_from_line("conv --bogus 3")


def test_transposed_empty_output_blames_the_padding(capsys) -> None:
    argv = ["conv", "-m", "trans", "-W", "4", "-H", "4", "-x", "1", "-y", "1", "-p", "2", "-q", "2"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "-p/--pad_h, -q/--pad_w=(2, 2)" in err and "transposed" in err
    assert "larger than the padded input" not in err


def _lines(out: str, prefix: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(prefix)]


@needs.plugins("direct", "gemm", "winograd")
def test_miopendriver_output_lines_with_time(capsys) -> None:
    argv = ["conv", *SMALL.split(), "-F", "1", "-t", "1", "-i", "3", "-w", "1", "--quiet"]
    assert cli.main([*argv, "-S", "ConvDirectNaiveConvFwd"]) == 0
    out = capsys.readouterr().out
    naive = next(s for s in miocore.solvers() if s.name == "direct.naive")
    assert _lines(out, "MIOpen Forward Conv. Algorithm:") == [
        f"MIOpen Forward Conv. Algorithm: 1, Solution: {naive.id}/direct.naive"
    ]
    (kernel,) = _lines(out, "GPU Kernel Time Forward Conv. Elapsed:")
    assert re.fullmatch(
        r"GPU Kernel Time Forward Conv\. Elapsed: \d+\.\d{6} ms \(average\)", kernel
    )
    assert re.fullmatch(
        r"Wall-clock Time Forward Conv\. Elapsed: \d+\.\d{6} ms",
        _lines(out, "Wall-clock")[0],
    )
    header, values = _lines(out, "stats:")
    assert header.startswith("stats: name, n, c, ho, wo, x, y, k, flopCnt")
    fields = [f.strip() for f in values.removeprefix("stats:").split(",")]
    problem = problems_from_line(f"conv {SMALL} -F 1")[0]
    assert fields[:8] == ["fwd-conv3x3u1", "2", "4", "7", "6", "3", "3", "6"]
    assert int(fields[8]) == problem.flops


@needs.plugins("direct", "gemm", "winograd")
def test_no_find_time_without_t(capsys) -> None:
    assert cli.main(["conv", *SMALL.split(), "-F", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "MIOpen Backward Data Conv. Algorithm:" in out
    assert "time:" not in out and "GPU Kernel Time" not in out and "stats:" not in out


@needs.plugins("direct", "gemm", "winograd")
def test_printconv_zero_drops_the_problem_line(capsys) -> None:
    assert cli.main(["conv", *SMALL.split(), "-F", "1", "-P", "0", "-V", "0", "--quiet"]) == 0
    assert "miocore conv: x " not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("spec", "expected", "flags"),
    [
        ("ConvDirectNaiveConvFwd", "direct.naive", "-F 1"),
        ("85", "direct.naive", "-F 1"),
        ("ConvDirectNaiveConvWrw", "direct.naive", "-F 4"),
        ("ConvBinWinogradRxSf2x3", "winograd.fused", "-F 1"),
        ("53", "winograd.fused", "-F 1"),
        ("53", "winograd.rxs", "-F 4"),  # backward weights: the next of the list
        ("GemmFwdRest", "gemm.im2col", "-F 1"),
        ("direct.naive", "direct.naive", "-F 1"),
    ],
)
@needs.plugins("direct", "gemm", "winograd")
def test_solution_takes_miopen_names_and_ids(spec: str, expected: str, flags: str, capsys) -> None:
    argv = ["conv", *SMALL.split(), *flags.split(), "-S", spec, "--quiet"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"/{expected}" in _lines(out, "MIOpen ")[0]
    assert "Verifies OK" in out


@needs.plugins("direct", "gemm", "winograd")
def test_unmapped_solution_lists_the_closest(capsys) -> None:
    assert cli.main(["conv", *SMALL.split(), "-F", "1", "-S", "ConvBinWinogradRxSf2x4"]) == 2
    err = capsys.readouterr().err
    assert "-S/--solution='ConvBinWinogradRxSf2x4'" in err
    assert "closest: ConvBinWinogradRxSf2x3" in err


@needs.plugins("direct", "gemm", "winograd")
def test_mapped_solution_that_cannot_apply_exits_2(capsys) -> None:
    # MIOpen's 1x1 GEMM on a 3x3 filter: no mapped miocore solver applies.
    assert cli.main(["conv", *SMALL.split(), "-F", "1", "-S", "GemmFwd1x1_0_1"]) == 2
    assert "GemmFwd1x1_0_1" in capsys.readouterr().err


def test_mapping_table_is_consistent() -> None:
    ids = [sid for sid, _, _ in miopen_solvers.MIOPEN_SOLVERS]
    names = [name for _, name, _ in miopen_solvers.MIOPEN_SOLVERS]
    assert len(set(ids)) == len(ids) and len(set(names)) == len(names)
    # MIOpen's FindDb names its solvers; the common ones must be mapped.
    for name in ("ConvBinWinogradRxSf3x2", "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC"):
        assert name in names


def test_dry_run_shows_problems_and_keys(capsys) -> None:
    assert cli.main(["convfp16", *SMALL.split(), "-F", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "Forward Convolution: 4-7-6-3x3-6-7-6-2-1x1-1x1-1x1-0-NCHW-FP16-F" in out
    assert "Backward Data Convolution: 6-7-6-3x3-4-7-6-2-1x1-1x1-1x1-0-NCHW-FP16-B" in out
    assert "Verifies" not in out


def test_from_file_runs_every_line_and_flags_beside_win(tmp_path: Path, capsys) -> None:
    listing = tmp_path / "lines.txt"
    listing.write_text(
        f"./bin/MIOpenDriver conv {SMALL} -F 1\n\n# a comment\nconvfp16 {SMALL} -F 2 -g 2\n"
    )
    assert cli.main(["conv", "--from-file", str(listing), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "-NCHW-FP32-F" in out and "-NCHW-FP16-B_g2" in out
    listing.write_text(f"conv {SMALL} -F 1\nconv --bogus 1\n")
    assert cli.main(["conv", "--from-file", str(listing), "--dry-run"]) == 2


def test_from_file_missing_names_the_file(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.txt"
    assert cli.main(["conv", "--from-file", str(missing)]) == 2
    assert f"--from-file='{missing}'" in capsys.readouterr().err


@pytest.mark.gpu
def test_miopendriver_lines_on_the_gpu(capsys) -> None:
    """On a GPU: -S with a MIOpen name picks the GPU solver, and -t 1 prints the kernel time."""
    import os

    device = os.environ.get("MIOCORE_TEST_GPU", "cuda")
    try:
        miocore.Handle(device)
    except miocore.BackendUnavailableError:
        pytest.skip(f"no {device} device")
    argv = ["conv", "--device", device, *SMALL.split(), "-F", "1", "-t", "1", "--quiet"]
    assert cli.main([*argv, "-S", "ConvDirectNaiveConvFwd"]) == 0
    out = capsys.readouterr().out
    assert "/direct.gpu_naive" in _lines(out, "MIOpen Forward Conv. Algorithm: 1")[0]
    (kernel,) = _lines(out, "GPU Kernel Time Forward Conv. Elapsed:")
    assert float(kernel.split()[-3]) > 0
    assert "Verifies OK" in out
    # Find (no -S) on the GPU for every direction, with MIOpen's lines for each.
    assert cli.main([*argv[:-5], "-F", "0", "-t", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert len(_lines(out, "MIOpen ")) == 3 and len(_lines(out, "GPU Kernel Time")) == 3


def test_data_files_are_read_in_memory_order(tmp_path: Path) -> None:
    import numpy as np

    from miocore.cli.conv import read_buffer

    (problem,) = problems_from_line(f"conv {SMALL} -F 1 -I NHWC")
    rng = np.random.default_rng(7)
    nhwc = rng.uniform(-1, 1, size=(2, 7, 6, 4)).astype(np.float32)  # x in NHWC memory order
    path = tmp_path / "x.bin"
    nhwc.tofile(path)
    x = read_buffer(str(path), problem.x, "-d/--in_data")
    assert x.shape == (2, 4, 7, 6)
    np.testing.assert_array_equal(x, nhwc.transpose(0, 3, 1, 2))


@needs.plugins("direct", "gemm", "winograd")
def test_data_files_feed_the_run(tmp_path: Path, capsys) -> None:
    import numpy as np

    (problem,) = problems_from_line(f"conv {SMALL} -F 1")
    rng = np.random.default_rng(3)
    rng.uniform(-1, 1, size=problem.x.element_count).astype(np.float32).tofile(tmp_path / "x")
    rng.uniform(-1, 1, size=problem.w.element_count).astype(np.float32).tofile(tmp_path / "w")
    argv = ["conv", *SMALL.split(), "-F", "1", "--quiet", "-e", str(tmp_path / "w")]
    assert cli.main([*argv, "-d", str(tmp_path / "x")]) == 0
    assert "Verifies OK" in capsys.readouterr().out
    # A file of the wrong size is refused, naming the flag: the file is really read.
    np.zeros(5, dtype=np.float32).tofile(tmp_path / "short")
    assert cli.main([*argv, "-d", str(tmp_path / "short")]) == 2
    err = capsys.readouterr().err
    assert "-d/--in_data=" in err and "holds 5 float32 elements" in err


def test_from_file_refuses_nesting_and_keeps_json_clean(tmp_path: Path, capsys) -> None:
    import json

    listing = tmp_path / "lines.txt"
    listing.write_text(f"conv {SMALL} -F 1 --from-file {listing}\nconv {SMALL} -F 2\n")
    assert cli.main(["conv", "--from-file", str(listing), "--dry-run", "--json"]) == 2
    captured = capsys.readouterr()
    assert "no nesting" in captured.err
    document = json.loads(captured.out)  # the one good line, as one JSON document
    assert [p["direction"] for p in document["problems"]] == ["backward_data"]
