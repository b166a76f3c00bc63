"""Tests for tf_entrypoint.gpus: fake /proc and /dev trees, a fake NVML, no GPU needed."""

from __future__ import annotations

import sys
import tempfile
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.fake_gpus import MIB, UUIDS, FakeNvml, NVMLError, info, make_tree
from tf_entrypoint.cuda_visible import (
    CudaVisibleDevices,
    parse_cuda_visible_devices,
    parse_nvidia_visible_devices,
)
from tf_entrypoint.gpus import Gpu, GpuView, detect_gpus, visible_gpus
from tf_entrypoint.nvidia import (
    NO_DRIVER_REASON,
    PYNVML_MISSING_REASON,
    SOURCE_NONE,
    SOURCE_NVML,
    SOURCE_PROC,
    MigDevice,
    PhysicalGpu,
    PynvmlApi,
    read_requested_devices,
    scan,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tf_entrypoint.nvidia import NvmlApi


def load_physical_gpus(
    *, root: Path, nvml: NvmlApi | None = None
) -> tuple[tuple[PhysicalGpu, ...], str, tuple[str, ...]]:
    """(gpus, source, notes): what the driver shows under ``root``."""
    found = scan(str(root), nvml)
    return found.gpus, found.source, found.notes


def four_gpus(name: str = "NVIDIA A100-SXM4-40GB") -> tuple[PhysicalGpu, ...]:
    return tuple(PhysicalGpu(i, UUIDS[i], name, 40960) for i in range(4))


def indexes(view: GpuView) -> list[int | None]:
    return [g.system_index for g in view.gpus]


# --------------------------------------------------------------------------
# Fakes
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# parse_cuda_visible_devices
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "entries", "invalid", "duplicate"),
    [
        (None, (), None, None),  # unset: every device (is_set is False)
        ("", (), None, None),  # empty: no device
        ("   ", (), None, None),  # whitespace only: no device
        ("0,2,-1,1", (0, 2), "-1", None),  # CUDA's documented example
        ("1,0", (1, 0), None, None),  # order renumbers
        (" 1 , 0 ", (1, 0), None, None),  # spaces around ordinals are fine
        ("0, 1, 2, -1, 3", (0, 1, 2), " -1", None),  # pytorch's test
        ("1gpu2,2ampere", (1, 2), None, None),  # strtoul: the rest is ignored
        ("2, +3, -0, 5", (2, 3, 0, 5), None, None),  # unary signs
        ("one,two,3,4", (), "one", None),  # non-number first
        ("4,3,two,one", (4, 3), "two", None),  # non-number stops
        ("0,,1", (0,), "", None),  # an empty entry stops
        ("0,1,2,1", (), None, "1"),  # a repeated ordinal hides everything
        ("0,0", (), None, "0"),
        ("+", (), "+", None),  # a sign alone is not a number (pytorch would crash)
        ("\u0663", (), "\u0663", None),  # non-ASCII digits are not digits to CUDA
        ("99", (99,), None, None),  # range is judged against the GPUs, later
        ("-1", (), "-1", None),  # the usual way to hide every GPU
        ("0,GPU-0a1b", (0,), "GPU-0a1b", None),  # ids after ordinals stop the list
        ("GPU-0a1b2c3d", ("GPU-0a1b2c3d",), None, None),
        ("GPU-aa,GPU-bb", ("GPU-aa", "GPU-bb"), None, None),
        ("GPU-aa,1", ("GPU-aa",), "1", None),  # every entry needs the prefix
        ("GPU-aa, GPU-bb", ("GPU-aa",), " GPU-bb", None),  # ids are not stripped
        ("GPU-aa,GPU-aa", (), None, "GPU-aa"),  # a repeated id hides everything
        ("GPU-aa,MIG-bb", ("GPU-aa",), "MIG-bb", None),
        ("MIG-aa,MIG-bb", ("MIG-aa", "MIG-bb"), None, None),
        ("MIG-GPU-aa/1/0", ("MIG-GPU-aa/1/0",), None, None),
        (" GPU-aa", (), " GPU-aa", None),  # a leading space makes it an ordinal list
    ],
)
def test_parse_cuda_visible_devices(
    raw: str | None,
    entries: tuple[int | str, ...],
    invalid: str | None,
    duplicate: str | None,
) -> None:
    spec = parse_cuda_visible_devices(raw)
    assert spec.entries == entries
    assert spec.invalid_entry == invalid
    assert spec.duplicate_entry == duplicate
    assert spec.is_set is (raw is not None)
    if invalid is not None:
        assert spec.invalid_why


