"""The perf configs both CPU Winograd solvers share: ``{"tile": m, "block": tiles per chunk}``
over a solver's own ``tiles`` x ``blocks``, the default first."""

from __future__ import annotations

from collections.abc import Iterable

from miocore import ConvProblem, ExecutionContext, InvalidArgumentError, PerfConfig


class TileBlockConfigs:
    """Mixin of a tunable solver whose configs are ``tile`` x ``block``; the solver defines
    ``tiles``, ``blocks``, ``default_perf_config``, ``is_applicable`` and ``predicted_ms``."""

    tiles: tuple[int, ...]
    blocks: tuple[int, ...]

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        raise NotImplementedError

    def perf_config_space(
        self, ctx: ExecutionContext, problem: ConvProblem
    ) -> Iterable[PerfConfig]:
        """The default first, then every ``tile`` x ``block``."""
        default = self.default_perf_config(ctx, problem)
        yield default
        for tile in self.tiles:
            for block in self.blocks:
                config = PerfConfig(tile=tile, block=block)
                if config != default:
                    yield config

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        """``tile`` in ``tiles`` and ``block`` in ``blocks``, nothing else."""
        return (
            len(config) == 2
            and config.get("tile") in self.tiles
            and config.get("block") in self.blocks
        )

    def _config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig | None
    ) -> tuple[int, int]:
        """``(tile, block)`` of ``config`` (the default when None); a clear error otherwise."""
        if config is None:
            config = self.default_perf_config(ctx, problem)
        if not self.is_valid_perf_config(ctx, problem, config):
            raise InvalidArgumentError(
                f"expected {{'tile': one of {self.tiles}, 'block': one of {self.blocks}}}",
                field="perf_config",
                value=dict(config),
            )
        return int(config["tile"]), int(config["block"])

    def predicted_ms(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        raise NotImplementedError

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Ideal time over ``predicted_ms``; -1 where the solver does not apply."""
        if not self.is_applicable(ctx, problem):  # type: ignore[attr-defined]
            return -1.0
        return ctx.wti(problem, self.predicted_ms(ctx, problem))
