"""What the NVIDIA driver shows: NVML (``nvidia-ml-py``), else ``/proc/driver/nvidia/gpus``.

Nothing is tried without a sign of the driver (``/dev/nvidiactl`` or
``/proc/driver/nvidia/gpus``). Never raises: what cannot be read becomes a
note. docs/gpus.md: "How visible GPUs are detected".
"""

from __future__ import annotations

import os

from tf_entrypoint.common import show
from tf_entrypoint.frozen import frozen
from tf_entrypoint.kernel import records

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Protocol

    class NvmlApi(Protocol):
        """The few NVML calls this module needs. Every method may raise (NVMLError)."""

        def init(self) -> None: ...

        def shutdown(self) -> None: ...

        def device_count(self) -> int: ...

        def device_uuid(self, index: int) -> str: ...

        def device_name(self, index: int) -> str: ...

        def device_memory_bytes(self, index: int) -> int: ...

        def mig_devices(self, index: int) -> Sequence[tuple[str, str, int]] | None:
            """``None`` when MIG mode is off or unsupported, else (uuid, name, memory
            bytes) of each MIG device this process can reach."""
            ...


#: Source values of :attr:`GpuView.source`.
SOURCE_NVML = "nvml"
SOURCE_PROC = "/proc/driver/nvidia"
SOURCE_NONE = "none"

NO_DRIVER_REASON = (
    "no NVIDIA driver in this container (no /dev/nvidiactl, no /proc/driver/nvidia): "
    "start it with `--gpus all` or the NVIDIA runtime"
)
PYNVML_MISSING_REASON = "nvidia-ml-py (pynvml) is not installed"

_MIB = 2**20
_MAX_READ = 64 * 1024  # an information file is a few hundred bytes
_MAX_ENTRIES = 256  # never list more than this many files from one directory
_MAX_GPUS = 1024  # more than any machine has; guards against a broken binding
_MAX_NOTES = 12  # NVML read errors worth listing one by one
_HEX = frozenset("0123456789abcdefABCDEF-")


@frozen
class MigDevice:
    """One MIG device (a compute instance) of a GPU in MIG mode, as NVML reports it."""

    uuid: str | None  # "MIG-xxxxxxxx-..." (R470+ drivers)
    name: str | None  # e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    memory_mb: int | None


@frozen
class PhysicalGpu:
    """What the driver reports, in the driver's (NVML) order."""

    system_index: int
    uuid: str | None  # "GPU-xxxxxxxx-...."
    name: str | None
    memory_mb: int | None  # total memory in MiB; None when unknown (/proc fallback)
    #: ``None``: MIG mode off or unknown. A tuple: MIG mode on, and these are the
    #: MIG devices this container can reach (CUDA shows them instead of the GPU).
    mig: tuple[MigDevice, ...] | None = None


def is_gpu_uuid(text: str) -> bool:
    """``GPU-`` and at least 8 hex digits or dashes, as the driver writes UUIDs."""
    rest = text[4:]
    return text.startswith("GPU-") and len(rest) >= 8 and set(rest) <= _HEX


def _exists(path: str) -> bool:
    try:
        return os.path.exists(path)
    except (OSError, ValueError):
        return False


def _is_dir(path: str) -> bool:
    try:
        return os.path.isdir(path)
    except (OSError, ValueError):
        return False


def _listdir(path: str) -> list[str]:
    """Up to :data:`_MAX_ENTRIES` sorted entry names; [] when unreadable."""
    try:
        with os.scandir(path) as it:
            names = []
            for entry in it:
                names.append(entry.name)
                if len(names) >= _MAX_ENTRIES:
                    break
    except (OSError, ValueError):
        return []
    return sorted(names)


def _decode(data: bytes | str) -> str:
    if isinstance(data, str):
        return data
    return data.decode("utf-8", "replace")


class PynvmlApi:
    """:class:`NvmlApi` over the ``pynvml`` module of nvidia-ml-py."""

    def __init__(self, module: Any) -> None:
        self._nvml = module

    def init(self) -> None:
        self._nvml.nvmlInit()

    def shutdown(self) -> None:
        self._nvml.nvmlShutdown()

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def _handle(self, index: int) -> Any:
        return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def device_uuid(self, index: int) -> str:
        return _decode(self._nvml.nvmlDeviceGetUUID(self._handle(index)))

    def device_name(self, index: int) -> str:
        return _decode(self._nvml.nvmlDeviceGetName(self._handle(index)))

    def device_memory_bytes(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle(index)).total)

    def mig_devices(self, index: int) -> list[tuple[str, str, int]] | None:
        nvml = self._nvml
        if not hasattr(nvml, "nvmlDeviceGetMigMode"):  # bindings older than MIG
            return None
        handle = self._handle(index)
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError:  # NOT_SUPPORTED on GPUs without MIG
            return None
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return None
        out: list[tuple[str, str, int]] = []
        for j in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
            except nvml.NVMLError:  # NOT_FOUND (no such slot) or NO_PERMISSION
                continue
            out.append(
                (
                    _decode(nvml.nvmlDeviceGetUUID(mig)),
                    _decode(nvml.nvmlDeviceGetName(mig)),
                    int(nvml.nvmlDeviceGetMemoryInfo(mig).total),
                )
            )
        return out