def test_parse_notes_leading_number() -> None:
    spec = parse_cuda_visible_devices("1gpu2")
    assert spec.entries == (1,)
    assert any("'1gpu2' is read as 1" in n for n in spec.notes)


def test_parse_explains_spaces_around_ids() -> None:
    spec = parse_cuda_visible_devices("GPU-aa, GPU-bb")
    assert "spaces" in spec.invalid_why


# --------------------------------------------------------------------------
# parse_nvidia_visible_devices
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "kind", "devices"),
    [
        (None, "unset", ()),
        ("", "empty", ()),
        (" , ", "empty", ()),
        ("void", "void", ()),
        ("none", "none", ()),
        ("all", "all", ()),
        ("0,void", "void", ()),  # void beats everything
        ("all,none", "none", ()),  # none beats all
        ("0, 1", "devices", ("0", "1")),
        ("GPU-aa,MIG-bb", "devices", ("GPU-aa", "MIG-bb")),
        ("/var/run/nvidia-container-devices", "directory", ()),
    ],
)
def test_parse_nvidia_visible_devices(raw: str | None, kind: str, devices: tuple[str, ...]) -> None:
    request = parse_nvidia_visible_devices(raw)
    assert request.kind == kind
    assert request.devices == devices


# --------------------------------------------------------------------------
# visible_gpus: which GPUs, and numbered how
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cvd", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("0,2,-1,1", [0, 2]),
        ("1,0", [1, 0]),
        ("3", [3]),
        ("1,9", [1]),  # out of range stops the list
        ("GPU-5e6f", [2]),  # a unique prefix
        ("GPU-c0ffee00-0000-1111-2222-333333333333,GPU-0a1b2c", [3, 0]),
        ("GPU-5e6f,GPU-0a1b", [2]),  # ambiguous prefix stops the list
        ("GPU-5e6f,GPU-dead", [2]),  # unknown uuid stops the list
    ],
)
def test_visible_gpus_selection(cvd: str | None, expected: list[int]) -> None:
    env = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    view = visible_gpus(env, four_gpus(), source=SOURCE_NVML)
    assert indexes(view) == expected
    assert [g.index for g in view.gpus] == list(range(len(expected)))
    assert [g.uuid for g in view.gpus] == [UUIDS[i] for i in expected]
    assert all(g.memory_mb == 40960 for g in view.gpus)


def test_renumbering_reason() -> None:
    view = visible_gpus({"CUDA_VISIBLE_DEVICES": "1,0"}, four_gpus()[:2], source=SOURCE_NVML)
    assert view.gpus[0] == Gpu(0, 1, UUIDS[1], "NVIDIA A100-SXM4-40GB", 40960)
    assert view.reason == "2 GPUs visible via NVML (CUDA_VISIBLE_DEVICES=1,0 reorders them)"


def test_found_reason_unset() -> None:
    view = visible_gpus({}, four_gpus(), source=SOURCE_NVML)
    assert view.reason == "4 GPUs visible via NVML"
    assert view.source == SOURCE_NVML


def test_found_reason_truncated() -> None:
    view = visible_gpus({"CUDA_VISIBLE_DEVICES": "0,2,-1,1"}, four_gpus(), source=SOURCE_NVML)
    assert "selects 2 of 4" in view.reason
    assert "'-1'" in view.reason
    assert any("stops at its entry '-1'" in n for n in view.notes)


