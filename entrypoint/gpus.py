"""Which GPUs TensorFlow will see, and why, without importing TensorFlow.

Three layers, pure in the middle:

* :func:`load_physical_gpus` (the edge) asks the driver what it has, cheapest
  source first: nothing at all when the container shows no sign of a driver
  (no ``/dev/nvidiactl``, no ``/proc/driver/nvidia/gpus``), else NVML through
  the optional ``pynvml`` module (package ``nvidia-ml-py``; no CUDA context is
  created), else the ``/proc/driver/nvidia/gpus/*/information`` files that
  libnvidia-container mounts for the injected GPUs (memory unknown).
* :func:`parse_cuda_visible_devices` and :func:`parse_nvidia_visible_devices`
  read the two variables as CUDA and the NVIDIA container toolkit do.
* :func:`visible_gpus` applies ``CUDA_VISIBLE_DEVICES`` to the driver's list,
  numbering the result as TensorFlow will (``GPU:0`` is the first listed), and
  writes one sentence saying why these GPUs, or why none.

:func:`detect_gpus` chains them. Nothing here raises for any environment value,
file content or NVML failure: facts that cannot be read become notes.

``CUDA_VISIBLE_DEVICES`` follows pytorch's reading (``torch/cuda/__init__.py``
``_parse_visible_devices`` and ``_transform_uuid_to_ordinals``), which mirrors
CUDA's: ordinals are read like ``strtoul`` (``1gpu2`` is 1, ``+3`` is 3), the
first invalid entry hides itself and everything after it, a device named twice
hides every device, ``GPU-``/``MIG-`` lists must keep their prefix on every
entry, and a UUID prefix must match exactly one GPU.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from entrypoint.frozen import frozen, replace

# Annotations only: `typing` and `collections.abc` cost start-up time, and the
# Protocol below is for the type checker (mypy reads this like typing's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
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
_MAX_SHOWN = 60  # characters of a user value quoted in a message
_MAX_GPUS = 1024  # more than any machine has; guards against a broken binding
_MAX_NOTES = 12  # NVML read errors worth listing one by one
_UUID_RE = re.compile(r"GPU-[0-9A-Fa-f-]{8,}\Z")
_MIG_LEGACY_RE = re.compile(r"MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)\Z")


# --------------------------------------------------------------------------
# Plain data
# --------------------------------------------------------------------------


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


@frozen
class Gpu:
    """What TensorFlow will see."""

    index: int  # TensorFlow's index: GPU:<index>, after CUDA_VISIBLE_DEVICES renumbering
    system_index: int | None  # the driver's index (of the parent GPU for a MIG device)
    uuid: str | None
    name: str | None
    memory_mb: int | None


@frozen
class GpuView:
    gpus: tuple[Gpu, ...]
    source: str  # "nvml", "/proc/driver/nvidia", or "none"
    reason: str  # one sentence: why these GPUs, or why none
    notes: tuple[str, ...]  # further details worth showing in `explain`


#: One ``CUDA_VISIBLE_DEVICES`` entry: an ordinal, or a ``GPU-``/``MIG-`` id as written.
DeviceEntry = int | str


@frozen
class CudaVisibleDevices:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it, before matching it to GPUs."""

    raw: str | None
    #: The valid entries, in order, up to the first invalid one; empty when
    #: the variable hides every device.
    entries: tuple[DeviceEntry, ...]
    #: The first entry CUDA rejects (as written), which hides itself and the rest.
    invalid_entry: str | None = None
    invalid_why: str = ""
    #: An entry named twice (as written): CUDA then hides every device.
    duplicate_entry: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def is_set(self) -> bool:
        return self.raw is not None

    @property
    def is_empty(self) -> bool:
        """Set to nothing but whitespace."""
        return self.raw is not None and not self.raw.strip()


@frozen
class RuntimeRequest:
    """``NVIDIA_VISIBLE_DEVICES``: what the container runtime was asked to inject."""

    raw: str | None
    #: "unset", "empty", "void", "none", "all", "devices" or "directory".
    kind: str
    #: The ids for "devices"; for "directory" the file names found there (set by the edge).
    devices: tuple[str, ...] = ()


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------