def load_real_nvml() -> NvmlApi | str:
    """The NVML bindings, or why they are unavailable (pynvml is imported here, lazily)."""
    try:
        import pynvml  # noqa: PLC0415 - optional, and only worth importing with a driver
    except ImportError:
        return PYNVML_MISSING_REASON
    return PynvmlApi(pynvml)


def error_text(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return show(text.strip(), limit=200) or type(exc).__name__


@frozen
class Scan:
    gpus: tuple[PhysicalGpu, ...]
    source: str
    notes: tuple[str, ...]
    driver_reason: str  # why no GPU, when ``gpus`` is empty


def _read_with_nvml(nvml: NvmlApi) -> tuple[tuple[PhysicalGpu, ...] | None, str, list[str]]:
    """(gpus, why NVML failed, notes); gpus is None when NVML gave no list."""
    notes: list[str] = []
    try:
        nvml.init()
    except Exception as exc:  # noqa: BLE001 - NVMLError, OSError from ctypes: never fatal
        return None, f"NVML could not start ({error_text(exc)})", notes
    try:
        try:
            count = int(nvml.device_count())
        except Exception as exc:  # noqa: BLE001
            return None, f"NVML could not count the GPUs ({error_text(exc)})", notes
        if count > _MAX_GPUS:
            notes.append(f"NVML reports {count} GPUs; only the first {_MAX_GPUS} are read")
        gpus: list[PhysicalGpu] = []
        for index in range(max(0, min(count, _MAX_GPUS))):
            gpus.append(_read_one(nvml, index, notes))
        if len(notes) > _MAX_NOTES:
            extra = len(notes) - _MAX_NOTES
            notes[_MAX_NOTES:] = [f"... and {extra} more NVML errors"]
        return tuple(gpus), "", notes
    finally:
        try:
            nvml.shutdown()
        except Exception as exc:  # noqa: BLE001
            notes.append(f"nvmlShutdown failed ({error_text(exc)})")


def _read_one(nvml: NvmlApi, index: int, notes: list[str]) -> PhysicalGpu:
    def attempt(what: str, call: Any) -> Any:
        try:
            return call(index)
        except Exception as exc:  # noqa: BLE001 - one unreadable fact is a note, not a failure
            notes.append(f"NVML could not read the {what} of GPU {index} ({error_text(exc)})")
            return None

    uuid = attempt("UUID", nvml.device_uuid)
    name = attempt("name", nvml.device_name)
    memory = attempt("memory", nvml.device_memory_bytes)
    mig_raw = attempt("MIG devices", nvml.mig_devices)
    mig: tuple[MigDevice, ...] | None = None
    if mig_raw is not None:
        try:
            mig = tuple(
                MigDevice(
                    uuid=str(u) or None,
                    name=str(n) or None,
                    memory_mb=int(m) // _MIB if int(m) > 0 else None,
                )
                for u, n, m in mig_raw
            )
        except (TypeError, ValueError) as exc:
            notes.append(f"NVML gave unreadable MIG devices for GPU {index} ({error_text(exc)})")
    return PhysicalGpu(
        system_index=index,
        uuid=str(uuid) if uuid else None,
        name=str(name) if name else None,
        memory_mb=int(memory) // _MIB if isinstance(memory, int) and memory > 0 else None,
        mig=mig,
    )


def parse_information(text: str) -> dict[str, str]:
    """``/proc/driver/nvidia/gpus/*/information``: ``Key: value`` records, one per ``\n``.

    The driver pads with spaces and tabs; a record without ':' is skipped.
    """
    fields: dict[str, str] = {}
    for record in records(text):
        key, sep, value = record.partition(":")
        if sep:
            fields.setdefault(key.strip(" \t"), value.strip(" \t"))
    return fields


def _read_proc(gpus_dir: str) -> tuple[tuple[PhysicalGpu, ...], list[str]]:
    """The GPUs listed under /proc/driver/nvidia/gpus, in Device Minor order."""
    notes: list[str] = []
    found: list[tuple[int, str, str | None, str | None]] = []  # minor, bus, uuid, name
    for bus in _listdir(gpus_dir):
        info = f"{gpus_dir}/{bus}/information"
        try:
            with open(info, "rb") as fh:
                data = fh.read(_MAX_READ)
        except (OSError, ValueError) as exc:
            where = f"/proc/driver/nvidia/gpus/{show(bus, 60)}/information"
            notes.append(f"could not read {where} ({error_text(exc)})")
            continue
        fields = parse_information(_decode(data))
        minor_text = fields.get("Device Minor", "")
        minor = int(minor_text) if minor_text.isascii() and minor_text.isdigit() else None
        uuid = fields.get("GPU UUID")
        if uuid is not None and not is_gpu_uuid(uuid):
            uuid = None
        name = fields.get("Model") or None
        if minor is None or name is None:
            notes.append(f"/proc/driver/nvidia/gpus/{show(bus, 60)}/information is incomplete")
        found.append((minor if minor is not None else 1 << 30, bus, uuid, name))
    found.sort()
    gpus = tuple(
        PhysicalGpu(
            system_index=i, uuid=uuid, name=show(name, 60) if name else None, memory_mb=None
        )
        for i, (_minor, _bus, uuid, name) in enumerate(found)
    )
    return gpus, notes


def _dev_nodes(dev: str) -> list[str]:
    return [n for n in _listdir(dev) if n[6:].isascii() and n[6:].isdigit() and n[:6] == "nvidia"]


def scan(root: str, nvml: NvmlApi | None) -> Scan:
    """What the driver shows under ``root``; ``nvml`` replaces the real bindings (tests)."""
    root = root.rstrip("/")
    ctl = f"{root}/dev/nvidiactl"
    gpus_dir = f"{root}/proc/driver/nvidia/gpus"
    has_ctl = _exists(ctl)
    has_proc = _is_dir(gpus_dir)
    if not has_ctl and not has_proc:
        # Cheap path: no driver, so no import of pynvml and no NVML call.
        return Scan((), SOURCE_NONE, (), NO_DRIVER_REASON)

    notes: list[str] = []
    api: NvmlApi | str = nvml if nvml is not None else load_real_nvml()
    if isinstance(api, str):
        nvml_problem = api
    else:
        gpus, nvml_problem, nvml_notes = _read_with_nvml(api)
        notes.extend(nvml_notes)
        if gpus is not None:
            reason = "" if gpus else "the NVIDIA driver is present but NVML reports no GPU"
            return Scan(gpus, SOURCE_NVML, tuple(notes), reason)
    notes.append(f"NVML unavailable: {nvml_problem}; reading /proc/driver/nvidia/gpus instead")

    if not has_proc:
        nodes = _dev_nodes(f"{root}/dev")
        if nodes:
            notes.append(
                "device nodes " + ", ".join(f"/dev/{n}" for n in nodes) + " exist, but "
                "without NVML or /proc/driver/nvidia/gpus their GPUs cannot be described"
            )
        reason = f"{nvml_problem}, and there is no /proc/driver/nvidia/gpus to fall back on"
        return Scan((), SOURCE_NONE, tuple(notes), reason)
    gpus, proc_notes = _read_proc(gpus_dir)
    notes.extend(proc_notes)
    reason = "" if gpus else f"{nvml_problem} and /proc/driver/nvidia/gpus lists no GPU"
    return Scan(gpus, SOURCE_PROC, tuple(notes), reason)


def read_requested_devices(value: str, *, root: str = "/") -> tuple[str, ...] | None:
    """The device ids bind-mounted as file names in the volume-mounts directory.

    ``value`` is ``NVIDIA_VISIBLE_DEVICES`` (an absolute path). CDI requests
    (``cdi/<vendor>/<class>/<name>``) come back as ``vendor/class=name``.
    None when the directory cannot be listed.
    """
    directory = f"{root.rstrip('/')}/{value.strip().lstrip('/')}"
    if not _is_dir(directory):
        return None
    ids: list[str] = []
    for name in _listdir(directory):
        cdi = f"{directory}/{name}"
        if name == "cdi" and _is_dir(cdi):
            for vendor in _listdir(cdi):
                for cls in _listdir(f"{cdi}/{vendor}"):
                    ids.extend(f"{vendor}/{cls}={dev}" for dev in _listdir(f"{cdi}/{vendor}/{cls}"))
        else:
            ids.append(name)
    return tuple(show(i, limit=200) for i in ids[:_MAX_ENTRIES])
