"""MIOpen's solver names and numeric ids (``-S``) mapped to miocore solvers.

MIOpenDriver's ``-S`` takes a solver of MIOpen's registry, by name (``ConvBinWinogradRxSf2x3``)
or by its numeric id (``53``). miocore has its own solvers, so each MIOpen solver maps to the
miocore solvers of the same algorithm family and shape, in order of preference; ``-S`` runs the
first of them that is installed, runs on the device and applies to the problem. miocore's own
solver names and ids are accepted as they are. The table is in docs/cli.md.
"""

from __future__ import annotations

import difflib
from typing import Any

from miocore.errors import InvalidArgumentError, NotApplicableError
from miocore.problem.conv import ConvProblem

_DIRECT = (
    "direct.taps",
    "direct.gpu_tiled",
    "direct.gpu_depthwise",
    "direct.naive",
    "direct.gpu_naive",
)
_NAIVE = ("direct.naive", "direct.gpu_naive")
_WINOGRAD = ("winograd.fused", "winograd.rxs", "winograd.gpu_f2x3", "winograd.gpu_f4x3")
_WINOGRAD_F4 = ("winograd.rxs", "winograd.gpu_f4x3", "winograd.gpu_f2x3")
_FFT = ("fft.overlap_save", "fft.gpu_rfft")
_GEMM_1X1 = ("gemm.1x1", "gemm.gpu_nhwc")
_GEMM = ("gemm.im2col", "gemm.gpu_nhwc", "gemm.gpu_im2col")
_IGEMM_FWD = (
    "igemm.fwd",
    "igemm.gpu_wgmma",
    "igemm.gpu_mma",
    "igemm.gpu_fma",
    "igemm.gpu_wgmma_tf32",
    "igemm.gpu_tf32",
)
_IGEMM_BWD = ("igemm.bwd", "igemm.gpu_wgmma", "igemm.gpu_mma", "igemm.gpu_fma")
_IGEMM_WRW = ("igemm.wrw", "igemm.gpu_wgmma_wrw", "igemm.gpu_mma_wrw", "igemm.gpu_tf32_wrw")