@pytest.mark.parametrize(
    ("env", "physical", "source", "driver_reason", "expected"),
    [
        (
            {"NVIDIA_VISIBLE_DEVICES": "void"},
            (),
            SOURCE_NONE,
            NO_DRIVER_REASON,
            "NVIDIA_VISIBLE_DEVICES=void: the container runtime was told to inject no GPU",
        ),
        (
            {"NVIDIA_VISIBLE_DEVICES": ""},
            (),
            SOURCE_NONE,
            NO_DRIVER_REASON,
            "NVIDIA_VISIBLE_DEVICES is empty: the container runtime was told to inject no GPU",
        ),
        (
            {"NVIDIA_VISIBLE_DEVICES": "none"},
            (),
            SOURCE_PROC,
            "",
            "NVIDIA_VISIBLE_DEVICES=none: the container runtime was told to inject the driver "
            "but no GPU",
        ),
        ({}, (), SOURCE_NONE, NO_DRIVER_REASON, NO_DRIVER_REASON),
        # CUDA base images set NVIDIA_VISIBLE_DEVICES=all: it proves nothing.
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, (), SOURCE_NONE, NO_DRIVER_REASON, NO_DRIVER_REASON),
        (
            {},
            (),
            SOURCE_PROC,
            f"{PYNVML_MISSING_REASON} and /proc/driver/nvidia/gpus lists no GPU",
            "nvidia-ml-py (pynvml) is not installed and /proc/driver/nvidia/gpus lists no GPU",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": ""},
            four_gpus(),
            SOURCE_NVML,
            "",
            "CUDA_VISIBLE_DEVICES is empty, which hides every GPU",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "-1"},
            four_gpus(),
            SOURCE_NVML,
            "",
            "CUDA_VISIBLE_DEVICES=-1 hides every GPU: its first entry '-1' is negative",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "4,0"},
            four_gpus(),
            SOURCE_NVML,
            "",
            "CUDA_VISIBLE_DEVICES=4,0 hides every GPU: its first entry '4' is out of range "
            "(4 GPUs, so 0-3)",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "GPU-dead"},
            four_gpus(),
            SOURCE_NVML,
            "",
            "CUDA_VISIBLE_DEVICES=GPU-dead hides every GPU: its first entry 'GPU-dead' matches "
            "no GPU's UUID",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "GPU-0a1b"},
            four_gpus(),
            SOURCE_NVML,
            "",
            "CUDA_VISIBLE_DEVICES=GPU-0a1b hides every GPU: its first entry 'GPU-0a1b' matches "
            "2 GPUs' UUIDs, so it is ambiguous",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "gpu0"},
            four_gpus(),
            SOURCE_NVML,
            "",
            "CUDA_VISIBLE_DEVICES=gpu0 hides every GPU: its first entry 'gpu0' is not a number",
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "0,1,0"},
            four_gpus(),
            SOURCE_NVML,
            "",
            "CUDA_VISIBLE_DEVICES=0,1,0 hides every GPU: it names '0' twice, and CUDA then "
            "shows no device",
        ),
        (
            # Two different prefixes of one GPU count as a repeat (pytorch).
            {"CUDA_VISIBLE_DEVICES": "GPU-5e6f,GPU-5e6f7a"},
            four_gpus(),
            SOURCE_NVML,
            "",
            "CUDA_VISIBLE_DEVICES=GPU-5e6f,GPU-5e6f7a hides every GPU: 'GPU-5e6f7a' names "
            "GPU 2 a second time, and CUDA then shows no device",
        ),
    ],
)
def test_reasons(
    env: dict[str, str],
    physical: tuple[PhysicalGpu, ...],
    source: str,
    driver_reason: str,
    expected: str,
) -> None:
    view = visible_gpus(env, physical, source=source, driver_reason=driver_reason)
    assert view.gpus == ()
    assert view.reason == expected


def test_privileged_container_note() -> None:
    """NVIDIA_VISIBLE_DEVICES names fewer GPUs than the driver shows."""
    view = visible_gpus({"NVIDIA_VISIBLE_DEVICES": UUIDS[1]}, four_gpus(), source=SOURCE_NVML)
    assert len(view.gpus) == 4  # the driver decides, not the request
    assert any("requests 1 device but the driver shows 4 GPUs" in n for n in view.notes)


def test_void_but_gpus_present_note() -> None:
    view = visible_gpus({"NVIDIA_VISIBLE_DEVICES": "void"}, four_gpus(), source=SOURCE_NVML)
    assert len(view.gpus) == 4
    assert any("asked for no GPU, yet the driver shows 4 GPUs" in n for n in view.notes)


def test_requested_but_none_arrived_note() -> None:
    view = visible_gpus(
        {"NVIDIA_VISIBLE_DEVICES": "0,1"}, (), source=SOURCE_NONE, driver_reason=NO_DRIVER_REASON
    )
    assert view.reason == NO_DRIVER_REASON
    assert any("requests 2 devices, but none reached the container" in n for n in view.notes)


def test_all_without_gpu_note() -> None:
    view = visible_gpus(
        {"NVIDIA_VISIBLE_DEVICES": "all"}, (), source=SOURCE_NONE, driver_reason=NO_DRIVER_REASON
    )
    assert any("CUDA base images set this value" in n for n in view.notes)


