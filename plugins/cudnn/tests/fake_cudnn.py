"""A stand-in for NVIDIA's ``cudnn`` frontend module, enough of its graph API to drive the
plugin's plan logic on a machine without a GPU: it lists a fixed set of engine configurations
(tags in cuDNN's notation), bars the numerical notes it is told to, refuses to build barred
ones as the frontend does, and records every execute and stream binding."""

from __future__ import annotations

import enum
from typing import Any


class data_type(enum.Enum):
    FLOAT = 0
    HALF = 1
    BFLOAT16 = 2


class numerical_note(enum.Enum):
    TENSOR_CORE = 0
    DOWN_CONVERT_INPUTS = 1
    REDUCED_PRECISION_REDUCTION = 2
    FFT = 3
    WINOGRAD = 4
    WINOGRAD_TILE_4x4 = 5
    WINOGRAD_TILE_6x6 = 6
    WINOGRAD_TILE_13x13 = 7


class behavior_note(enum.Enum):
    RUNTIME_COMPILATION = 0


class knob_type(enum.Enum):
    NOT_SET = 0
    TILE_SIZE = 2
    STAGES = 7


class knob:
    def __init__(self, type: knob_type, min_value: int, max_value: int, stride: int) -> None:
        self.type, self.min_value, self.max_value, self.stride = type, min_value, max_value, stride


#: The knobs each engine reports (get_knobs_for_engine); TILE_SIZE is backend knob type 2.
KNOBS = {
    3: [knob(knob_type.TILE_SIZE, 0, 3, 1), knob(knob_type.NOT_SET, 0, 9, 1)],
    9: [knob(knob_type.TILE_SIZE, 0, 1, 1)],
}


#: The heuristics modes each create_execution_plans call asked for, in order.
ASKED: list[list] = []


class heur_mode(enum.Enum):
    A = 0
    B = 1
    FALLBACK = 2


#: (tag, numerical notes, behaviour notes, workspace bytes) in the heuristics' order.
CONFIGS: list[tuple[str, list, list, int]] = [
    ("eng3_k2=1", [], [], 0),
    ("eng7_k2=4_k13=0", [], [], 4096),
    ("eng3_k2=2", [], [], 512),
    ("eng9", [numerical_note.TENSOR_CORE], [], 256),
    ("eng11_k5=1", [], [behavior_note.RUNTIME_COMPILATION], 0),
    ("eng12", [numerical_note.WINOGRAD], [], 1024),
    ("eng14", [numerical_note.REDUCED_PRECISION_REDUCTION], [], 64),
]

#: Every call the fake saw: ("set_stream", handle, stream), ("execute", pack, ws, index, h).
CALLS: list[tuple[Any, ...]] = []


def backend_version() -> int:
    return 91900


def create_handle() -> int:
    return 0xC0DE


def set_stream(handle: int, stream: int) -> None:
    CALLS.append(("set_stream", handle, stream))


class tensor:
    def __init__(self, **attrs: Any) -> None:
        self.attrs = dict(attrs)

    def set_output(self, value: bool) -> tensor:
        self.attrs["output"] = value
        return self

    def set_dim(self, dim: list) -> tensor:
        self.attrs["dim"] = dim
        return self

    def set_stride(self, stride: list) -> tensor:
        self.attrs["stride"] = stride
        return self

    def set_data_type(self, dtype: Any) -> tensor:
        self.attrs["data_type"] = dtype
        return self

    def set_uid(self, uid: int) -> tensor:
        self.attrs["uid"] = uid
        return self


class pygraph:
    """Records the graph it is given; plans from :data:`CONFIGS`."""

    def __init__(self, **context: Any) -> None:
        self.context = context
        self.tensors: list[tensor] = []
        self.node: tuple[str, dict] | None = None
        self.barred: set[int] = set()
        self.built: set[int] = set()
        self.plans: list[tuple[str, list, list, int]] = []

    def tensor(self, **attrs: Any) -> tensor:
        t = tensor(**attrs)
        self.tensors.append(t)
        return t

    def _node(self, kind: str, **args: Any) -> tensor:
        self.node = (kind, args)
        out = tensor()
        self.tensors.append(out)
        return out

    def conv_fprop(self, **args: Any) -> tensor:
        return self._node("fprop", **args)

    def conv_dgrad(self, **args: Any) -> tensor:
        return self._node("dgrad", **args)

    def conv_wgrad(self, **args: Any) -> tensor:
        return self._node("wgrad", **args)

    def validate(self) -> None:
        assert self.node is not None

    def build_operation_graph(self) -> None:
        assert self.context["handle"] == 0xC0DE

    def get_engine_count(self) -> int:
        return 64

    def create_execution_plans(self, modes: list) -> None:
        ASKED.append(list(modes))
        self.plans = list(CONFIGS)

    def get_knobs_for_engine(self, engine: int) -> list:
        return KNOBS.get(engine, [])

    def create_execution_plan(self, engine: int, knobs: dict) -> None:
        """One configuration: the engine's notes as the heuristics list them, the knobs set."""
        numeric = next((n for t, n, _, _ in CONFIGS if t.startswith(f"eng{engine}")), [])
        parts = [f"_k{k.value}={v}" for k, v in sorted(knobs.items(), key=lambda kv: kv[0].value)]
        size = 128 * (1 + sum(knobs.values()))
        self.plans.append((f"eng{engine}" + "".join(parts), numeric, [], size))

    def deselect_numeric_notes(self, notes: list) -> None:
        for i, (_, numeric, _, _) in enumerate(self.plans):
            if any(n in numeric for n in notes):
                self.barred.add(i)

    def get_execution_plan_count(self) -> int:
        return len(self.plans)

    def get_plan_name_at_index(self, index: int) -> str:
        return self.plans[index][0]

    def get_behavior_notes_for_plan_at_index(self, index: int) -> list:
        return self.plans[index][2]

    def build_plan_at_index(self, index: int) -> None:
        if index in self.barred:
            raise RuntimeError("[cudnn_frontend] Error: Deselecting execution plan")
        self.built.add(index)

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return self.plans[index][3] if index in self.built else 0

    def _execute_plan_at_index(
        self, pack: dict, workspace: int, index: int, handle: int | None
    ) -> None:
        assert index in self.built
        CALLS.append(("execute", dict(pack), workspace, index, handle))