#: MIOpen's convolution solvers: (numeric id, name, miocore solvers in order of preference).
#: Ids are MIOpen's registry order (src/solver.cpp); removed and non-convolution ids are absent.
MIOPEN_SOLVERS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (1, "ConvAsm3x3U", _DIRECT),
    (2, "ConvAsm1x1U", _DIRECT),
    (3, "ConvAsm1x1UV2", _DIRECT),
    (5, "ConvAsm5x10u2v2f1", _DIRECT),
    (6, "ConvAsm5x10u2v2b1", _DIRECT),
    (7, "ConvAsm7x7c3h224w224k64u2v2p3q3f1", _DIRECT),
    (8, "ConvOclDirectFwd11x11", _DIRECT),
    (9, "ConvOclDirectFwdGen", _DIRECT),
    (11, "ConvOclDirectFwd", _DIRECT),
    (13, "ConvOclDirectFwd1x1", _DIRECT),
    (14, "ConvBinWinograd3x3U", _WINOGRAD),
    (15, "ConvBinWinogradRxS", _WINOGRAD),
    (16, "ConvAsmBwdWrW3x3", _DIRECT),
    (17, "ConvAsmBwdWrW1x1", _DIRECT),
    (18, "ConvOclBwdWrW2<1>", _DIRECT),
    (19, "ConvOclBwdWrW2<2>", _DIRECT),
    (20, "ConvOclBwdWrW2<4>", _DIRECT),
    (21, "ConvOclBwdWrW2<8>", _DIRECT),
    (22, "ConvOclBwdWrW2<16>", _DIRECT),
    (23, "ConvOclBwdWrW2NonTunable", _DIRECT),
    (24, "ConvOclBwdWrW53", _DIRECT),
    (25, "ConvOclBwdWrW1x1", _DIRECT),
    (26, "ConvHipImplicitGemmV4R1Fwd", _IGEMM_FWD),
    (31, "ConvHipImplicitGemmV4R1WrW", _IGEMM_WRW),
    (34, "fft", _FFT),
    (37, "ConvBinWinogradRxSf3x2", _WINOGRAD),
    (53, "ConvBinWinogradRxSf2x3", _WINOGRAD),
    (54, "ConvHipImplicitGemmV4R4Fwd", _IGEMM_FWD),
    (55, "ConvHipImplicitGemmBwdDataV1R1", _IGEMM_BWD),
    (56, "ConvHipImplicitGemmBwdDataV4R1", _IGEMM_BWD),
    (57, "ConvHipImplicitGemmBwdDataV1R1Xdlops", _IGEMM_BWD),
    (60, "ConvHipImplicitGemmBwdDataV4R1Xdlops", _IGEMM_BWD),
    (61, "ConvHipImplicitGemmV4R4WrW", _IGEMM_WRW),
    (62, "ConvAsmImplicitGemmV4R1DynamicFwd", _IGEMM_FWD),
    (63, "ConvAsmImplicitGemmV4R1DynamicFwd_1x1", _IGEMM_FWD),
    (64, "ConvHipImplicitGemmForwardV4R4Xdlops", _IGEMM_FWD),
    (65, "ConvAsmImplicitGemmV4R1DynamicBwd", _IGEMM_BWD),
    (66, "ConvAsmImplicitGemmV4R1DynamicWrw", _IGEMM_WRW),
    (67, "ConvMPBidirectWinograd<2-3>", _WINOGRAD),
    (68, "ConvMPBidirectWinograd<3-3>", _WINOGRAD),
    (69, "ConvMPBidirectWinograd<4-3>", _WINOGRAD_F4),
    (70, "ConvMPBidirectWinograd<5-3>", _WINOGRAD_F4),
    (71, "ConvMPBidirectWinograd<6-3>", _WINOGRAD_F4),
    (72, "ConvAsmImplicitGemmGTCDynamicWrwXdlops", _IGEMM_WRW),
    (73, "ConvHipImplicitGemmWrwV4R4Xdlops", _IGEMM_WRW),
    (74, "ConvAsmImplicitGemmGTCDynamicFwdXdlops", _IGEMM_FWD),
    (80, "ConvHipImplicitGemmForwardV4R5Xdlops", _IGEMM_FWD),
    (81, "ConvHipImplicitGemmForwardV4R4Xdlops_Padded_Gemm", _IGEMM_FWD),
    (82, "ConvAsmImplicitGemmGTCDynamicBwdXdlops", _IGEMM_BWD),
    (83, "ConvHipImplicitGemmWrwV4R4Xdlops_Padded_Gemm", _IGEMM_WRW),
    (84, "ConvBinWinogradRxSf2x3g1", _WINOGRAD),
    (85, "ConvDirectNaiveConvFwd", _NAIVE),
    (86, "ConvDirectNaiveConvBwd", _NAIVE),
    (87, "ConvDirectNaiveConvWrw", _NAIVE),
    (88, "GemmFwd1x1_0_1", _GEMM_1X1),
    (90, "GemmFwd1x1_0_2", _GEMM_1X1),
    (91, "GemmFwdRest", _GEMM),
    (95, "GemmBwd1x1_stride2", _GEMM_1X1),
    (96, "GemmBwd1x1_stride1", _GEMM_1X1),
    (97, "GemmBwdRest", _GEMM),
    (98, "ConvMlirIgemmFwd", _IGEMM_FWD),
    (99, "ConvMlirIgemmBwd", _IGEMM_BWD),
    (100, "ConvMlirIgemmWrW", _IGEMM_WRW),
    (101, "GemmWrw1x1_stride1", _GEMM_1X1),
    (102, "GemmWrwUniversal", _GEMM),
    (103, "ConvMlirIgemmFwdXdlops", _IGEMM_FWD),
    (104, "ConvMlirIgemmBwdXdlops", _IGEMM_BWD),
    (105, "ConvMlirIgemmWrWXdlops", _IGEMM_WRW),
    (107, "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC", _IGEMM_FWD),
    (108, "ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC", _IGEMM_BWD),
    (110, "ConvAsmImplicitGemmGTCDynamicWrwXdlopsNHWC", _IGEMM_WRW),
    (114, "ConvCkIgemmFwdV6r1DlopsNchw", _IGEMM_FWD),
    (127, "ConvAsmImplicitGemmGTCDynamicFwdDlopsNCHWC", _IGEMM_FWD),
    (128, "ConvHipImplicitGemmFwdXdlops", _IGEMM_FWD),
    (129, "ConvHipImplicitGemmBwdXdlops", _IGEMM_BWD),
    (137, "ConvHipImplicitGemmGroupFwdXdlops", _IGEMM_FWD),
    (138, "ConvHipImplicitGemm3DGroupFwdXdlops", _IGEMM_FWD),
    (139, "ConvWinoFuryRxS<2-3>", _WINOGRAD),
    (140, "ConvHipImplicitGemm3DGroupWrwXdlops", _IGEMM_WRW),
    (141, "ConvHipImplicitGemm3DGroupBwdXdlops", _IGEMM_BWD),
    (155, "ConvHipImplicitGemmGroupBwdXdlops", _IGEMM_BWD),
    (156, "ConvHipImplicitGemmGroupWrwXdlops", _IGEMM_WRW),
)
_BY_NAME = {name: (sid, names) for sid, name, names in MIOPEN_SOLVERS}
_BY_ID = {sid: name for sid, name, _ in MIOPEN_SOLVERS}


