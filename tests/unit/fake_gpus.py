"""Fakes of what the GPU driver shows, for tests/unit: a fake NVML and fake /proc and /dev trees."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

UUIDS = (
    "GPU-0a1b2c3d-0000-1111-2222-333333333330",
    "GPU-0a1b9999-0000-1111-2222-333333333331",
    "GPU-5e6f7a8b-0000-1111-2222-333333333332",
    "GPU-c0ffee00-0000-1111-2222-333333333333",
)
MIB = 2**20


class NVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


class FakeNvml:
    """An NvmlApi that records every call; ``fail`` maps "what:index" to an error."""

    def __init__(
        self,
        gpus: Sequence[tuple[str, str, int]] = (),
        *,
        fail: dict[str, Exception] | None = None,
        mig: dict[int, list[tuple[str, str, int]]] | None = None,
    ) -> None:
        self.gpus = list(gpus)
        self.fail = fail or {}
        self.mig = mig or {}
        self.calls: list[str] = []

    def _call(self, what: str, index: int | None = None) -> None:
        key = what if index is None else f"{what}:{index}"
        self.calls.append(key)
        if key in self.fail:
            raise self.fail[key]

    def init(self) -> None:
        self._call("init")

    def shutdown(self) -> None:
        self._call("shutdown")

    def device_count(self) -> int:
        self._call("count")
        return len(self.gpus)

    def device_uuid(self, index: int) -> str:
        self._call("uuid", index)
        return self.gpus[index][0]

    def device_name(self, index: int) -> str:
        self._call("name", index)
        return self.gpus[index][1]

    def device_memory_bytes(self, index: int) -> int:
        self._call("memory", index)
        return self.gpus[index][2]

    def mig_devices(self, index: int) -> list[tuple[str, str, int]] | None:
        self._call("mig", index)
        return self.mig.get(index)


def info(model: str, uuid: str, minor: int | str, bus: str = "0000:00:04.0") -> str:
    return (
        f"Model: \t\t {model}\nIRQ:   \t\t 35\nGPU UUID: \t {uuid}\n"
        f"Video BIOS: \t 90.00.00.00.00\nBus Type: \t PCIe\nDMA Size: \t 47 bits\n"
        f"Bus Location: \t {bus}\nDevice Minor: \t {minor}\nGPU Excluded:\t No\n"
    )


def make_tree(
    root: Path,
    *,
    nvidiactl: bool = True,
    proc: dict[str, bytes | str] | None = None,
    dev_nodes: Sequence[int] = (),
) -> Path:
    """A fake container root: dev/nvidiactl and proc/driver/nvidia/gpus/<bus>/information."""
    (root / "dev").mkdir(parents=True, exist_ok=True)
    if nvidiactl:
        (root / "dev" / "nvidiactl").write_text("")
    for n in dev_nodes:
        (root / "dev" / f"nvidia{n}").write_text("")
    if proc is not None:
        gpus = root / "proc" / "driver" / "nvidia" / "gpus"
        gpus.mkdir(parents=True)
        for bus, content in proc.items():
            (gpus / bus).mkdir()
            data = content.encode() if isinstance(content, str) else content
            (gpus / bus / "information").write_bytes(data)
    return root