def test_device_plugin_directory_note() -> None:
    view = visible_gpus(
        {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
        four_gpus(),
        source=SOURCE_NVML,
        requested_devices=(UUIDS[0], UUIDS[2]),
    )
    assert any("volume-mounts form) requests: " + UUIDS[0] in n for n in view.notes)
    assert any("requests 2 devices but the driver shows 4 GPUs" in n for n in view.notes)


def test_device_order_note_only_for_mixed_models() -> None:
    mixed = (
        PhysicalGpu(0, UUIDS[0], "NVIDIA A100-SXM4-40GB", 40960),
        PhysicalGpu(1, UUIDS[1], "Tesla T4", 15360),
    )
    assert any("CUDA_DEVICE_ORDER" in n for n in visible_gpus({}, mixed, source="nvml").notes)
    pci = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert not any("CUDA_DEVICE_ORDER" in n for n in visible_gpus(pci, mixed, source="nvml").notes)
    same = four_gpus()
    assert not any("CUDA_DEVICE_ORDER" in n for n in visible_gpus({}, same, source="nvml").notes)


def test_proc_source_says_memory_unknown() -> None:
    physical = tuple(PhysicalGpu(i, UUIDS[i], "Tesla T4", None) for i in range(2))
    view = visible_gpus({}, physical, source=SOURCE_PROC)
    assert view.reason == "2 GPUs visible via /proc/driver/nvidia (memory unknown)"
    assert any("memory is unknown" in n for n in view.notes)
    view = visible_gpus({"CUDA_VISIBLE_DEVICES": "1"}, physical, source=SOURCE_PROC)
    assert view.reason == (
        "1 GPU visible via /proc/driver/nvidia (CUDA_VISIBLE_DEVICES=1 selects 1 of 2; "
        "memory unknown)"
    )


def test_uuid_unchecked_when_driver_gave_none() -> None:
    physical = (PhysicalGpu(0, None, "Tesla T4", None),)
    view = visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-abc"}, physical, source=SOURCE_PROC)
    assert [g.uuid for g in view.gpus] == ["GPU-abc"]
    assert any("could not be checked" in n for n in view.notes)


# --------------------------------------------------------------------------
# MIG
# --------------------------------------------------------------------------

MIG_A = "MIG-11111111-2222-3333-4444-555555555555"
MIG_B = "MIG-66666666-2222-3333-4444-555555555555"


def mig_machine() -> tuple[PhysicalGpu, ...]:
    return (
        PhysicalGpu(
            0,
            UUIDS[0],
            "NVIDIA A100-SXM4-40GB",
            40960,
            mig=(
                MigDevice(MIG_A, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 4864),
                MigDevice(MIG_B, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 19968),
            ),
        ),
        PhysicalGpu(1, UUIDS[1], "NVIDIA A100-SXM4-40GB", 40960),
    )


def test_mig_devices_replace_their_gpu() -> None:
    view = visible_gpus({}, mig_machine(), source=SOURCE_NVML)
    assert [(g.index, g.system_index, g.uuid, g.memory_mb) for g in view.gpus] == [
        (0, 0, MIG_A, 4864),
        (1, 0, MIG_B, 19968),
        (2, 1, UUIDS[1], 40960),
    ]
    assert any("only one MIG device" in n for n in view.notes)


def test_mig_entry_in_cuda_visible_devices() -> None:
    view = visible_gpus({"CUDA_VISIBLE_DEVICES": MIG_B}, mig_machine(), source=SOURCE_NVML)
    assert [(g.index, g.uuid, g.memory_mb) for g in view.gpus] == [(0, MIG_B, 19968)]


def test_unknown_mig_entry_rejected_when_nvml_knows() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "MIG-deadbeef"}
    view = visible_gpus(env, mig_machine(), source=SOURCE_NVML)
    assert view.gpus == ()
    assert "matches no MIG device the driver reports" in view.reason


def test_mig_entry_kept_without_nvml() -> None:
    physical = (PhysicalGpu(0, UUIDS[0], "NVIDIA A100-SXM4-40GB", None),)
    env = {"CUDA_VISIBLE_DEVICES": f"MIG-{UUIDS[0]}/1/0"}
    view = visible_gpus(env, physical, source=SOURCE_PROC)
    assert [(g.system_index, g.uuid, g.memory_mb) for g in view.gpus] == [
        (0, f"MIG-{UUIDS[0]}/1/0", None)
    ]
    assert any("kept as listed" in n for n in view.notes)


def test_mig_mode_without_reachable_device() -> None:
    physical = (PhysicalGpu(0, UUIDS[0], "NVIDIA A100-SXM4-40GB", 40960, mig=()),)
    view = visible_gpus({}, physical, source=SOURCE_NVML)
    assert view.gpus == ()
    assert view.reason == "GPU 0 is in MIG mode but no MIG device is reachable in this container"


