"""``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES``, read as CUDA and the toolkit do.

``CUDA_VISIBLE_DEVICES`` follows pytorch's reading (``_parse_visible_devices``,
``_transform_uuid_to_ordinals``), which mirrors CUDA's. Pure. docs/gpus.md: "How
visible GPUs are detected".
"""

from __future__ import annotations

from tf_entrypoint.common import plural, show
from tf_entrypoint.frozen import frozen
from tf_entrypoint.nvidia import PhysicalGpu

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

_SHOWN = 60  # characters of a user value quoted in a message
_HEX = frozenset("0123456789abcdefABCDEF-")


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
    for elem in raw.split(","):
        if elem in entries:
            return CudaVisibleDevices(raw=raw, entries=(), duplicate_entry=elem)
        if not elem.startswith(prefix):
            why = f"does not start with {prefix} like the first entry"
            if elem.strip().startswith(prefix):
                why = "has spaces around it, which CUDA does not strip from ids"
            elif not elem:
                why = "is empty"
            return CudaVisibleDevices(raw, tuple(entries), invalid_entry=elem, invalid_why=why)
        entries.append(elem)
    return CudaVisibleDevices(raw=raw, entries=tuple(entries))


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
            return CudaVisibleDevices(raw, tuple(entries), elem, why, notes=tuple(notes))
        if text != str(value):
            notes.append(
                f"CUDA_VISIBLE_DEVICES entry '{show(elem, _SHOWN)}' is read as {value} "
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


@frozen
class Candidate:
    """A device CUDA would list by default, in default order."""

    system_index: int | None
    uuid: str | None
    name: str | None
    memory_mb: int | None
    is_mig: bool


@frozen
class Selection:
    chosen: tuple[Candidate, ...]
    positions: tuple[int | None, ...]  # default-order position of each (None: not listed)
    invalid_entry: str | None = None
    invalid_why: str = ""
    hides_all_because: str = ""  # set when CUDA hides everything (duplicates)
    notes: tuple[str, ...] = ()


def default_devices(physical: Sequence[PhysicalGpu]) -> tuple[Candidate, ...]:
    out: list[Candidate] = []
    for gpu in physical:
        if gpu.mig is None:
            out.append(Candidate(gpu.system_index, gpu.uuid, gpu.name, gpu.memory_mb, False))
        else:
            out.extend(
                Candidate(gpu.system_index, m.uuid, m.name, m.memory_mb, True) for m in gpu.mig
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

    items: tuple[tuple[int | None, Candidate], ...] = ()  # (default position, device)
    key: object = None  # what it names, for the duplicate rule (None: unchecked)
    label: str = ""  # what it names, in words
    why_invalid: str = ""  # set when CUDA rejects the entry
    note: str = ""


def _resolve_ordinal(entry: int, defaults: tuple[Candidate, ...]) -> _Resolved:
    if entry >= len(defaults):
        last = f", so 0-{len(defaults) - 1}" if defaults else ""
        return _Resolved(why_invalid=f"is out of range ({plural(len(defaults), 'GPU')}{last})")
    # Repeated ordinals were caught when parsing.
    return _Resolved(items=((entry, defaults[entry]),))


def _resolve_gpu_uuid(
    entry: str, physical: Sequence[PhysicalGpu], defaults: tuple[Candidate, ...]
) -> _Resolved:
    uuids = [g.uuid for g in physical]
    hit, why = _match_prefix(entry, uuids)
    if hit is None:
        if why == "matches no GPU's UUID" and any(u is None for u in uuids):
            return _Resolved(
                items=((None, Candidate(None, entry, None, None, False)),),
                note=f"CUDA_VISIBLE_DEVICES entry '{show(entry, _SHOWN)}' could not be checked: "
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
            f"GPU {parent.system_index} ('{show(entry, _SHOWN)}') is in MIG mode and no MIG device "
            "of it is reachable here, so CUDA shows nothing for it"
        )
    return _Resolved(items=members, key=("gpu", hit), label=f"GPU {parent.system_index}", note=note)


def _legacy_mig_parent(entry: str) -> str | None:
    """The GPU UUID of an old-style ``MIG-GPU-<uuid>/<gi>/<ci>`` id, else None."""
    parts = entry.split("/")
    if len(parts) != 3 or not parts[0].startswith("MIG-GPU-"):
        return None
    uuid = parts[0][4:]
    digits = all(p.isascii() and p.isdigit() for p in parts[1:])
    return uuid if digits and len(uuid) > 4 and set(uuid[4:]) <= _HEX else None


def _resolve_mig(
    entry: str,
    physical: Sequence[PhysicalGpu],
    defaults: tuple[Candidate, ...],
    mig_known: bool,
) -> _Resolved:
    hit, why = _match_prefix(entry, [c.uuid if c.is_mig else None for c in defaults])
    if hit is not None:
        return _Resolved(items=((hit, defaults[hit]),), key=("mig", hit), label="a MIG device")
    parent: PhysicalGpu | None = None
    legacy = _legacy_mig_parent(entry)
    if legacy:
        p_hit, _ = _match_prefix(legacy, [g.uuid for g in physical])
        parent = physical[p_hit] if p_hit is not None else None
    if mig_known and (parent is None or parent.mig is None):
        if why == "matches no GPU's UUID":
            why = "matches no MIG device the driver reports"
        return _Resolved(why_invalid=why)
    # The driver did not say (no NVML), or it is the old MIG-GPU-<uuid>/<gi>/<ci>
    # form on a GPU in MIG mode: keep it, as CUDA may accept it.
    device = Candidate(
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
        note=f"MIG device '{show(entry, _SHOWN)}' is kept as listed: the driver did not report it, "
        "so its memory is unknown",
    )


def select(
    spec: CudaVisibleDevices,
    physical: Sequence[PhysicalGpu],
    defaults: tuple[Candidate, ...],
    mig_known: bool,
) -> Selection:
    """Apply a parsed, non-empty ``CUDA_VISIBLE_DEVICES`` to the default list.

    As pytorch's ``_transform_uuid_to_ordinals``: an entry that matches nothing
    (or is ambiguous) stops the list; two entries naming one device hide all.
    """
    chosen: list[Candidate] = []
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
            return Selection(
                tuple(chosen),
                tuple(positions),
                invalid_entry=str(entry),
                invalid_why=resolved.why_invalid,
                notes=tuple(notes),
            )
        if resolved.key is not None:
            if resolved.key in seen:
                because = f"'{show(str(entry), _SHOWN)}' names {resolved.label} a second time"
                return Selection((), (), hides_all_because=because)
            seen.add(resolved.key)
        if resolved.note:
            notes.append(resolved.note)
        for position, device in resolved.items:
            positions.append(position)
            chosen.append(device)
    return Selection(tuple(chosen), tuple(positions), notes=tuple(notes))