def _show(value: str, limit: int = _MAX_SHOWN) -> str:
    """A user-supplied value made safe and short for a message."""
    clean = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if not clean.isprintable():
        clean = repr(clean)[1:-1]
    if len(clean) > limit:
        clean = clean[: limit - 3] + "..."
    return clean


def _plural(n: int, word: str = "GPU") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _strtoul(text: str) -> int | None:
    """The integer ``text`` starts with, as CUDA reads an ordinal; None if none.

    Like pytorch's ``_strtoul``: an optional sign then ASCII digits, the rest
    ignored (``"1gpu2"`` -> 1, ``"+3"`` -> 3, ``"-0"`` -> 0, ``"-1"`` -> -1).
    """
    i = 1 if text[:1] in ("+", "-") else 0
    j = i
    while j < len(text) and "0" <= text[j] <= "9":
        j += 1
    if j == i:
        return None
    return int(text[:j])


# --------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (pure)
# --------------------------------------------------------------------------


def parse_cuda_visible_devices(raw: str | None) -> CudaVisibleDevices:
    """Read ``CUDA_VISIBLE_DEVICES`` as CUDA does (pytorch's reading).

    ``None`` (unset) means every device; an empty value hides every device.
    A value starting with ``GPU-`` or ``MIG-`` is a list of such ids, each entry
    needing the same prefix; anything else is a list of ordinals. The first
    invalid entry ends the list; a repeated entry hides every device.
    """
    if raw is None:
        return CudaVisibleDevices(raw=None, entries=())
    if not raw.strip():
        return CudaVisibleDevices(raw=raw, entries=())
    for prefix in ("GPU-", "MIG-"):
        if raw.startswith(prefix):
            return _parse_id_list(raw, prefix)
    return _parse_ordinals(raw)


def _parse_id_list(raw: str, prefix: str) -> CudaVisibleDevices:
    entries: list[DeviceEntry] = []
    notes: list[str] = []
    for elem in raw.split(","):
        if elem in entries:
            return CudaVisibleDevices(raw=raw, entries=(), duplicate_entry=elem)
        if not elem.startswith(prefix):
            why = f"does not start with {prefix} like the first entry"
            if elem.strip().startswith(prefix):
                why = "has spaces around it, which CUDA does not strip from ids"
            elif not elem:
                why = "is empty"
            return CudaVisibleDevices(
                raw=raw,
                entries=tuple(entries),
                invalid_entry=elem,
                invalid_why=why,
                notes=tuple(notes),
            )
        entries.append(elem)
    return CudaVisibleDevices(raw=raw, entries=tuple(entries), notes=tuple(notes))


def _parse_ordinals(raw: str) -> CudaVisibleDevices:
    entries: list[DeviceEntry] = []
    notes: list[str] = []
    for elem in raw.split(","):
        text = elem.strip()
        value = _strtoul(text)
        if value is not None and value in entries:
            return CudaVisibleDevices(raw=raw, entries=(), duplicate_entry=elem)
        if value is None or value < 0:
            if value is not None:
                why = "is negative"
            elif not text:
                why = "is empty"
            elif text.startswith(("GPU-", "MIG-")):
                why = "is an id, but ids must come first (CUDA reads the list as ordinals)"
            else:
                why = "is not a number"
            return CudaVisibleDevices(
                raw=raw,
                entries=tuple(entries),
                invalid_entry=elem,
                invalid_why=why,
                notes=tuple(notes),
            )
        if text != str(value):
            notes.append(
                f"CUDA_VISIBLE_DEVICES entry '{_show(elem)}' is read as {value} "
                "(CUDA reads the leading number of each entry)"
            )
        entries.append(value)
    return CudaVisibleDevices(raw=raw, entries=tuple(entries), notes=tuple(notes))


