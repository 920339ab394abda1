"""The per-tap passes of ``direct.taps`` (forward, backward data, backward weights) and its
invoker: one GEMM per tap with beta=1 accumulation, or a vectorised multiply-add per tap for
depthwise-like groups. The buffers and their index algebra are :mod:`miocore_direct.taps_plan`'s.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from miocore import Direction, InvokeParams
from miocore.backends.cpu_gemm import gemm
from miocore_direct.taps_plan import TapsPlan


def _gemm_into(c: np.ndarray, a: np.ndarray, b: np.ndarray, beta: float, trans_b: bool) -> None:
    """``c = a @ op(b) + beta * c`` in place; a, b, c C-contiguous float32 2-D arrays."""
    gemm(a, b.T if trans_b else b, c, beta)


def _forward(plan: TapsPlan, wst: np.ndarray, pbuf: np.ndarray, qbuf: np.ndarray, tmp: Any) -> None:
    for j0, j1 in plan.blocks():
        if plan.elementwise:
            qblock = qbuf[:, j0:j1]
            qblock[...] = 0
            scratch = tmp[:, : j1 - j0]
            for t, phase, off in plan.taps:
                for c, k in itertools.product(range(plan.cg), range(plan.kg)):
                    window = pbuf[:, phase, off + j0 : off + j1, c]
                    np.multiply(window, wst[:, t, k, c, None], out=scratch)
                    np.add(qblock[:, :, k], scratch, out=qblock[:, :, k])
            continue
        for g in range(plan.g):
            for step, (t, phase, off) in enumerate(plan.taps):
                _gemm_into(
                    qbuf[g, j0:j1],
                    pbuf[g, phase, off + j0 : off + j1],
                    wst[g, t],
                    float(step > 0),
                    True,
                )


def _backward_data(
    plan: TapsPlan, wst: np.ndarray, pbuf: np.ndarray, qbuf: np.ndarray, tmp: Any
) -> None:
    pbuf[...] = 0
    for j0, j1 in plan.blocks():
        if plan.elementwise:
            scratch = tmp[:, : j1 - j0]
            for t, phase, off in plan.taps:
                for c, k in itertools.product(range(plan.cg), range(plan.kg)):
                    window = pbuf[:, phase, off + j0 : off + j1, c]
                    np.multiply(qbuf[:, j0:j1, k], wst[:, t, k, c, None], out=scratch)
                    np.add(window, scratch, out=window)
            continue
        for g in range(plan.g):
            for t, phase, off in plan.taps:
                # P window (rows, C/g) += dY (rows, K/g) @ W[t], W[t] stored (K/g, C/g).
                window = pbuf[g, phase, off + j0 : off + j1]
                _gemm_into(window, qbuf[g, j0:j1], wst[g, t], 1.0, False)


def _backward_weights(plan: TapsPlan, dw: np.ndarray, pbuf: np.ndarray, qbuf: np.ndarray) -> None:
    # dw is staged (G, taps, K/g, C/g).
    for block, (j0, j1) in enumerate(plan.blocks()):
        for t, phase, off in plan.taps:
            if plan.elementwise:
                for c, k in itertools.product(range(plan.cg), range(plan.kg)):
                    part = np.einsum(
                        "gj,gj->g", qbuf[:, j0:j1, k], pbuf[:, phase, off + j0 : off + j1, c]
                    )
                    if block:
                        dw[:, t, k, c] += part
                    else:
                        dw[:, t, k, c] = part
                continue
            for g in range(plan.g):
                # dW[t] (K/g, C/g) = dY^T (K/g, rows) @ P window (rows, C/g).
                window = pbuf[g, phase, off + j0 : off + j1]
                gemm(qbuf[g, j0:j1].T, window, dw[g, t], float(block > 0))


class TapsInvoker:
    """Runs one problem's plan on the caller's arrays and workspace."""

    def __init__(self, plan: TapsPlan) -> None:
        self.plan = plan

    def __call__(self, handle: Any, params: InvokeParams) -> None:
        plan = self.plan
        wst, pbuf, qbuf, tmp = plan.views(params.workspace)
        x, w, y = params.x, params.w, params.y
        if plan.p_alias:
            pbuf = plan.p_from_x(x)
        if plan.q_alias:
            qbuf = plan.q_from_y(y)
        if plan.direction is Direction.FORWARD:
            plan.stage_weights(wst, w)
            if not plan.p_alias:
                plan.fill_p(pbuf, x)
            _forward(plan, wst, pbuf, qbuf, tmp)
            if not plan.q_alias:
                plan.store_q(qbuf, y)
        elif plan.direction is Direction.BACKWARD_DATA:
            plan.stage_weights(wst, w)
            if not plan.q_alias:
                plan.fill_q(qbuf, y)
            _backward_data(plan, wst, pbuf, qbuf, tmp)
            if not plan.p_alias:
                plan.store_p(pbuf, x)
        else:
            if not plan.p_alias:
                plan.fill_p(pbuf, x)
            if not plan.q_alias:
                plan.fill_q(qbuf, y)
            dw = wst.reshape(plan.g, plan.ntaps, plan.kg, plan.cg)
            _backward_weights(plan, dw, pbuf, qbuf)
            plan.store_weights(wst, w)