# --------------------------------------------------------------------------
# The edge: cheap path, NVML, /proc fallback
# --------------------------------------------------------------------------


def test_cheap_path_never_calls_nvml(tmp_path: Path) -> None:
    nvml = FakeNvml([(UUIDS[0], "Tesla T4", 16 * 2**30)])
    make_tree(tmp_path, nvidiactl=False)
    view = detect_gpus({"NVIDIA_VISIBLE_DEVICES": "all"}, root=tmp_path, nvml=nvml)
    assert nvml.calls == []
    assert view.gpus == ()
    assert view.source == SOURCE_NONE
    assert view.reason == NO_DRIVER_REASON
    assert load_physical_gpus(root=tmp_path, nvml=nvml) == ((), SOURCE_NONE, ())
    assert nvml.calls == []


def test_cheap_path_does_not_import_pynvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    detect_gpus({}, root=tmp_path)
    assert "pynvml" not in sys.modules


def test_nvml_path(tmp_path: Path) -> None:
    make_tree(tmp_path)
    nvml = FakeNvml(
        [
            (UUIDS[0], "NVIDIA A100-SXM4-80GB", 85899345920),  # 81920 MiB
            (UUIDS[1], "NVIDIA A100-SXM4-80GB", 85899345920 + MIB - 1),  # rounds down
        ]
    )
    gpus, source, notes = load_physical_gpus(root=tmp_path, nvml=nvml)
    assert source == SOURCE_NVML
    assert notes == ()
    assert gpus == (
        PhysicalGpu(0, UUIDS[0], "NVIDIA A100-SXM4-80GB", 81920),
        PhysicalGpu(1, UUIDS[1], "NVIDIA A100-SXM4-80GB", 81920),
    )
    assert nvml.calls[0] == "init"
    assert nvml.calls[-1] == "shutdown"


def test_nvml_tried_with_proc_only(tmp_path: Path) -> None:
    make_tree(tmp_path, nvidiactl=False, proc={})
    nvml = FakeNvml([(UUIDS[0], "Tesla T4", 16 * 2**30)])
    view = detect_gpus({}, root=tmp_path, nvml=nvml)
    assert "init" in nvml.calls
    assert view.reason == "1 GPU visible via NVML"


def test_nvml_error_mid_enumeration(tmp_path: Path) -> None:
    make_tree(tmp_path)
    nvml = FakeNvml(
        [(UUIDS[i], "Tesla T4", 16 * 2**30) for i in range(3)],
        fail={"uuid:1": NVMLError("GPU is lost"), "memory:2": NVMLError("Unknown Error")},
    )
    view = detect_gpus({}, root=tmp_path, nvml=nvml)
    assert view.source == SOURCE_NVML
    assert [(g.uuid, g.memory_mb) for g in view.gpus] == [
        (UUIDS[0], 16384),
        (None, 16384),
        (UUIDS[2], None),
    ]
    assert any("UUID of GPU 1 (GPU is lost)" in n for n in view.notes)
    assert any("memory of GPU 2 (Unknown Error)" in n for n in view.notes)
    assert nvml.calls[-1] == "shutdown"


def test_nvml_init_failure_falls_back_to_proc(tmp_path: Path) -> None:
    make_tree(tmp_path, proc={"0000:00:05.0": info("Tesla T4", UUIDS[0], 0)})
    nvml = FakeNvml(fail={"init": NVMLError("Driver/library version mismatch")})
    view = detect_gpus({}, root=tmp_path, nvml=nvml)
    assert view.source == SOURCE_PROC
    assert [(g.uuid, g.name, g.memory_mb) for g in view.gpus] == [(UUIDS[0], "Tesla T4", None)]
    assert any("Driver/library version mismatch" in n for n in view.notes)
    assert "shutdown" not in nvml.calls  # never initialised


def test_nvml_init_failure_and_empty_proc(tmp_path: Path) -> None:
    make_tree(tmp_path, proc={})
    nvml = FakeNvml(fail={"init": NVMLError("Driver Not Loaded")})
    view = detect_gpus({}, root=tmp_path, nvml=nvml)
    assert view.gpus == ()
    assert view.reason == (
        "NVML could not start (Driver Not Loaded) and /proc/driver/nvidia/gpus lists no GPU"
    )