def parse_nvidia_visible_devices(raw: str | None) -> RuntimeRequest:
    """Read ``NVIDIA_VISIBLE_DEVICES`` as the NVIDIA container toolkit does.

    Entries are comma-separated and trimmed; ``void`` beats ``none`` beats
    ``all`` wherever they appear; no entry at all means ``void``. A value that
    is an absolute path is the device plugin's volume-mounts form.
    """
    if raw is None:
        return RuntimeRequest(raw=None, kind="unset")
    if raw.strip().startswith("/"):
        return RuntimeRequest(raw=raw, kind="directory")
    ids = tuple(d for d in (part.strip() for part in raw.split(",")) if d)
    if not ids:
        return RuntimeRequest(raw=raw, kind="empty")
    for special in ("void", "none", "all"):
        if special in ids:
            return RuntimeRequest(raw=raw, kind=special)
    return RuntimeRequest(raw=raw, kind="devices", devices=ids)


# --------------------------------------------------------------------------
# Matching CUDA_VISIBLE_DEVICES to the driver's GPUs (pure)
# --------------------------------------------------------------------------


@frozen
class _Candidate:
    """A device CUDA would list by default, in default order."""

    system_index: int | None
    uuid: str | None
    name: str | None
    memory_mb: int | None
    is_mig: bool


@frozen
class _Selection:
    chosen: tuple[_Candidate, ...]
    positions: tuple[int | None, ...]  # default-order position of each (None: not listed)
    invalid_entry: str | None = None
    invalid_why: str = ""
    hides_all_because: str = ""  # set when CUDA hides everything (duplicates)
    notes: tuple[str, ...] = ()


def _default_devices(physical: Sequence[PhysicalGpu]) -> tuple[_Candidate, ...]:
    out: list[_Candidate] = []
    for gpu in physical:
        if gpu.mig is None:
            out.append(_Candidate(gpu.system_index, gpu.uuid, gpu.name, gpu.memory_mb, False))
        else:
            out.extend(
                _Candidate(gpu.system_index, m.uuid, m.name, m.memory_mb, True) for m in gpu.mig
            )
    return tuple(out)


def _match_prefix(prefix: str, uuids: Sequence[str | None]) -> tuple[int | None, str]:
    """Index of the one uuid starting with ``prefix``; else None and why."""
    hits = [i for i, u in enumerate(uuids) if u is not None and u.startswith(prefix)]
    if len(hits) == 1:
        return hits[0], ""
    if hits:
        return None, f"matches {len(hits)} GPUs' UUIDs, so it is ambiguous"
    return None, "matches no GPU's UUID"


@frozen
class _Resolved:
    """One ``CUDA_VISIBLE_DEVICES`` entry matched to the default device list."""

    items: tuple[tuple[int | None, _Candidate], ...] = ()  # (default position, device)
    key: object = None  # what it names, for the duplicate rule (None: unchecked)
    label: str = ""  # what it names, in words
    why_invalid: str = ""  # set when CUDA rejects the entry
    note: str = ""


def _resolve_ordinal(entry: int, defaults: tuple[_Candidate, ...]) -> _Resolved:
    if entry >= len(defaults):
        last = f", so 0-{len(defaults) - 1}" if defaults else ""
        return _Resolved(why_invalid=f"is out of range ({_plural(len(defaults))}{last})")
    # Repeated ordinals were caught when parsing.
    return _Resolved(items=((entry, defaults[entry]),))


def _resolve_gpu_uuid(
    entry: str, physical: Sequence[PhysicalGpu], defaults: tuple[_Candidate, ...]
) -> _Resolved:
    uuids = [g.uuid for g in physical]
    hit, why = _match_prefix(entry, uuids)
    if hit is None:
        if why == "matches no GPU's UUID" and any(u is None for u in uuids):
            return _Resolved(
                items=((None, _Candidate(None, entry, None, None, False)),),
                note=f"CUDA_VISIBLE_DEVICES entry '{_show(entry)}' could not be checked: "
                "the driver did not report every GPU's UUID",
            )
        return _Resolved(why_invalid=why)
    parent = physical[hit]
    members = tuple(
        (i, c)
        for i, c in enumerate(defaults)
        if c.system_index == parent.system_index and c.is_mig == (parent.mig is not None)
    )
    note = ""
    if parent.mig is not None and not members:
        note = (
            f"GPU {parent.system_index} ('{_show(entry)}') is in MIG mode and no MIG device "
            "of it is reachable here, so CUDA shows nothing for it"
        )
    return _Resolved(items=members, key=("gpu", hit), label=f"GPU {parent.system_index}", note=note)


