"""Which GPUs TensorFlow will see, and why, without importing TensorFlow.

The driver's list (:mod:`tf_entrypoint.nvidia`) seen through the visibility
variables (:mod:`tf_entrypoint.cuda_visible`), numbered as TensorFlow numbers it,
with one sentence saying why these GPUs or why none, and notes. Never raises.
docs/gpus.md: "How visible GPUs are detected".
"""

from __future__ import annotations

from tf_entrypoint.common import plural, show
from tf_entrypoint.cuda_visible import (
    Candidate,
    CudaVisibleDevices,
    RuntimeRequest,
    Selection,
    default_devices,
    parse_cuda_visible_devices,
    parse_nvidia_visible_devices,
    select,
)
from tf_entrypoint.frozen import frozen, replace
from tf_entrypoint.nvidia import (
    NO_DRIVER_REASON,
    SOURCE_NONE,
    SOURCE_NVML,
    SOURCE_PROC,
    PhysicalGpu,
    error_text,
    read_requested_devices,
    scan,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from os import PathLike

    from tf_entrypoint.nvidia import NvmlApi

_SHOWN = 60  # characters of a user value quoted in a message


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
    return f"NVIDIA_VISIBLE_DEVICES={show(value, _SHOWN)}"


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
    shows = plural(device_count, word)
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
            listed = ", ".join(show(d, _SHOWN) for d in request.devices)
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
    asked = plural(len(requested), "device")
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
    shown_cvd = show(spec.raw, _SHOWN) if spec.raw is not None else ""

    defaults = default_devices(physical)
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
            f"CUDA_VISIBLE_DEVICES stops at its entry '{show(selection.invalid_entry, _SHOWN)}', "
            f"which {selection.invalid_why}: the entries after it are ignored too"
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
            f"{plural(mig_count, 'MIG device')} would be visible, but NVIDIA's MIG guide says "
            "a CUDA 11/12 process enumerates only one MIG device: TensorFlow may see GPU:0 only"
        )
    if source == SOURCE_PROC:
        notes.append(
            "GPU memory is unknown: NVML was not available, so the GPUs were read from "
            "/proc/driver/nvidia/gpus"
        )

    reason = f"{plural(len(gpus), 'GPU')} visible via {_source_words(source)}"
    qualifiers = [_cvd_effect(shown_cvd, selection, len(defaults))] if spec.is_set else []
    if source == SOURCE_PROC:
        qualifiers.append("memory unknown")
    if qualifiers:
        reason += f" ({'; '.join(qualifiers)})"
    return GpuView(gpus=gpus, source=source, reason=reason, notes=tuple(notes))


def _apply(
    spec: CudaVisibleDevices,
    physical: Sequence[PhysicalGpu],
    defaults: tuple[Candidate, ...],
    shown: str,
    mig_known: bool,
) -> Selection | str:
    """The devices CUDA keeps, or (a str) why it keeps none."""
    if not spec.is_set:
        return Selection(defaults, tuple(range(len(defaults))))
    if spec.is_empty:
        return "CUDA_VISIBLE_DEVICES is empty, which hides every GPU"
    selection = select(spec, physical, defaults, mig_known)
    if spec.duplicate_entry is not None:
        # pytorch: "Repeated ordinal results in empty set" (also for ids).
        selection = Selection(
            (),
            (),
            hides_all_because=f"it names '{show(spec.duplicate_entry.strip(), _SHOWN)}' twice",
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
        f"'{show(selection.invalid_entry, _SHOWN)}' {selection.invalid_why}"
    )


def _cvd_effect(shown: str, selection: Selection, total: int) -> str:
    parts: list[str] = []
    if len(selection.chosen) < total:
        parts.append(f"selects {len(selection.chosen)} of {total}")
    known = [p for p in selection.positions if p is not None]
    if known != sorted(known):
        parts.append("reorders them")
    effect = " and ".join(parts) if parts else "keeps them all, in order"
    if selection.invalid_entry is not None:
        effect += f", stopping at its invalid entry '{show(selection.invalid_entry, _SHOWN)}'"
    return f"CUDA_VISIBLE_DEVICES={shown} {effect}"


def detect_gpus(
    env: Mapping[str, str], *, root: str | PathLike[str] = "/", nvml: NvmlApi | None = None
) -> GpuView:
    """The edge: what the driver shows under ``root``, seen through ``env``."""
    try:
        found = scan(str(root), nvml)
        requested = None
        raw = env.get("NVIDIA_VISIBLE_DEVICES")
        if raw is not None and parse_nvidia_visible_devices(raw).kind == "directory":
            requested = read_requested_devices(raw, root=str(root))
        view = visible_gpus(
            env,
            found.gpus,
            source=found.source,
            driver_reason=found.driver_reason,
            requested_devices=requested,
        )
    except Exception as exc:  # noqa: BLE001 - the entrypoint must hand off whatever happens
        return GpuView(
            gpus=(),
            source=SOURCE_NONE,
            reason=f"GPU detection failed unexpectedly ({error_text(exc)})",
            notes=(),
        )
    return replace(view, notes=found.notes + view.notes)
