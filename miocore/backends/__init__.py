"""Device backends. Only this package may import a vendor binding (cuda.bindings, hip).

A backend is named by a device string: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"hip"``,
``"hip:0"``.
"""

from __future__ import annotations

from typing import Any

from miocore.errors import BackendUnavailableError, InvalidArgumentError

KNOWN = ("cpu", "cuda", "hip")


def parse_device(device: str) -> tuple[str, int]:
    """Split ``"cuda:1"`` into ``("cuda", 1)``; the index defaults to 0."""
    if not isinstance(device, str):
        raise InvalidArgumentError(
            "expected a device string such as 'cpu' or 'cuda:0'", field="device", value=device
        )
    name, _, index = device.strip().lower().partition(":")
    if name not in KNOWN:
        raise InvalidArgumentError(
            f"unknown device; expected one of {KNOWN} with an optional ':N'",
            field="device",
            value=device,
        )
    if index and not index.isdigit():
        raise InvalidArgumentError(
            "the device index must be a number", field="device", value=device
        )
    return name, int(index or 0)


def open_backend(device: str, *, stream: Any = None) -> Any:
    """The backend object for a device string; GPU backends run on ``stream`` (default: the
    device's default stream)."""
    name, index = parse_device(device)
    if name == "cpu":
        if stream is not None:
            raise InvalidArgumentError(
                "the CPU backend has no streams", field="stream", value=type(stream).__name__
            )
        from miocore.backends.cpu import CpuBackend

        return CpuBackend(index)
    extra = "cuda" if name == "cuda" else "hip"
    try:
        if name == "cuda":
            from miocore.backends.cuda import open_cuda as opener
        else:
            from miocore.backends.hip import open_hip as opener
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the {name.upper()} backend could not be imported ({exc}); install "
            f"'miocore[{extra}]' on a machine with a {name.upper()} device",
            field="device",
            value=device,
        ) from None
    return opener(index, stream)