def _resolve_mig(
    entry: str,
    physical: Sequence[PhysicalGpu],
    defaults: tuple[_Candidate, ...],
    mig_known: bool,
) -> _Resolved:
    hit, why = _match_prefix(entry, [c.uuid if c.is_mig else None for c in defaults])
    if hit is not None:
        return _Resolved(items=((hit, defaults[hit]),), key=("mig", hit), label="a MIG device")
    parent: PhysicalGpu | None = None
    legacy = _MIG_LEGACY_RE.match(entry)
    if legacy:
        p_hit, _ = _match_prefix(legacy.group(1), [g.uuid for g in physical])
        parent = physical[p_hit] if p_hit is not None else None
    if mig_known and (parent is None or parent.mig is None):
        if why == "matches no GPU's UUID":
            why = "matches no MIG device the driver reports"
        return _Resolved(why_invalid=why)
    # The driver did not say (no NVML), or it is the old MIG-GPU-<uuid>/<gi>/<ci>
    # form on a GPU in MIG mode: keep it, as CUDA may accept it.
    device = _Candidate(
        parent.system_index if parent else None,
        entry,
        f"MIG device of {parent.name}" if parent and parent.name else None,
        None,
        True,
    )
    return _Resolved(
        items=((None, device),),
        key=("mig-id", entry),
        label="a MIG device",
        note=f"MIG device '{_show(entry)}' is kept as listed: the driver did not report it, "
        "so its memory is unknown",
    )


def _select(
    spec: CudaVisibleDevices,
    physical: Sequence[PhysicalGpu],
    defaults: tuple[_Candidate, ...],
    mig_known: bool,
) -> _Selection:
    """Apply a parsed, non-empty ``CUDA_VISIBLE_DEVICES`` to the default list.

    As pytorch's ``_transform_uuid_to_ordinals``: an entry that matches nothing
    (or is ambiguous) stops the list; two entries naming one device hide all.
    """
    chosen: list[_Candidate] = []
    positions: list[int | None] = []
    seen: set[object] = set()
    notes: list[str] = []
    for entry in spec.entries:
        if isinstance(entry, int):
            resolved = _resolve_ordinal(entry, defaults)
        elif entry.startswith("GPU-"):
            resolved = _resolve_gpu_uuid(entry, physical, defaults)
        else:
            resolved = _resolve_mig(entry, physical, defaults, mig_known)
        if resolved.why_invalid:
            return _Selection(
                tuple(chosen),
                tuple(positions),
                invalid_entry=str(entry),
                invalid_why=resolved.why_invalid,
                notes=tuple(notes),
            )
        if resolved.key is not None:
            if resolved.key in seen:
                because = f"'{_show(str(entry))}' names {resolved.label} a second time"
                return _Selection((), (), hides_all_because=because)
            seen.add(resolved.key)
        if resolved.note:
            notes.append(resolved.note)
        for position, device in resolved.items:
            positions.append(position)
            chosen.append(device)
    return _Selection(tuple(chosen), tuple(positions), notes=tuple(notes))


# --------------------------------------------------------------------------
# The view (pure)
# --------------------------------------------------------------------------


def _source_words(source: str) -> str:
    if source == SOURCE_NVML:
        return "NVML"
    if source == SOURCE_PROC:
        return "/proc/driver/nvidia"
    return "the driver"


def _nvd_label(request: RuntimeRequest) -> str:
    value = (request.raw or "").strip()
    if not value:
        return "NVIDIA_VISIBLE_DEVICES (empty)"
    return f"NVIDIA_VISIBLE_DEVICES={_show(value)}"