def is_unset(spec: str | None) -> bool:
    """MIOpenDriver's ``-S -1`` (or nothing): no solver chosen, run find."""
    return spec is None or spec.strip() in ("", "-1")


def resolve_solver(spec: str, handle: Any, problem: ConvProblem) -> str:
    """The miocore solver that ``-S spec`` names for ``problem`` on ``handle``'s device.

    ``spec`` is a miocore solver name or id, or a MIOpen solver name or numeric id (mapped
    through :data:`MIOPEN_SOLVERS`). Raises :class:`~miocore.InvalidArgumentError` for a name
    nobody knows (listing the closest) and :class:`~miocore.NotApplicableError` when no mapped
    solver is installed, runs on the device and applies.
    """
    text = spec.strip()
    registry = handle.registry
    own = {r.name: r for r in registry.solvers}
    own_ids = {str(r.id): r.name for r in registry.solvers}
    if text in own:
        return text
    if text in own_ids:
        return own_ids[text]
    miopen_name = _BY_ID.get(int(text)) if text.isdigit() else text
    if miopen_name not in _BY_NAME:
        known = [*own, *_BY_NAME]
        close = difflib.get_close_matches(text, known, n=5, cutoff=0.5)
        installed = ", ".join(sorted(own)) or "none"
        hint = f"closest: {', '.join(close)}" if close else f"installed: {installed}"
        raise InvalidArgumentError(
            f"neither a miocore solver nor a mapped MIOpen solver name or id ({hint}; the "
            "MIOpen table is in docs/cli.md)",
            field="-S/--solution",
            value=spec,
        )
    _, candidates = _BY_NAME[miopen_name]
    from miocore.solver.interface import normalize_applicability

    for name in candidates:
        reg = own.get(name)
        if reg is None or handle.backend.name not in reg.backends:
            continue
        try:
            answer = normalize_applicability(
                reg.solver.is_applicable(handle.context, problem.canonical)
            )
        except Exception:  # a broken solver is skipped here as find skips it
            continue
        if answer.ok:
            return name
    raise NotApplicableError(
        f"-S {spec} is MIOpen's {miopen_name}, which maps to {', '.join(candidates)}; none of "
        f"them is installed, runs on {handle.backend.name} and applies to {problem.key}"
    )