def test_nvml_init_failure_without_proc(tmp_path: Path) -> None:
    make_tree(tmp_path, dev_nodes=[0, 1])
    nvml = FakeNvml(fail={"init": OSError("libnvidia-ml.so.1: cannot open shared object")})
    view = detect_gpus({}, root=tmp_path, nvml=nvml)
    assert view.gpus == ()
    assert view.source == SOURCE_NONE
    assert "no /proc/driver/nvidia/gpus to fall back on" in view.reason
    assert any("/dev/nvidia0, /dev/nvidia1" in n for n in view.notes)


def test_nvml_count_failure_falls_back(tmp_path: Path) -> None:
    make_tree(tmp_path, proc={"0000:00:05.0": info("Tesla T4", UUIDS[0], 0)})
    nvml = FakeNvml(fail={"count": NVMLError("Unknown Error")})
    view = detect_gpus({}, root=tmp_path, nvml=nvml)
    assert view.source == SOURCE_PROC
    assert len(view.gpus) == 1
    assert nvml.calls[-1] == "shutdown"


def test_nvml_shutdown_failure_is_a_note(tmp_path: Path) -> None:
    make_tree(tmp_path)
    nvml = FakeNvml([(UUIDS[0], "Tesla T4", 16 * 2**30)], fail={"shutdown": NVMLError("x")})
    view = detect_gpus({}, root=tmp_path, nvml=nvml)
    assert len(view.gpus) == 1
    assert any("nvmlShutdown failed" in n for n in view.notes)


def test_nvml_reports_zero(tmp_path: Path) -> None:
    make_tree(tmp_path)
    view = detect_gpus({"NVIDIA_VISIBLE_DEVICES": "none"}, root=tmp_path, nvml=FakeNvml())
    assert view.reason.startswith("NVIDIA_VISIBLE_DEVICES=none")
    view = detect_gpus({}, root=tmp_path, nvml=FakeNvml())
    assert view.reason == "the NVIDIA driver is present but NVML reports no GPU"


def test_nvml_mig(tmp_path: Path) -> None:
    make_tree(tmp_path)
    nvml = FakeNvml(
        [(UUIDS[0], "NVIDIA A100-SXM4-40GB", 40 * 2**30)],
        mig={0: [(MIG_A, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 4864 * MIB)]},
    )
    view = detect_gpus({}, root=tmp_path, nvml=nvml)
    assert [(g.index, g.system_index, g.uuid, g.memory_mb) for g in view.gpus] == [
        (0, 0, MIG_A, 4864)
    ]


def test_proc_fallback_orders_by_minor(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        proc={
            "0000:00:04.0": info("Tesla T4", UUIDS[2], 2),
            "0000:00:05.0": info("Tesla V100-SXM2-16GB", UUIDS[0], 0),
            "0000:00:06.0": info("Tesla T4", UUIDS[1], 1),
        },
    )
    gpus, source, _notes = load_physical_gpus(
        root=tmp_path, nvml=FakeNvml(fail={"init": OSError()})
    )
    assert source == SOURCE_PROC
    assert [(g.system_index, g.uuid, g.name, g.memory_mb) for g in gpus] == [
        (0, UUIDS[0], "Tesla V100-SXM2-16GB", None),
        (1, UUIDS[1], "Tesla T4", None),
        (2, UUIDS[2], "Tesla T4", None),
    ]


def test_proc_fallback_garbage(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        proc={
            "0000:00:04.0": b"\xff\xfe\x00garbage\nModel: \xc3\x28\nDevice Minor: x\n",
            "0000:00:05.0": info("Tesla T4", "??", 1),  # unreadable UUID
            "0000:00:06.0": b"",
        },
    )
    (tmp_path / "proc/driver/nvidia/gpus/not-a-dir").write_text("x")
    gpus, source, notes = load_physical_gpus(
        root=tmp_path, nvml=FakeNvml(fail={"init": NVMLError("Driver Not Loaded")})
    )
    assert source == SOURCE_PROC
    assert len(gpus) == 3
    assert gpus[0] == PhysicalGpu(0, None, "Tesla T4", None)  # the only one with a minor
    assert all(g.uuid is None for g in gpus)
    assert any("incomplete" in n for n in notes)
    assert any("not-a-dir" in n for n in notes)


def test_real_loader_without_pynvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a driver but no nvidia-ml-py, the reason says so."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    make_tree(tmp_path, proc={})
    view = detect_gpus({}, root=tmp_path)
    assert view.gpus == ()
    assert view.reason == (
        "nvidia-ml-py (pynvml) is not installed and /proc/driver/nvidia/gpus lists no GPU"
    )