def _runtime_none_reason(request: RuntimeRequest) -> str:
    if request.kind == "empty":
        return "NVIDIA_VISIBLE_DEVICES is empty: the container runtime was told to inject no GPU"
    if request.kind == "void":
        return f"{_nvd_label(request)}: the container runtime was told to inject no GPU"
    if request.kind == "none":
        return (
            f"{_nvd_label(request)}: the container runtime was told to inject the driver but no GPU"
        )
    return ""


def _runtime_notes(request: RuntimeRequest, device_count: int, word: str) -> list[str]:
    """What NVIDIA_VISIBLE_DEVICES says next to what the driver shows."""
    notes: list[str] = []
    shown = _nvd_label(request)
    shows = _plural(device_count, word)
    if request.kind in ("empty", "void", "none") and device_count:
        notes.append(
            f"{shown} asked for no GPU, yet the driver shows {shows} "
            "(bare metal, a privileged container, or devices passed with --device); "
            "CUDA uses what the driver shows"
        )
    elif request.kind == "all":
        if device_count:
            notes.append(f"{shown}: the runtime was asked for every GPU")
        else:
            notes.append(
                f"{shown} asks for every GPU, but no GPU arrived: the "
                "CUDA base images set this value, so it only matters when the container is "
                "started with the NVIDIA runtime (`--gpus`)"
            )
    elif request.kind == "directory":
        if request.devices:
            listed = ", ".join(_show(d) for d in request.devices)
            notes.append(
                f"{shown} (the Kubernetes device plugin's volume-mounts form) requests: {listed}"
            )
        else:
            notes.append(
                f"{shown} names a directory of requested devices "
                "(the Kubernetes device plugin's volume-mounts form), but it lists none here"
            )
    requested = request.devices if request.kind in ("devices", "directory") else ()
    if not requested or "all" in requested:
        return notes
    asked = _plural(len(requested), "device")
    if device_count == 0:
        notes.append(
            f"NVIDIA_VISIBLE_DEVICES requests {asked}, but none reached the container: is the "
            "NVIDIA container toolkit installed, and was the container started with `--gpus` "
            "or the NVIDIA runtime?"
        )
    elif len(requested) < device_count:
        notes.append(
            f"NVIDIA_VISIBLE_DEVICES requests {asked} but the driver shows {shows} (a "
            "privileged container sees them all); CUDA uses what the driver shows unless "
            "CUDA_VISIBLE_DEVICES narrows it"
        )
    elif len(requested) > device_count:
        notes.append(f"NVIDIA_VISIBLE_DEVICES requests {asked} but the driver shows only {shows}")
    return notes


def _order_notes(env: Mapping[str, str], physical: Sequence[PhysicalGpu]) -> list[str]:
    names = {g.name for g in physical if g.name}
    order = env.get("CUDA_DEVICE_ORDER", "").strip()
    if len(names) > 1 and order != "PCI_BUS_ID":
        return [
            "the GPUs are of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA "
            "numbers the fastest GPU first, so TensorFlow's GPU indexes (and the ordinals in "
            "CUDA_VISIBLE_DEVICES) may not follow nvidia-smi's order; set "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID to make them match"
        ]
    return []


