"""--per_process_gpu_memory_fraction: TF Serving's flag -> the plan's per-GPU memory caps.

The flag is read out of the model server's command line (tfserving.plan_flags),
checked against TF_GPU_MEMORY_ALLOC, turned into floor(share x each visible GPU's
MB) and handed to the hook like TF_GPU_MEMORY_ALLOC's caps.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.unit.fake_gpus import MIB, UUIDS, FakeNvml, make_tree
from tests.unit.plan_inputs import CPU, NO_GPU
from tf_entrypoint import cli
from tf_entrypoint import plan as p
from tf_entrypoint.explain import render_text, summary_line, to_json
from tf_entrypoint.gpus import Gpu, GpuView, detect_gpus
from tf_entrypoint.handoff import PLAN_VARIABLE, decode_plan
from tf_entrypoint.problems import EXIT_CONFIG, EXIT_USAGE
from tf_entrypoint.settings import parse_settings
from tf_entrypoint.tfserving import PlanFlags, parse_gpu_fraction, plan_flags

FLAG = "--per_process_gpu_memory_fraction"
H100 = Gpu(index=0, system_index=0, uuid=UUIDS[0], name="NVIDIA H100", memory_mb=81559)
A100 = Gpu(index=1, system_index=1, uuid=UUIDS[1], name="NVIDIA A100", memory_mb=40960)
TWO = GpuView(gpus=(H100, A100), source="nvml", reason="2 GPUs visible via NVML", notes=())
UNKNOWN = Gpu(index=0, system_index=0, uuid=None, name=None, memory_mb=None)
PROC_ONLY = GpuView(gpus=(UNKNOWN,), source="/proc/driver/nvidia", reason="1 GPU", notes=())


def fraction(text: str) -> p.MemoryFraction:
    read = parse_gpu_fraction(FLAG, text)
    assert isinstance(read, p.MemoryFraction)
    return read


def plan_for(env: dict[str, str], gpus: GpuView, text: str | None) -> p.Plan:
    share = fraction(text) if text is not None else None
    return p.make_plan(parse_settings(env), CPU, gpus, env, share)


# --- reading the value ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "share"),
    [
        ("0.5", (5, 10)),
        (".25", (25, 100)),
        (" 0.3 ", (3, 10)),
        ("1", (1, 1)),
        ("1.0", (10, 10)),
        ("5e-1", (5, 10)),
        ("0.05E+1", (50, 100)),  # 0.5
        ("0.000001", (1, 1_000_000)),
    ],
)
def test_a_share_is_read_exactly(text: str, share: tuple[int, int]) -> None:
    read = fraction(text)
    assert (read.numerator, read.denominator) == share
    assert (read.source, read.text) == (FLAG, text.strip())


@pytest.mark.parametrize("text", ["0", "0.0", ".0", "0e5", "000"])
def test_zero_is_tensorflows_default(text: str) -> None:
    assert parse_gpu_fraction(FLAG, text) is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "not a number"),
        ("abc", "not a number"),
        ("nan", "not a number"),
        ("inf", "not a number"),
        ("1/2", "not a number"),
        ("0,5", "not a number"),
        ("0x1", "not a number"),
        ("1_0", "not a number"),
        (".", "not a number"),
        ("1e", "not a number"),
        ("\uff15", "not a number"),  # a full-width 5
        ("-0.5", "negative"),
        ("1.0000001", "above 1; TensorFlow's over-subscription"),
        ("2", "above 1"),
        ("1e999", "above 1"),
    ],
)
def test_a_bad_value_names_the_flag_and_the_range(text: str, why: str) -> None:
    message = parse_gpu_fraction(FLAG, text)
    assert isinstance(message, str)
    assert message.startswith(f"{FLAG}={text!r} is invalid ({why}")
    assert message.endswith(
        "expected a number from 0 to 1: the share of each visible GPU's memory "
        "(e.g. 0.5; 0 leaves TensorFlow's default)"
    )


def test_the_flag_comes_out_of_the_command_line() -> None:
    flags = plan_flags(("--model_name=m", FLAG, "0.5", "--port=1"), {})
    assert isinstance(flags, PlanFlags)
    assert flags.args == ("--model_name=m", "--port=1")
    assert flags.fraction == fraction("0.5")
    zero = plan_flags((f"{FLAG}=0",), {})
    assert isinstance(zero, PlanFlags)
    assert (zero.args, zero.fraction) == ((), None)
    assert plan_flags((FLAG,), {}) == f"{FLAG} needs a value ({FLAG}=N or {FLAG} N)"
    bad = plan_flags((f"{FLAG}=1.5",), {})
    assert isinstance(bad, str)
    assert bad.startswith(f"{FLAG}='1.5' is invalid (above 1")


# --- the plan ------------------------------------------------------------------


def test_every_visible_gpu_is_capped_at_its_share_rounded_down() -> None:
    plan = plan_for({}, TWO, "0.3")
    assert plan.ok
    assert plan.notices == ()
    assert [(c.index, c.memory_mb) for c in plan.applied_caps] == [(0, 24467), (1, 12288)]
    assert [c.source for c in plan.applied_caps] == [
        f"{FLAG}=0.3 x 81559 MB",
        f"{FLAG}=0.3 x 40960 MB",
    ]
    hook = decode_plan(p.child_environment(plan, {})[PLAN_VARIABLE])
    assert not isinstance(hook, str)
    assert hook.memory_limits_mb == ((0, 24467), (1, 12288))


def test_one_means_the_whole_memory() -> None:
    plan = plan_for({}, TWO, "1")
    assert [(c.index, c.memory_mb) for c in plan.applied_caps] == [(0, 81559), (1, 40960)]


def test_with_tf_gpu_memory_alloc_it_is_a_configuration_error() -> None:
    env = {"TF_GPU_MEMORY_ALLOC": "0:1024"}
    plan = plan_for(env, TWO, "0.5")
    assert [str(x) for x in plan.problems] == [
        f"{FLAG}='0.5' is invalid (TF_GPU_MEMORY_ALLOC='0:1024' caps GPU memory too): "
        "expected one of the two: drop the flag to keep the caps in MB, or unset "
        "TF_GPU_MEMORY_ALLOC to cap every GPU at that share"
    ]
    assert plan.memory_caps == ()
    # Refused without a GPU too: the configuration is contradictory wherever it runs.
    assert not plan_for(env, NO_GPU, "0.5").ok
    # An empty variable is no cap.
    assert plan_for({"TF_GPU_MEMORY_ALLOC": " "}, TWO, "0.5").ok


def test_without_a_gpu_it_is_ignored_with_one_notice() -> None:
    plan = plan_for({}, NO_GPU, "0.5")
    assert plan.ok
    assert plan.memory_caps == ()
    assert [str(n) for n in plan.notices] == [
        f"{FLAG}: no GPU is visible (no NVIDIA driver in this container); the fraction is "
        "ignored, as TF Serving ignores it without a GPU"
    ]
    hook = decode_plan(p.child_environment(plan, {})[PLAN_VARIABLE])
    assert not isinstance(hook, str)
    assert hook.memory_limits_mb == ()


def test_a_gpu_of_unknown_size_cannot_take_a_share() -> None:
    plan = plan_for({}, PROC_ONLY, "0.5")
    assert [str(x) for x in plan.problems] == [
        f"{FLAG}='0.5' is invalid (GPU 0's memory size is unknown (NVML is not available)): "
        "expected caps in MB with TF_GPU_MEMORY_ALLOC (e.g. '0:4096') instead of a fraction"
    ]


def test_a_share_under_one_mb_is_refused() -> None:
    plan = plan_for({}, TWO, "0.00001")  # 0.8 MB of GPU 0, 0.4 MB of GPU 1
    assert [x.reason for x in plan.problems] == [
        "it leaves GPU 0 (81559 MB) less than 1 MB",
        "it leaves GPU 1 (40960 MB) less than 1 MB",
    ]


def test_growth_with_the_fraction_grows_up_to_the_cap() -> None:
    env = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    plan = plan_for(env, TWO, "0.5")
    assert plan.ok
    assert [str(n) for n in plan.notices] == [
        f"TF_FORCE_GPU_ALLOW_GROWTH: with {FLAG}: memory grows on demand, never beyond the "
        "cap (GPU 0 up to 40779 MB, GPU 1 up to 20480 MB)"
    ]
    child = p.child_environment(plan, env)
    assert child["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    hook = decode_plan(child[PLAN_VARIABLE])
    assert not isinstance(hook, str)
    assert (hook.allow_growth, hook.memory_limits_mb) == (True, ((0, 40779), (1, 20480)))


def test_explain_names_where_the_caps_came_from() -> None:
    plan = plan_for({}, TWO, "0.5")
    text = render_text(plan, {})
    assert (
        f"memory fraction  0.5 ({FLAG}; of each visible GPU's memory, as the caps below)\n"
        f"memory cap       GPU:0 40779 MB ({FLAG}=0.5 x 81559 MB)\n"
        f"memory cap       GPU:1 20480 MB ({FLAG}=0.5 x 40960 MB)\n"
    ) in text
    gpu = to_json(plan, {})["gpu"]
    assert gpu["memory_fraction"] == {"flag": FLAG, "value": "0.5", "applied": True}
    assert gpu["memory_limits_mb"] == [
        {"index": 0, "memory_mb": 40779, "applied": True, "source": f"{FLAG}=0.5 x 81559 MB"},
        {"index": 1, "memory_mb": 20480, "applied": True, "source": f"{FLAG}=0.5 x 40960 MB"},
    ]
    assert summary_line(plan, ("serve",)).endswith("2 GPUs capped 0:40779MB,1:20480MB -> serve")
    ignored = plan_for({}, NO_GPU, "0.5")
    assert f"memory fraction  0.5 ({FLAG}; ignored: no GPU visible)\n" in render_text(ignored, {})
    assert to_json(ignored, {})["gpu"]["memory_fraction"] == {
        "flag": FLAG,
        "value": "0.5",
        "applied": False,
    }


def test_tf_gpu_memory_alloc_caps_say_so_in_explain() -> None:
    plan = p.make_plan(parse_settings({"TF_GPU_MEMORY_ALLOC": "0:1024"}), CPU, TWO,
                       {"TF_GPU_MEMORY_ALLOC": "0:1024"})  # fmt: skip
    assert "memory cap       GPU:0 1024 MB (TF_GPU_MEMORY_ALLOC)\n" in render_text(plan, {})
    assert "memory fraction" not in render_text(plan, {})
    off = p.make_plan(parse_settings({"TF_GPU_MEMORY_ALLOC": "0:1024"}), CPU, NO_GPU,
                      {"TF_GPU_MEMORY_ALLOC": "0:1024"})  # fmt: skip
    text = render_text(off, {})
    assert "memory cap       GPU:0 1024 MB (TF_GPU_MEMORY_ALLOC; ignored: no GPU visible)\n" in text


# --- through the command line: serve, tensorflow_model_server, explain ------------------


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Two GPUs as NVML reports them (a fake driver tree, fake NVML); 2 CPUs."""
    for name in ("TF_GPU_MEMORY_ALLOC", "TF_FORCE_GPU_ALLOW_GROWTH", "CUDA_VISIBLE_DEVICES",
                 "NVIDIA_VISIBLE_DEVICES", "TF_ENTRYPOINT_QUIET"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TF_ENTRYPOINT_CPUS", "2")
    root = make_tree(tmp_path / "root")
    nvml = FakeNvml(
        [(UUIDS[0], "NVIDIA H100 80GB HBM3", 81559 * MIB), (UUIDS[1], "Tesla T4", 15360 * MIB)]
    )

    def detect(env: dict[str, str], *, root: object = "/") -> GpuView:
        return detect_gpus(env, root=tmp_path / "root", nvml=nvml)

    monkeypatch.setattr(p, "detect_gpus", detect)
    return root


def test_the_model_server_command_caps_every_gpu(
    machine: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    handed_off: list[tuple[tuple[str, ...], dict[str, str]]],
) -> None:
    monkeypatch.setattr(sys, "argv", ["/usr/bin/tensorflow_model_server", "--model_name=m",
                                      f"{FLAG}=0.25"])  # fmt: skip
    assert cli.model_server_main() == 0
    [(argv, env)] = handed_off
    assert argv == (sys.executable, "-m", "tf_entrypoint.serving", "--model_name=m")
    assert json.loads(env[PLAN_VARIABLE])["memory_limits_mb"] == {"0": 20389, "1": 3840}
    assert "2 GPUs capped 0:20389MB,1:3840MB -> tensorflow_model_server" in capsys.readouterr().err


def test_serve_takes_the_flag_with_its_value_apart(
    machine: Path, handed_off: list[tuple[tuple[str, ...], dict[str, str]]]
) -> None:
    assert cli.main(["serve", FLAG, "0.5", "--port=1"]) == 0
    [(argv, env)] = handed_off
    assert argv[3:] == ("--port=1",)
    assert json.loads(env[PLAN_VARIABLE])["memory_limits_mb"] == {"0": 40779, "1": 7680}


def test_the_flag_and_tf_gpu_memory_alloc_stop_the_start(
    machine: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    handed_off: list[tuple[tuple[str, ...], dict[str, str]]],
) -> None:
    monkeypatch.setenv("TF_GPU_MEMORY_ALLOC", "0:1024")
    assert cli.main(["serve", f"{FLAG}=0.5"]) == EXIT_CONFIG
    assert not handed_off
    err = capsys.readouterr().err
    assert f"error: {FLAG}='0.5' is invalid (TF_GPU_MEMORY_ALLOC='0:1024' caps GPU memory" in err
    assert "not starting 'serve' (exit 78" in err
    # 0 is TensorFlow's default: no conflict, the variable's caps apply.
    assert cli.main(["serve", f"{FLAG}=0"]) == 0
    [(_, env)] = handed_off
    assert json.loads(env[PLAN_VARIABLE])["memory_limits_mb"] == {"0": 1024}


def test_a_bad_value_is_a_usage_error(
    machine: Path,
    capsys: pytest.CaptureFixture[str],
    handed_off: list[tuple[tuple[str, ...], dict[str, str]]],
) -> None:
    assert cli.main(["serve", f"{FLAG}=half"]) == EXIT_USAGE
    assert not handed_off
    err = capsys.readouterr().err
    assert f"error: {FLAG}='half' is invalid (not a number): expected a number from 0 to 1" in err
    assert "Traceback" not in err


def test_without_a_gpu_the_server_starts_with_one_warning(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    handed_off: list[tuple[tuple[str, ...], dict[str, str]]],
) -> None:
    # The CUDA image without a GPU: NVIDIA_DRIVER_CAPABILITIES asks for CUDA, no driver.
    monkeypatch.setenv("TF_ENTRYPOINT_CPUS", "2")
    monkeypatch.setenv("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
    monkeypatch.delenv("TF_GPU_MEMORY_ALLOC", raising=False)
    monkeypatch.setattr(p, "detect_gpus", lambda env, *, root="/": NO_GPU)
    assert cli.main(["serve", f"{FLAG}=0.5"]) == 0
    [(argv, env)] = handed_off
    assert FLAG not in " ".join(argv)
    assert json.loads(env[PLAN_VARIABLE])["memory_limits_mb"] == {}
    err = capsys.readouterr().err
    assert err.count(FLAG) == 1
    assert f"warning: {FLAG}: no GPU is visible" in err


def test_explain_reads_the_plan_flags(
    machine: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["explain", "--json", f"{FLAG}=0.5"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu"]["memory_fraction"] == {"flag": FLAG, "value": "0.5", "applied": True}
    assert [c["memory_mb"] for c in doc["gpu"]["memory_limits_mb"]] == [40779, 7680]
    assert cli.main(["explain", f"{FLAG}=0.5", "--tensorflow_intra_op_parallelism=1"]) == 0
    out = capsys.readouterr().out
    assert f"memory cap       GPU:1 7680 MB ({FLAG}=0.5 x 15360 MB)" in out
    assert "intra-op threads 1 (TF_INTRA_OP_PARALLELISM_THREADS)" in out
    # Only the plan's flags: anything else is a usage error, as before.
    assert cli.main(["explain", "--model_name=m"]) == EXIT_USAGE
    assert "got: --model_name=m" in capsys.readouterr().err
    assert cli.main(["explain", f"{FLAG}=7"]) == EXIT_USAGE
    assert f"{FLAG}='7' is invalid (above 1" in capsys.readouterr().err