def test_real_loader_on_this_machine() -> None:
    """The real loader, on whatever this machine is: no exception, a clear sentence."""
    view = detect_gpus({"NVIDIA_VISIBLE_DEVICES": "all"})
    assert view.reason
    if not Path("/dev/nvidiactl").exists() and not Path("/proc/driver/nvidia/gpus").exists():
        assert view.gpus == ()
        assert view.reason == NO_DRIVER_REASON


def fake_pynvml_module(mig_enabled: bool) -> types.ModuleType:
    """Enough of nvidia-ml-py's pynvml to drive PynvmlApi."""

    class FakeNVMLError(Exception):
        pass

    def get_uuid(handle: tuple[str, int]) -> str | bytes:
        return MIG_A if handle[0] == "mig" else UUIDS[0].encode()  # old bindings: bytes

    def get_name(handle: tuple[str, int]) -> str:
        return "NVIDIA A30 MIG 1g.6gb" if handle[0] == "mig" else "NVIDIA A30"

    def get_memory(handle: tuple[str, int]) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=(5 if handle[0] == "mig" else 16) * 2**30)

    def get_mig_mode(handle: object) -> tuple[int, int]:
        if not mig_enabled:
            raise FakeNVMLError("Not Supported")
        return 1, 1

    def get_mig_handle(handle: object, j: int) -> tuple[str, int]:
        if j == 1:
            raise FakeNVMLError("Not Found")
        return ("mig", j)

    module = types.ModuleType("pynvml")
    module.__dict__.update(
        NVMLError=FakeNVMLError,
        NVML_DEVICE_MIG_ENABLE=1,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: ("gpu", i),
        nvmlDeviceGetUUID=get_uuid,
        nvmlDeviceGetName=get_name,
        nvmlDeviceGetMemoryInfo=get_memory,
        nvmlDeviceGetMigMode=get_mig_mode,
        nvmlDeviceGetMaxMigDeviceCount=lambda h: 2,
        nvmlDeviceGetMigDeviceHandleByIndex=get_mig_handle,
    )
    return module


@pytest.mark.parametrize("mig_enabled", [False, True])
def test_pynvml_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mig_enabled: bool) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml_module(mig_enabled))
    make_tree(tmp_path)
    view = detect_gpus({}, root=tmp_path)
    assert view.source == SOURCE_NVML
    if mig_enabled:
        assert [(g.uuid, g.name, g.memory_mb) for g in view.gpus] == [
            (MIG_A, "NVIDIA A30 MIG 1g.6gb", 5120)
        ]
    else:
        assert [(g.uuid, g.name, g.memory_mb) for g in view.gpus] == [
            (UUIDS[0], "NVIDIA A30", 16384)
        ]
    api = PynvmlApi(fake_pynvml_module(mig_enabled))
    assert api.device_uuid(0) == UUIDS[0]


# --------------------------------------------------------------------------
# The device plugin's volume-mounts form
# --------------------------------------------------------------------------