def visible_gpus(
    env: Mapping[str, str],
    physical: Sequence[PhysicalGpu],
    *,
    source: str,
    driver_reason: str = "",
    requested_devices: Sequence[str] | None = None,
) -> GpuView:
    """The GPUs TensorFlow will see, numbered as it numbers them, and why.

    ``physical`` is what the driver shows (:func:`load_physical_gpus`);
    ``driver_reason`` says why it shows nothing, when it does. For the
    volume-mounts form of ``NVIDIA_VISIBLE_DEVICES``, ``requested_devices`` are
    the file names the edge found in that directory.
    """
    request = parse_nvidia_visible_devices(env.get("NVIDIA_VISIBLE_DEVICES"))
    if request.kind == "directory" and requested_devices is not None:
        request = replace(request, devices=tuple(requested_devices))
    spec = parse_cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    shown_cvd = _show(spec.raw) if spec.raw is not None else ""

    defaults = _default_devices(physical)
    word = "device" if any(c.is_mig for c in defaults) else "GPU"
    notes: list[str] = _runtime_notes(request, len(defaults), word)
    notes.extend(_order_notes(env, physical))

    def none(reason: str) -> GpuView:
        return GpuView(gpus=(), source=source, reason=reason, notes=tuple(notes))

    if not physical:
        reason = (
            _runtime_none_reason(request)
            or driver_reason
            or ("the NVIDIA driver reports no GPU" if source != SOURCE_NONE else NO_DRIVER_REASON)
        )
        if spec.is_set and not spec.entries:
            notes.append(f"CUDA_VISIBLE_DEVICES={shown_cvd} would hide every GPU anyway")
        return none(reason)

    if not defaults:
        migs = [str(g.system_index) for g in physical if g.mig is not None]
        which = f"GPU {migs[0]} is" if len(migs) == 1 else f"GPUs {', '.join(migs)} are"
        return none(f"{which} in MIG mode but no MIG device is reachable in this container")

    notes.extend(spec.notes)
    selection = _apply(spec, physical, defaults, shown_cvd, source == SOURCE_NVML)
    if isinstance(selection, str):
        return none(selection)
    notes.extend(selection.notes)
    if selection.invalid_entry is not None:
        notes.append(
            f"CUDA_VISIBLE_DEVICES stops at its entry '{_show(selection.invalid_entry)}', which "
            f"{selection.invalid_why}: the entries after it are ignored too"
        )

    gpus = tuple(
        Gpu(
            index=i,
            system_index=c.system_index,
            uuid=c.uuid,
            name=c.name,
            memory_mb=c.memory_mb,
        )
        for i, c in enumerate(selection.chosen)
    )
    mig_count = sum(1 for c in selection.chosen if c.is_mig)
    if mig_count > 1:
        notes.append(
            f"{_plural(mig_count, 'MIG device')} would be visible, but NVIDIA's MIG guide says "
            "a CUDA 11/12 process enumerates only one MIG device: TensorFlow may see GPU:0 only"
        )
    if source == SOURCE_PROC:
        notes.append(
            "GPU memory is unknown: NVML was not available, so the GPUs were read from "
            "/proc/driver/nvidia/gpus"
        )

    reason = f"{_plural(len(gpus))} visible via {_source_words(source)}"
    qualifiers = [_cvd_effect(shown_cvd, selection, len(defaults))] if spec.is_set else []
    if source == SOURCE_PROC:
        qualifiers.append("memory unknown")
    if qualifiers:
        reason += f" ({'; '.join(qualifiers)})"
    return GpuView(gpus=gpus, source=source, reason=reason, notes=tuple(notes))


def _apply(
    spec: CudaVisibleDevices,
    physical: Sequence[PhysicalGpu],
    defaults: tuple[_Candidate, ...],
    shown: str,
    mig_known: bool,
) -> _Selection | str:
    """The devices CUDA keeps, or (a str) why it keeps none."""
    if not spec.is_set:
        return _Selection(defaults, tuple(range(len(defaults))))
    if spec.is_empty:
        return "CUDA_VISIBLE_DEVICES is empty, which hides every GPU"
    selection = _select(spec, physical, defaults, mig_known)
    if spec.duplicate_entry is not None:
        # pytorch: "Repeated ordinal results in empty set" (also for ids).
        selection = _Selection(
            (), (), hides_all_because=f"it names '{_show(spec.duplicate_entry.strip())}' twice"
        )
    if selection.hides_all_because:
        return (
            f"CUDA_VISIBLE_DEVICES={shown} hides every GPU: "
            f"{selection.hides_all_because}, and CUDA then shows no device"
        )
    if spec.invalid_entry is not None and selection.invalid_entry is None:
        selection = replace(
            selection, invalid_entry=spec.invalid_entry, invalid_why=spec.invalid_why
        )
    if selection.chosen:
        return selection
    if selection.invalid_entry is None:
        return f"CUDA_VISIBLE_DEVICES={shown} selects no device CUDA can use"
    return (
        f"CUDA_VISIBLE_DEVICES={shown} hides every GPU: its first entry "
        f"'{_show(selection.invalid_entry)}' {selection.invalid_why}"
    )


