"""What runs a GPU Winograd solution: per image chunk the transform launches and the BLAS's
batched GEMMs, in the workspace layout of the solver's plan (``gpu._Plan``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from miocore import DataType, Direction, InvalidArgumentError, InvokeParams
from miocore.backends.gpu_kernels import KernelArgs
from miocore_winograd.gpu import _BLOCK

if TYPE_CHECKING:
    from miocore_winograd.gpu import _Plan


def _blocks(total: int) -> int:
    return max(1, -(-total // _BLOCK))


class WinogradInvoker:
    """Runs one problem: per image chunk, the tile transforms, one batched GEMM per group and
    the output transform (backward weights: the filter-gradient transform after the last)."""

    def __init__(self, plan: _Plan, device: Any, blas: Any, compiled: Any) -> None:
        self.plan = plan
        self.blas = blas
        self.k_in, self.k_out = compiled[0], compiled[-1]
        self.k_dy = compiled[1] if plan.wrw else None
        p = plan.p
        # per chunk: (tiles, args of the tile-transform launch, its grid, args of the output
        # transform (backward weights: of the dy transform), its grid)
        self.launches = []
        if plan.wrw:
            self.once_args = KernelArgs(
                [("ptr", 0), ("ptr", 0), ("bytes", plan.params(0, 0, p.w, p.w, 0, p.c, p.k))]
            )
            self.once_grid = _blocks(p.k * plan.cing)
        else:
            src = p.x if p.direction is Direction.FORWARD else p.y
            dst = p.y if p.direction is Direction.FORWARD else p.x
            flip = int(p.direction is Direction.BACKWARD_DATA)
            filter_params = plan.params(0, 0, p.w, p.w, flip, plan.cin, plan.cout)
            filter_blocks = _blocks(plan.cin * plan.coutg)
        for i, (n0, nb) in enumerate(plan.chunks):
            tiles = nb * plan.per_image_tiles
            if plan.wrw:
                # x tiles through wino_input_filter with no filter blocks, then the dy tiles
                px = plan.params(n0, nb, p.x, p.x, 0, p.c, p.k)
                pdy = plan.params(n0, nb, p.y, p.y, 0, p.c, p.k)
                args_in = KernelArgs(
                    [("ptr", 0), ("ptr", 0), ("bytes", px), ("ptr", 0), ("ptr", 0), ("bytes", px)]
                )
                args_dy = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", pdy)])
                grid_in = _blocks(tiles * p.c // plan.vec_in)
                grid_dy = _blocks(tiles * p.k // plan.vec_out)
                self.launches.append((tiles, args_in, grid_in, args_dy, grid_dy))
                continue
            aux = filter_blocks if i == 0 else 0
            pa = plan.params(n0, nb, src, dst, 0, plan.cin, plan.cout, aux=aux)
            args_in = KernelArgs(
                [
                    ("ptr", 0),
                    ("ptr", 0),
                    ("bytes", pa),
                    ("ptr", 0),
                    ("ptr", 0),
                    ("bytes", filter_params),
                ]
            )
            grid_in = aux + _blocks(tiles * plan.cin // plan.vec_in)
            args_out = KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", pa)])
            grid_out = _blocks(tiles * plan.cout // plan.vec_out)
            self.launches.append((tiles, args_in, grid_in, args_out, grid_out))

    def __call__(self, handle: Any, ip: InvokeParams) -> None:
        if ip.workspace is None:
            raise InvalidArgumentError(
                f"{self.plan.workspace} bytes of workspace needed", field="workspace", value=None
            )
        ws = ip.workspace.ptr
        if self.plan.wrw:
            self._backward_weights(ip.x.ptr, ip.w.ptr, ip.y.ptr, ws)
        elif self.plan.direction is Direction.FORWARD:
            self._pipeline(ip.x.ptr, ip.w.ptr, ip.y.ptr, ws)
        else:
            self._pipeline(ip.y.ptr, ip.w.ptr, ip.x.ptr, ws)

    def _pipeline(self, src: int, w: int, dst: int, ws: int) -> None:
        plan, blas = self.plan, self.blas
        p = plan.p
        size = p.dtype.itemsize
        u, v, mm = ws + plan.off_u, ws + plan.off_v, ws + plan.off_m
        cin, cout, cing, coutg = plan.cin, plan.cout, plan.cing, plan.coutg
        forward = p.direction is Direction.FORWARD
        c_dtype = p.dtype if plan.half_m else DataType.FLOAT32
        for tiles, args_in, grid_in, args_out, grid_out in self.launches:
            args_in.set_pointers(src, v, w, u)
            self.k_in.launch(args_in, grid=(grid_in,))
            for gi in range(p.groups):
                # column-major: M^T (coutg x tiles) = U_g^T (coutg x cing) . V^T (cing x tiles);
                # forward U is [cout][cing] (read transposed), backward data [cin][coutg]
                if forward:
                    a, lda, transa = u + gi * coutg * cing * size, cing, True
                else:
                    a, lda, transa = u + gi * cing * coutg * size, coutg, False
                blas.gemm(
                    p.dtype,
                    transa,
                    False,
                    coutg,
                    tiles,
                    cing,
                    a,
                    lda,
                    cin * coutg,
                    v + gi * cing * size,
                    cin,
                    tiles * cin,
                    mm + gi * coutg * plan.msize,
                    cout,
                    tiles * cout,
                    batch=plan.a2,
                    c_dtype=c_dtype,
                )
            args_out.set_pointers(mm, dst)
            self.k_out.launch(args_out, grid=(grid_out,))

    def _backward_weights(self, x: int, dw: int, dy: int, ws: int) -> None:
        plan, blas = self.plan, self.blas
        p = plan.p
        size = p.dtype.itemsize
        s, xt, dyt = ws + plan.off_s, ws + plan.off_x, ws + plan.off_dy
        cg, kg = plan.cing, plan.coutg
        for i, (tiles, args_in, grid_in, args_dy, grid_dy) in enumerate(self.launches):
            args_in.set_pointers(x, xt)
            self.k_in.launch(args_in, grid=(grid_in,))
            args_dy.set_pointers(dy, dyt)
            self.k_dy.launch(args_dy, grid=(grid_dy,))
            for gi in range(p.groups):
                # column-major: S^T (cg x kg) = X^T (cg x tiles) . DY (tiles x kg)
                blas.gemm(
                    p.dtype,
                    False,
                    True,
                    cg,
                    kg,
                    tiles,
                    xt + gi * cg * size,
                    p.c,
                    tiles * p.c,
                    dyt + gi * kg * size,
                    p.k,
                    tiles * p.k,
                    s + gi * kg * cg * 4,
                    cg,
                    p.k * cg,
                    batch=plan.a2,
                    beta=0.0 if i == 0 else 1.0,
                    c_dtype=DataType.FLOAT32,
                )
        self.once_args.set_pointers(s, dw)
        self.k_out.launch(self.once_args, grid=(self.once_grid,))