def test_volume_mounts_directory(tmp_path: Path) -> None:
    make_tree(tmp_path)
    plugin_dir = tmp_path / "var/run/nvidia-container-devices"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / UUIDS[1]).write_text("")
    (plugin_dir / UUIDS[3]).write_text("")
    nvml = FakeNvml([(u, "Tesla T4", 16 * 2**30) for u in UUIDS])
    env = {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    view = detect_gpus(env, root=tmp_path, nvml=nvml)
    assert len(view.gpus) == 4
    assert any(f"requests: {UUIDS[1]}, {UUIDS[3]}" in n for n in view.notes)
    assert any("requests 2 devices but the driver shows 4 GPUs" in n for n in view.notes)


def test_volume_mounts_cdi_and_missing(tmp_path: Path) -> None:
    cdi = tmp_path / "var/run/nvidia-container-devices/cdi/nvidia.com/gpu"
    cdi.mkdir(parents=True)
    (cdi / "0").write_text("")
    value = "/var/run/nvidia-container-devices"
    assert read_requested_devices(value, root=str(tmp_path)) == ("nvidia.com/gpu=0",)
    assert read_requested_devices("/nowhere", root=str(tmp_path)) is None
    assert read_requested_devices("/bad\x00path", root=str(tmp_path)) is None
    view = detect_gpus({"NVIDIA_VISIBLE_DEVICES": "/nowhere"}, root=tmp_path)
    assert any("lists none here" in n for n in view.notes)


# --------------------------------------------------------------------------
# Properties: nothing raises, and the numbering is always TensorFlow's
# --------------------------------------------------------------------------

ENTRY = st.one_of(
    st.integers(min_value=-3, max_value=6).map(str),
    st.sampled_from(["", " ", "+1", "-0", "1x", "GPU-", "GPU-0a1b", "GPU-5e6f", "MIG-1", "void"]),
    st.sampled_from([f"GPU-{u[4:12]}" for u in UUIDS] + [MIG_A, MIG_B]),
    st.text(max_size=6),
)
CSV = st.one_of(st.lists(ENTRY, max_size=6).map(",".join), st.text(max_size=30))


def torch_like_ordinals(raw: str) -> list[int] | None:
    """pytorch's ordinal reading, restated; None where pytorch itself would crash."""
    out: list[int] = []
    for elem in raw.split(","):
        text = elem.strip()
        sign = 1 if text[:1] in "+-" and text else 0
        digits = 0
        while sign + digits < len(text) and text[sign + digits] in "0123456789":
            digits += 1
        if sign and not digits and len(text) == 1:
            return None  # int("+") raises in pytorch
        value = int(text[: sign + digits]) if digits else -1
        if value in out:
            return []
        if value < 0:
            break
        out.append(value)
    return out


@given(raw=CSV)
def test_ordinals_match_pytorch(raw: str) -> None:
    if raw.startswith(("GPU-", "MIG-")) or not raw.strip():
        return
    expected = torch_like_ordinals(raw)
    if expected is None:
        return
    assert list(parse_cuda_visible_devices(raw).entries) == expected


@settings(max_examples=300)
@given(
    cvd=st.one_of(st.none(), CSV),
    nvd=st.one_of(st.none(), CSV, st.just("/var/run/nvidia-container-devices")),
    order=st.one_of(st.none(), st.text(max_size=12)),
    count=st.integers(min_value=0, max_value=4),
    source=st.sampled_from([SOURCE_NVML, SOURCE_PROC, SOURCE_NONE]),
    mig=st.booleans(),
)
def test_visible_gpus_never_raises(
    *, cvd: str | None, nvd: str | None, order: str | None, count: int, source: str, mig: bool
) -> None:
    env = {
        k: v
        for k, v in {
            "CUDA_VISIBLE_DEVICES": cvd,
            "NVIDIA_VISIBLE_DEVICES": nvd,
            "CUDA_DEVICE_ORDER": order,
        }.items()
        if v is not None
    }
    physical = list(mig_machine() if mig else four_gpus())[:count]
    view = visible_gpus(env, physical, source=source, driver_reason="r")
    assert view.reason
    assert "\n" not in view.reason
    assert [g.index for g in view.gpus] == list(range(len(view.gpus)))
    spec: CudaVisibleDevices = parse_cuda_visible_devices(cvd)
    if spec.is_set and not spec.entries:
        assert view.gpus == ()
    if not spec.is_set and not mig:
        assert len(view.gpus) == count


@settings(max_examples=60, deadline=None)
@given(
    blobs=st.lists(st.binary(max_size=300), max_size=3),
    cvd=st.one_of(st.none(), CSV),
)
def test_proc_files_never_raise(blobs: list[bytes], cvd: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_tree(Path(tmp), proc={f"0000:00:0{i}.0": blob for i, blob in enumerate(blobs)})
        env = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
        view = detect_gpus(env, root=root, nvml=FakeNvml(fail={"init": NVMLError("no")}))
        assert view.source == SOURCE_PROC
        assert view.reason
        for text in (view.reason, *view.notes):
            text.encode("utf-8")  # printable whatever the bytes were


def test_undecodable_env_values_are_shown_safely() -> None:
    """os.environ keeps undecodable bytes as surrogates; messages must still print."""
    env = {"CUDA_VISIBLE_DEVICES": "\udcff1", "NVIDIA_VISIBLE_DEVICES": "\udcfe,\x00"}
    view = visible_gpus(env, four_gpus(), source=SOURCE_NVML)
    assert view.gpus == ()
    for text in (view.reason, *view.notes):
        text.encode("utf-8")
        assert text.isprintable()


@pytest.mark.parametrize("count", [-1, 10**9, "x"])
def test_broken_device_count(tmp_path: Path, count: object) -> None:
    class Broken(FakeNvml):
        def device_count(self) -> int:
            return count  # type: ignore[return-value]

    make_tree(tmp_path, proc={})
    view = detect_gpus({}, root=tmp_path, nvml=Broken())
    assert view.reason
    assert len(view.notes) < 20