def _cvd_effect(shown: str, selection: _Selection, total: int) -> str:
    parts: list[str] = []
    if len(selection.chosen) < total:
        parts.append(f"selects {len(selection.chosen)} of {total}")
    known = [p for p in selection.positions if p is not None]
    if known != sorted(known):
        parts.append("reorders them")
    effect = " and ".join(parts) if parts else "keeps them all, in order"
    if selection.invalid_entry is not None:
        effect += f", stopping at its invalid entry '{_show(selection.invalid_entry)}'"
    return f"CUDA_VISIBLE_DEVICES={shown} {effect}"


# --------------------------------------------------------------------------
# The edge: driver, NVML, /proc, the volume-mounts directory
# --------------------------------------------------------------------------


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _listdir(path: Path) -> list[str]:
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


def _error_text(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return _show(text.strip(), limit=200) or type(exc).__name__


@frozen
class _Scan:
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
        return None, f"NVML could not start ({_error_text(exc)})", notes
    try:
        try:
            count = int(nvml.device_count())
        except Exception as exc:  # noqa: BLE001
            return None, f"NVML could not count the GPUs ({_error_text(exc)})", notes
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
            notes.append(f"nvmlShutdown failed ({_error_text(exc)})")


def _read_one(nvml: NvmlApi, index: int, notes: list[str]) -> PhysicalGpu:
    def attempt(what: str, call: Any) -> Any:
        try:
            return call(index)
        except Exception as exc:  # noqa: BLE001 - one unreadable fact is a note, not a failure
            notes.append(f"NVML could not read the {what} of GPU {index} ({_error_text(exc)})")
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
            notes.append(f"NVML gave unreadable MIG devices for GPU {index} ({_error_text(exc)})")
    return PhysicalGpu(
        system_index=index,
        uuid=str(uuid) if uuid else None,
        name=str(name) if name else None,
        memory_mb=int(memory) // _MIB if isinstance(memory, int) and memory > 0 else None,
        mig=mig,
    )


def _parse_information(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _read_proc(gpus_dir: Path) -> tuple[tuple[PhysicalGpu, ...], list[str]]:
    """The GPUs listed under /proc/driver/nvidia/gpus, in Device Minor order."""
    notes: list[str] = []
    found: list[tuple[int, str, str | None, str | None]] = []  # minor, bus, uuid, name
    for bus in _listdir(gpus_dir):
        info = gpus_dir / bus / "information"
        try:
            with info.open("rb") as fh:
                data = fh.read(_MAX_READ)
        except (OSError, ValueError) as exc:
            where = f"/proc/driver/nvidia/gpus/{_show(bus)}/information"
            notes.append(f"could not read {where} ({_error_text(exc)})")
            continue
        fields = _parse_information(_decode(data))
        minor_text = fields.get("Device Minor", "")
        minor = int(minor_text) if minor_text.isascii() and minor_text.isdigit() else None
        uuid = fields.get("GPU UUID")
        if uuid is not None and not _UUID_RE.match(uuid):
            uuid = None
        name = fields.get("Model") or None
        if minor is None or name is None:
            notes.append(f"/proc/driver/nvidia/gpus/{_show(bus)}/information is incomplete")
        found.append((minor if minor is not None else 1 << 30, bus, uuid, name))
    found.sort()
    gpus = tuple(
        PhysicalGpu(system_index=i, uuid=uuid, name=_show(name) if name else None, memory_mb=None)
        for i, (_minor, _bus, uuid, name) in enumerate(found)
    )
    return gpus, notes


def _dev_nodes(dev: Path) -> list[str]:
    return [n for n in _listdir(dev) if re.fullmatch(r"nvidia[0-9]+", n)]


def _scan(root: Path, nvml: NvmlApi | None) -> _Scan:
    ctl = root / "dev" / "nvidiactl"
    gpus_dir = root / "proc" / "driver" / "nvidia" / "gpus"
    has_ctl = _exists(ctl)
    has_proc = _is_dir(gpus_dir)
    if not has_ctl and not has_proc:
        # Cheap path: no driver, so no import of pynvml and no NVML call.
        return _Scan((), SOURCE_NONE, (), NO_DRIVER_REASON)

    notes: list[str] = []
    api: NvmlApi | str = nvml if nvml is not None else load_real_nvml()
    if isinstance(api, str):
        nvml_problem = api
    else:
        gpus, nvml_problem, nvml_notes = _read_with_nvml(api)
        notes.extend(nvml_notes)
        if gpus is not None:
            reason = "" if gpus else "the NVIDIA driver is present but NVML reports no GPU"
            return _Scan(gpus, SOURCE_NVML, tuple(notes), reason)
    notes.append(f"NVML unavailable: {nvml_problem}; reading /proc/driver/nvidia/gpus instead")

    if not has_proc:
        nodes = _dev_nodes(root / "dev")
        if nodes:
            notes.append(
                "device nodes " + ", ".join(f"/dev/{n}" for n in nodes) + " exist, but "
                "without NVML or /proc/driver/nvidia/gpus their GPUs cannot be described"
            )
        reason = f"{nvml_problem}, and there is no /proc/driver/nvidia/gpus to fall back on"
        return _Scan((), SOURCE_NONE, tuple(notes), reason)
    gpus, proc_notes = _read_proc(gpus_dir)
    notes.extend(proc_notes)
    reason = "" if gpus else f"{nvml_problem} and /proc/driver/nvidia/gpus lists no GPU"
    return _Scan(gpus, SOURCE_PROC, tuple(notes), reason)


def load_physical_gpus(
    *, root: Path = Path("/"), nvml: NvmlApi | None = None
) -> tuple[tuple[PhysicalGpu, ...], str, tuple[str, ...]]:
    """(gpus, source, notes): what the driver shows under ``root``.

    NVML is only tried when the driver is evidently there (``dev/nvidiactl`` or
    ``proc/driver/nvidia/gpus``); ``nvml`` replaces the real bindings (tests).
    """
    scan = _scan(root, nvml)
    return scan.gpus, scan.source, scan.notes


def read_requested_devices(value: str, *, root: Path = Path("/")) -> tuple[str, ...] | None:
    """The device ids bind-mounted as file names in the volume-mounts directory.

    ``value`` is ``NVIDIA_VISIBLE_DEVICES`` (an absolute path). CDI requests
    (``cdi/<vendor>/<class>/<name>``) come back as ``vendor/class=name``.
    None when the directory cannot be listed.
    """
    directory = root / value.strip().lstrip("/")
    if not _is_dir(directory):
        return None
    ids: list[str] = []
    for name in _listdir(directory):
        if name == "cdi" and _is_dir(directory / name):
            for vendor in _listdir(directory / name):
                for cls in _listdir(directory / name / vendor):
                    ids.extend(
                        f"{vendor}/{cls}={dev}" for dev in _listdir(directory / name / vendor / cls)
                    )
        else:
            ids.append(name)
    return tuple(_show(i, limit=200) for i in ids[:_MAX_ENTRIES])


def detect_gpus(
    env: Mapping[str, str], *, root: Path = Path("/"), nvml: NvmlApi | None = None
) -> GpuView:
    """The edge: what the driver shows under ``root``, seen through ``env``."""
    try:
        scan = _scan(root, nvml)
        requested = None
        raw = env.get("NVIDIA_VISIBLE_DEVICES")
        if raw is not None and parse_nvidia_visible_devices(raw).kind == "directory":
            requested = read_requested_devices(raw, root=root)
        view = visible_gpus(
            env,
            scan.gpus,
            source=scan.source,
            driver_reason=scan.driver_reason,
            requested_devices=requested,
        )
    except Exception as exc:  # noqa: BLE001 - the entrypoint must hand off whatever happens
        return GpuView(
            gpus=(),
            source=SOURCE_NONE,
            reason=f"GPU detection failed unexpectedly ({_error_text(exc)})",
            notes=(),
        )
    return replace(view, notes=scan.notes + view.notes)
