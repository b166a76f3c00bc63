"""Render the benchmark results (JSON) as Markdown, the plots, and docs/benchmarks.md.

    python -m bench report [--out docs/bench] [--no-plot]

Reads each scenario's result file (bench/scenarios.py; the one schema of
bench/results.py, or a file written before it) from --out and
docs/image-build-cpu.json, and writes, ordered by scenario:

- OUT/results.md: every mode of every cell of each scenario's latest result;
- quota-sweep.png and serving.png (matplotlib, requirements/bench.lock);
- when OUT is docs/bench: docs/benchmarks.md. That file is hand-written prose
  per scenario (what the figures mean, kept as written) around one generated
  block per scenario, between `<!-- figures: NAME -->` and
  `<!-- /figures -->`: when the latest result was made, on what, by which
  command, and its headline table. The report rewrites the generated blocks
  and puts the sections in the registry's order; a scenario without a
  section gets one (its title, what it shows, the block).

`python -m bench run` calls this after measuring.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

from bench import results as schema
from bench.common import REPO, log
from bench.scenarios import SCENARIOS

WORKLOAD_TITLES = {
    "infer1": "inference, batch 1",
    "infer64": "inference, batch 64",
    "train": "training step, batch 64",
}
DOCS = REPO / "docs" / "benchmarks.md"


def load_parts(out: Path) -> dict[str, Any]:
    """name -> the latest result of each scenario found in `out`, in the form the renderers
    read (the scenario's own dict, with "machine" and "quiet" beside it)."""
    parts = {}
    for scenario in SCENARIOS:
        doc = schema.load(out / f"{scenario.result_name}.json")
        if doc is None:
            continue
        if doc["schema"] == 0:
            part = dict(doc["results"])
        else:
            image = doc["image"] or {}
            part = {
                **doc["results"],
                "machine": {
                    **doc["machine"],
                    "image": image.get("tag", ""),
                    "image_id": image.get("id", ""),
                },
                "quiet": doc["quiet"],
                "quick": doc["quick"],
            }
            part.setdefault("command", doc["command"])
            part.setdefault("started", doc["when"]["started"])
            part.setdefault("finished", doc["when"]["finished"])
        part["_doc"] = doc
        parts[scenario.name] = part
    return parts


def num(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def spread(stat: dict[str, float]) -> str:
    return f"{num(stat['median'])} ({num(stat['min'])}-{num(stat['max'])})"


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def paired(stat: dict[str, float] | None) -> str:
    return f" ({stat['min']:.2f}-{stat['max']:.2f})" if stat else ""


# --- Markdown -----------------------------------------------------------------


def machine_line(parts: dict[str, Any]) -> str:
    part = next((p for p in parts.values() if p.get("machine", {}).get("cpu_model")), None)
    if part is None:
        return "unknown"
    m = part["machine"]
    return (
        f"{m['cpu_model']}, {m['cpus']} CPUs, {m['memory_gib']} GiB, {m.get('os', '?')}, kernel "
        f"{m['kernel']}, Docker {m.get('docker', '?')} (cgroup {m.get('cgroup', '?')}); image "
        f"`{m.get('image', '?')}` ({m.get('image_id', '?')})"
    )


def load_lines(parts: dict[str, Any]) -> list[str]:
    lines = []
    quiet = next((p["quiet"] for p in parts.values() if p.get("quiet")), None)
    if quiet:
        state = "reached" if quiet["reached"] else "NOT reached (ran anyway)"
        lines.append(
            f"- Waited {quiet['waited_s']} s for a 1-minute load average below "
            f"{quiet['threshold']}: {state}; load at start {quiet['loadavg_at_start']}."
        )
    for name, part in parts.items():
        if "loadavg_before" not in part:
            continue
        lines.append(
            f"- {name}: {part.get('started', '?')} to {part.get('finished', '?')}, load "
            f"average (1/5/15 min) before {part['loadavg_before']}, after "
            f"{part.get('loadavg_after', '?')}."
        )
    return lines


def _verdict(cell: dict[str, Any]) -> str:
    t, best, dflt = cell["targets"], cell["auto_vs_best"], cell["auto_vs_defaults"]
    misses = []
    if not t["throughput_vs_best"]:
        misses.append(f"throughput {best['throughput']:.2f} < 0.95 of best")
    if not t["p99_vs_best"]:
        misses.append(f"p99 {best['p99']:.2f} > 1.2 of best")
    if not t["throughput_vs_defaults"]:
        misses.append(f"throughput {dflt['throughput']:.2f} < 0.97 of defaults")
    return "ok" if not misses else "MISS: " + "; ".join(misses)


def sweep_markdown(sweep: dict[str, Any]) -> list[str]:
    c = sweep["config"]
    lines = [
        "## Quota sweep",
        "",
        f"{c['reps']} repetitions; in each, for every limit, one fresh container per mode "
        "traces and warms up the workloads, then the modes take turns: per workload "
        f"{c['rounds']} rounds in which every mode runs one window of {c['warmup']} s warm-up "
        f"and {c['seconds']} s timed (the order rotates round by round; idle containers "
        "wait on stdin and use no CPU). So every mode is measured across the same stretch "
        "of time, and the machine's drifts cancel in the ratios. Throughput in samples/s, "
        "latency per call in ms: per container over all its windows, then the median of "
        "the repetitions (min-max). Ratios are medians of the automatic plan over the "
        "median of the other mode; in brackets the range of the same ratio taken "
        "repetition by repetition. **Control**: auto against the manual setting that asks "
        "for exactly the threads auto chose: the same configuration in a different "
        "container, so its distance from 1.00x is this machine's noise.",
        "",
        "| limit | workload | auto plan (intra/inter) | TF defaults: throughput, p99 | "
        "auto: throughput, p99 | best manual: setting, throughput, p99 | auto / best: "
        "throughput, p99 | auto / defaults: throughput, p99 | control: auto / same manual "
        "| targets |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in sweep["cells"]:
        m, best = cell["modes"], cell["best_manual"]
        vb, vd, vs = cell["auto_vs_best"], cell["auto_vs_defaults"], cell["auto_vs_same_manual"]
        control = (
            f"{ratio(vs['throughput'])}{paired(vs['throughput_paired'])}, {ratio(vs['p99'])}"
            if vs
            else "n/a"
        )
        lines.append(
            f"| {cell['limit']} | {cell['workload']} | {cell['auto_plan']} "
            f"| {_thr_p99(m['defaults'])} | {_thr_p99(m['auto'])} "
            f"| {best.removeprefix('manual ')}: {_thr_p99(m[best])} "
            f"| {ratio(vb['throughput'])}{paired(vb['throughput_paired'])}, "
            f"{ratio(vb['p99'])}{paired(vb['p99_paired'])} "
            f"| {ratio(vd['throughput'])}{paired(vd['throughput_paired'])}, "
            f"{ratio(vd['p99'])}{paired(vd['p99_paired'])} | {control} | {_verdict(cell)} |"
        )
    lines += ["", *_disturbed(sweep), "", *_gains(sweep), "", *_evidence(sweep), ""]
    lines += _every_mode(sweep)
    return lines


def _disturbed(sweep: dict[str, Any]) -> list[str]:
    c = sweep["config"]
    blocks = {(r["limit"], r["rep"]): r for r in sweep["runs"]}
    repeated = sum(len(r.get("discarded_rounds", ())) for r in blocks.values())
    stayed = sum(r.get("disturbed_rounds", 0) for r in blocks.values())
    failed = [f"{f['limit']} rep {f['rep']}" for f in sweep.get("failures", ())]
    text = (
        f"{len(blocks)} (limit, repetition) blocks of {len(c['modes'])} containers. A round "
        f"is run again (up to {c['retries']} times per workload and block) when other "
        f"processes or the hypervisor took more than {c['disturbed_cpus']} CPUs from the "
        "machine during any of its windows (on the host: the root cgroup's CPU time minus "
        f"the container's, plus steal): {repeated} rounds run again"
    )
    text += f"; {stayed} kept although still disturbed" if stayed else ""
    text += f"; failed: {', '.join(failed)}" if failed else ""
    return [text + "."]


def _versus(cell: dict[str, Any], mode: str, other: str) -> str | None:
    modes = cell["modes"]
    if mode not in modes or other not in modes:
        return None
    thr = modes[mode]["throughput"]["median"] / modes[other]["throughput"]["median"]
    p99 = modes[mode]["p99_ms"]["median"] / modes[other]["p99_ms"]["median"]
    return f"{cell['workload']} throughput {thr:.2f}x, p99 {p99:.2f}x"


def _evidence(sweep: dict[str, Any]) -> list[str]:
    """Rounding (ceil 2/2 vs floor 1/1 at 1.5 CPUs) and inter-op size (J=2 vs J=1)."""
    lines = ["Evidence for the defaults:", ""]
    rounding = [
        text
        for cell in sweep["cells"]
        if cell["limit"] == "cpus=1.5"
        and (text := _versus(cell, "manual 2/2", "manual 1/1")) is not None
    ]
    if rounding:
        lines.append(
            "- Rounding at --cpus 1.5, ceil (2/2) relative to floor (1/1): " + "; ".join(rounding)
        )
    for limit in dict.fromkeys(c["limit"] for c in sweep["cells"]):
        cells = [c for c in sweep["cells"] if c["limit"] == limit]
        intra = cells[0]["auto_plan"].split("/")[0]
        found = [
            text
            for cell in cells
            if (text := _versus(cell, f"manual {intra}/2", f"manual {intra}/1")) is not None
        ]
        if found:
            lines.append(
                f"- Inter-op pool at {limit} (intra {intra}), 2 threads relative to 1: "
                + "; ".join(found)
            )
    return lines


def _thr_p99(stat: dict[str, Any]) -> str:
    return f"{num(stat['throughput']['median'])}, {num(stat['p99_ms']['median'])} ms"


def _gains(sweep: dict[str, Any]) -> list[str]:
    lines = [
        "Gain of the automatic plan over TensorFlow's defaults (throughput ratio; p99 ratio):",
        "",
    ]
    by_limit: dict[str, list[str]] = {}
    for cell in sweep["cells"]:
        vd = cell["auto_vs_defaults"]
        by_limit.setdefault(cell["limit"], []).append(
            f"{cell['workload']} {vd['throughput']:.2f}x / p99 {vd['p99']:.2f}x"
        )
    for limit, items in by_limit.items():
        lines.append(f"- {limit}: {'; '.join(items)}")
    return lines


def _every_mode(sweep: dict[str, Any]) -> list[str]:
    lines = [
        "<details><summary>Every mode in every cell</summary>",
        "",
        "| limit | workload | mode | throughput | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for cell in sweep["cells"]:
        for mode, stat in cell["modes"].items():
            mark = " (best manual)" if mode == cell["best_manual"] else ""
            lines.append(
                f"| {cell['limit']} | {cell['workload']} | {mode}{mark} "
                f"| {spread(stat['throughput'])} | {spread(stat['p50_ms'])} "
                f"| {spread(stat['p99_ms'])} |"
            )
    return [*lines, "", "</details>"]


def overhead_markdown(overhead: dict[str, Any]) -> list[str]:
    start = overhead["container_start"]
    probe = overhead["in_container"]["processes"]
    v, added = probe["variants"], probe["added"]
    hook = overhead["in_container"]["hook_at_tf_import"]
    t = overhead["targets"]

    def row(what: str, stat: dict[str, float], target: str = "") -> str:
        return f"| {what} | {stat['median']:.1f} | {stat['p10']:.1f}-{stat['p90']:.1f} | {target} |"

    def ok(name: str) -> str:
        return f"<= {t[name]['target']} ms: {'ok' if t[name]['ok'] else 'MISS'}"

    return [
        "## Overhead",
        "",
        f"Container start to command start: {start['pairs']} interleaved pairs of `docker run "
        "--rm --network none IMAGE date +%s%N` (tini, then the entrypoint) and the same with "
        "`--entrypoint tini` (entrypoint bypassed). Inside one container: "
        f"{probe['rounds']} interleaved rounds of each process.",
        "",
        "| measurement | median ms | p10-p90 ms | target |",
        "|---|---|---|---|",
        row(
            "docker run to command start, through the entrypoint",
            start["to_command_start_ms"]["entrypoint"],
        ),
        row(
            "docker run to command start, entrypoint bypassed",
            start["to_command_start_ms"]["bypassed"],
        ),
        row(
            "**added by the entrypoint at container start** (paired)",
            start["added_ms_paired"],
            ok("container_added_ms"),
        ),
        row("`true` (in the container)", v["true"]),
        row("`tf-entrypoint true`", v["tf-entrypoint true"]),
        row("added by the entrypoint (paired)", added["entrypoint (tf-entrypoint true - true)"]),
        row("`python -c pass`, hook .pth on", v["python -c pass (hook on)"]),
        row("`python -c pass`, TF_ENTRYPOINT_HOOK=off", v["python -c pass (hook off)"]),
        row(
            "**added by the hook to interpreter start** (paired)",
            added["hook .pth (python -c pass, on - off)"],
            ok("hook_added_ms"),
        ),
        row("`tf-entrypoint explain`", v["tf-entrypoint explain"]),
        row("`tf-entrypoint explain --json`", v["tf-entrypoint explain --json"]),
        "",
        f"When `import tensorflow` fires the hook (median of {hook['plan']['n']}): "
        f"{hook['plan']['hook_ms']:.1f} ms with the plan from `TF_ENTRYPOINT_PLAN`, "
        f"{hook['computed']['hook_ms']:.1f} ms when it computes the plan itself (docker exec); "
        f"`import tensorflow` itself takes {hook['plan']['import_tensorflow_ms']:.0f} ms.",
        "",
        "Where the entrypoint's start-up goes (`python -X importtime -m entrypoint true`, "
        "top-level modules, cumulative ms, one run): "
        + ", ".join(
            f"{r['module']} {r['cumulative_ms']:.1f}"
            for r in overhead["in_container"]["importtime"]["entrypoint"]["top"][:6]
        )
        + "; a bare `python -c pass` imports "
        f"{overhead['in_container']['importtime']['interpreter']['top_level_total_ms']:.1f} ms.",
    ]


def serving_markdown(serving: dict[str, Any]) -> list[str]:
    c = serving["config"]
    lines = [
        "## Serving under load",
        "",
        f"`tf-entrypoint serve` under `--cpus {c['cpus']}`, the automatic plan against "
        "TensorFlow's defaults (entrypoint and hook bypassed) with the same worker count, "
        f"so only TensorFlow's pools differ. Load: {c['client']}, closed loop, "
        f"{c['seconds']} s per run, {c['reps']} interleaved repetitions; requests per second "
        "count 2xx answers only. Median (min-max).",
        "",
        "| model | workers | concurrency | defaults: req/s | auto: req/s | auto / defaults "
        "| defaults: p99 ms | auto: p99 ms | auto / defaults | non-2xx |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in serving["cells"]:
        d, a, r = cell["modes"]["defaults"], cell["modes"]["auto"], cell["auto_vs_defaults"]
        lines.append(
            f"| {cell['model']} | {cell['workers']} | {cell['concurrency']} | {spread(d['rps'])} "
            f"| {spread(a['rps'])} | {ratio(r['rps'])} | {spread(d['p99_ms'])} "
            f"| {spread(a['p99_ms'])} | {ratio(r['p99'])} | {d['errors']} / {a['errors']} |"
        )
    return lines


def image_build_markdown() -> list[str]:
    path = REPO / "docs" / "image-build-cpu.json"
    if not path.exists():
        return []
    b = json.loads(path.read_text())
    return [
        "## Image build (`bench/image-build`)",
        "",
        "| image | base | cold build | warm rebuild (entrypoint change) | size |",
        "|---|---|---|---|---|",
        f"| {b['image']} | {b['base']} | {b['cold_build_s']:.0f} s | {b['warm_rebuild_s']:.0f} s "
        f"| {b['size_bytes'] / 1e9:.2f} GB |",
    ]


def swap_markdown(swap: dict[str, Any]) -> list[str]:
    config, summary = swap["config"], swap["summary"]
    ratio = summary["during_vs_before"]
    load = "not logged" if summary["load_s"] is None else f"{summary['load_s']:.2f} s"
    lines = [
        "## A version swap under load (`bench/swap.py`)",
        "",
        f"The MLP (8 rows per request) under `--cpus {config['cpus']}`, "
        f"{config['concurrency']} connections in a closed loop; version 2 renamed into place "
        f"after {config['baseline']:g} s. Medians of {len(swap['reps'])} repetitions "
        "(a fresh server each); `during` is from the rename until version 1 is END.",
        "",
        "| phase | req/s | p50 | p99 |",
        "|---|---|---|---|",
    ]
    for phase in ("before", "during", "after"):
        row = summary[phase]
        lines.append(
            f"| {phase} | {num(row['rps'])} | {row['p50_ms']:.1f} ms | {row['p99_ms']:.1f} ms |"
        )
    lines += [
        "",
        f"Failed requests: **{summary['errors']}** of {summary['requests']:,}. Version 2 "
        f"available {summary['swap_available_s']:.2f} s after the rename (the server's load "
        f"and warm-up: {load}), version 1 unloaded after "
        f"{summary['swap_end_s']:.2f} s. During the swap: {ratio['rps']:.2f}x the requests "
        f"per second and {ratio['p99']:.2f}x the p99 of before.",
    ]
    return lines


def _ratio_cell(stat: dict[str, float] | None) -> str:
    return "n/a" if stat is None else f"{ratio(stat['median'])}{paired(stat)}"


def grpc_markdown(data: dict[str, Any]) -> list[str]:
    c = data["config"]
    idle = data.get("server_idle_cpu")
    lines = [
        "## gRPC vs REST (`bench/grpc_rest.py`)",
        "",
        f"One server under `--cpus {c['cpus']}` ({data['workers']} worker) answers the same "
        "predict over gRPC (8500) and REST (8501) at once: same models, process and workers. "
        "The load client (`bench/protocol_load.py`) is one Python process for both protocols "
        "in a second container on the server's network namespace, no CPU limit: REST is "
        "asyncio HTTP/1.1 keep-alive, one connection per caller; gRPC is `grpc.aio` calling TF "
        "Serving's Predict, the request built once, **all callers on one channel** (one HTTP/2 "
        "connection); *channels* is gRPC with one channel (and connection) per caller. "
        f"Per repetition and cell the modes take turns ({c['warmup']:g} s warm-up, "
        f"{c['seconds']:g} s timed, the order reversed cell by cell); {c['reps']} "
        "repetitions. Median (min-max); ratios are medians over medians, in brackets the "
        "same ratio repetition by repetition. Server CPU per request is the server "
        "container's cgroup CPU time over the window divided by the answers"
        + (f" (idle, the server uses {idle:.3f} CPUs)" if idle is not None else "")
        + ". The first answer of every window matched the SavedModel's own output.",
        "",
        "| model | concurrency | REST: req/s | gRPC: req/s | **gRPC / REST: req/s** "
        "| REST: p99 ms | gRPC: p99 ms | **gRPC / REST: p99** | server CPU ms/req: REST, "
        "gRPC | channels / one channel: req/s, p99 | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in data["cells"]:
        m, r = cell["modes"], cell["grpc_vs_rest"]
        rest, grpc = m["rest"], m["grpc"]
        cpu = ", ".join(
            num(x["server_cpu_ms_per_request"]["median"])
            if "server_cpu_ms_per_request" in x
            else "n/a"
            for x in (rest, grpc)
        )
        channels = cell.get("channels_vs_grpc")
        per_caller = (
            f"{_ratio_cell(channels['rps'])}, {_ratio_cell(channels['p99'])}"
            if channels
            else "(= one channel)"
        )
        errors = " / ".join(str(x["errors"]) for x in m.values())
        lines.append(
            f"| {cell['model']} | {cell['concurrency']} | {spread(rest['rps'])} "
            f"| {spread(grpc['rps'])} | {_ratio_cell(r['rps'])} | {spread(rest['p99_ms'])} "
            f"| {spread(grpc['p99_ms'])} | {_ratio_cell(r['p99'])} | {cpu} | {per_caller} "
            f"| {errors} |"
        )
    lines += [
        "",
        "Errors are REST / gRPC / channels. Load average (1 min) during the timed windows: "
        + _load_range(data)
        + ".",
    ]
    return lines


def _load_range(data: dict[str, Any]) -> str:
    loads = [r["loadavg_1m"] for r in data["runs"]]
    return f"{min(loads):.2f}-{max(loads):.2f}" if loads else "n/a"


def batching_markdown(data: dict[str, Any]) -> list[str]:
    config = data["config"]
    lines = [
        "## Server-side batching (`bench/batching.py`)",
        "",
        f"Batch-1 predicts (one row per request), `--enable_batching` with TF Serving's "
        f"default parameters (`on`) against the default server (`off`), both admitting "
        f"{config['max_queue']} requests; {config['seconds']:g} s per cell, "
        f"{config['reps']} repetition(s), load generator {config['client']}. `model`: the "
        "SavedModel called in-process at the mean batch size batching produced at 32 "
        "connections (rows/s); `bare`: a constant answer from Starlette on uvicorn at 32 "
        "connections (req/s); both in the same image under the same `--cpus`.",
        "",
        "| cpus | model | connections | off: req/s, p50, p99, errors | on: req/s, p50, p99, "
        "errors | mean batch (rows) | on / off: req/s, p99 | on as a fraction of model, "
        "bare | goal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def mode(stat: dict[str, float]) -> str:
        return (
            f"{num(stat['rps'])}, {stat['p50_ms']:.1f} ms, {stat['p99_ms']:.1f} ms, "
            f"{int(stat['errors'])}"
        )

    for cell in data["cells"]:
        lines.append(
            f"| {cell['cpus']} | {cell['model']} | {cell['concurrency']} | {mode(cell['off'])} "
            f"| {mode(cell['on'])} | {cell['on']['mean_batch_rows']:.1f} | "
            f"{cell['rps_ratio']:.2f}x, {cell['p99_ratio']:.2f}x | {cell['of_model']:.2f}, "
            f"{cell['of_bare']:.2f} | {cell.get('goal', '')} |"
        )
    lines.append("")
    for result in data["results"]:
        limits = result["limits"]
        lines.append(
            f"- cpus {result['cpus']}, {result['model']}: model in-process "
            f"{num(limits['model_rows_per_s'])} rows/s at batch {limits['model_batch_rows']}; "
            f"bare endpoint {num(limits['bare']['rps'])} req/s (p99 "
            f"{limits['bare']['p99_ms']:.1f} ms)."
        )
    return lines


def _answers(counts: dict[str, int]) -> str:
    return ", ".join(f"{answer} x{n}" for answer, n in sorted(counts.items(), key=lambda x: -x[1]))


def soak_markdown(data: dict[str, Any]) -> list[str]:
    s, c, client = data["summary"], data["config"], data["client"]
    memory, shutdown = data["memory"], data["shutdown"]
    grew = "**grew**" if s["rss_grew"] else "did not grow"
    locked = (
        f"a version turned unreadable every {c['unreadable_every']:g} s (and versions 4, 8, "
        "... arrive unreadable)"
        if c["unreadable_every"]
        else "no version turned unreadable"
    )
    lines = [
        "## The soak benchmark (`bench/soak.py`)",
        "",
        f"`{data['command']}`: {s['seconds']:.0f} s under `--cpus {c['cpus']}` and "
        f"`--memory {c['memory']}`, batching {'on' if c['batching'] else 'off'}, "
        f"`--max-body-bytes {c['max_body_bytes']}`; {c['rest_callers']} REST and "
        f"{c['grpc_callers']} gRPC closed loops on each of plus and cr, a new version every "
        f"{c['swap_every']:g} s, a reload round every {c['reload_every']:g} s, {locked}, "
        f"hostile classes ({len(c['classes'])}) on their own timers. See "
        "[docs/robustness.md](../robustness.md#the-soak-benchmark).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| requests answered (good + hostile) | {s['requests_answered']:,} |",
        f"| failed good requests (goal 0) | **{s['good_failed']}** of {s['good_requests']:,} |",
        f"| versions swapped (loaded) / renamed in | {s['versions_swapped']} / "
        f"{s['versions_renamed_in']} |",
        f"| versions never answered / newest served at the end | "
        f"{s['versions_never_answered']} / "
        f"{'yes' if s['newest_versions_served_at_end'] else 'NO'} |",
        f"| reloads applied (file and HandleReloadConfigRequest) | {s['reloads_applied']:.0f} |",
        "| config file flips not applied / HandleReloadConfigRequest received, never applied | "
        f"{s['file_flips_not_applied']} / {s['grpc_reloads_dropped']} of "
        f"{s['grpc_reloads_received']} |",
        f"| unreadable version episodes | {s['unreadable_episodes']} |",
        f"| hostile requests refused as documented | {s['hostile_refused_as_documented']:,} of "
        f"{s['hostile_sent']:,} ({s['hostile_unexpected']} otherwise) |",
        "| largest RSS of the server process (sampled each second) / its peak (VmHWM) | "
        f"{s['rss_max_mib']:.0f} MiB / {s['rss_peak_mib']:.0f} MiB |",
        f"| RSS growth (last 20 % vs 20-40 % of the run) | {s['rss_growth_mib']:+.0f} MiB: "
        f"{grew} |",
        f"| longest `/healthz` answer / failed probes | {s['healthz_max_ms']:.0f} ms / "
        f"{s['healthz_failed']} |",
        f"| server died during the run / tracebacks in its log | "
        f"{'YES' if s['server_died'] else 'no'} / {s['server_tracebacks']} |",
        f"| SIGTERM to exit (calls in flight outlast the grace period) | "
        f"{s['shutdown_s']} s: {'within' if s['shutdown_within_grace'] else 'NOT within'} "
        f"the {c['grace_period']:g} s grace period + 1 s |",
        "",
        "| hostile class | sent | as documented | otherwise | answers |",
        "|---|---|---|---|---|",
    ]
    for name, cls in client["hostile"]["classes"].items():
        lines.append(
            f"| {name} | {cls['sent']} | {cls['as_documented']} | {cls['unexpected']} "
            f"| {_answers(cls['answers'])} |"
        )
    lines += [
        "",
        "| good path | answered | failed | p50 | p99 | max |",
        "|---|---|---|---|---|---|",
    ]
    for key, path in client["good"]["paths"].items():
        lines.append(
            f"| {key} | {path['answered']:,} | {path['failed']} | {path['p50_ms']:.1f} ms "
            f"| {path['p99_ms']:.1f} ms | {path['max_ms']:.0f} ms |"
        )
    if shutdown.get("in_flight_calls"):
        lines += ["", f"Calls in flight at SIGTERM got: {_answers(shutdown['in_flight_calls'])}."]
    lines += [
        "",
        f"RSS: first sample {memory.get('first_mib', 0):.0f} MiB, median "
        f"{memory.get('early_median_mib', 0):.0f} MiB at 20-40 % of the run, "
        f"{memory.get('late_median_mib', 0):.0f} MiB over the last 20 %.",
    ]
    return lines


def _top(path: dict[str, Any], count: int) -> str:
    return ", ".join(
        f"`{row['function']}` {row['us_per_call']:.1f}" for row in path["top_own_time"][:count]
    )


def session_markdown(data: dict[str, Any]) -> list[str]:
    c, calls = data["config"], data["calls"]
    lines = [
        "## Session bundles against `tf.saved_model.load` (`bench/session_call.py`)",
        "",
        "The server calls a signature through a Session callable of the SavedModel loaded as "
        "TF Serving loads it; before issue 22 it called `tf.saved_model.load`'s signature "
        "function (`SERVE_SAVED_MODEL_LOADER=tf2` still does). Both paths in the same image "
        f"under `--cpus {c['cpus']}`, side by side, on half_plus_two (no compute), the "
        "sweep's MLP (32-512-512-10) and a small CNN (32x32x3 images, about 10 M "
        "multiply-adds a row; a Keras model held by a `tf.Module`, its variables set from "
        "their restored copies). Ratios are Session / `tf.saved_model.load`: for a time or "
        "CPU per request, below 1 means the Session path costs less; for requests per "
        "second, above 1 means it answers more.",
        "",
        f"Machine: {machine_line({'session_call': data})}.",
        "",
        "**One call, in process** (both paths loaded in one process; windows of "
        f"{c['window']:g} s taking turns, {c['rounds']} each; median of the windows' median). "
        "*run*: NumPy in, NumPy out, what a predict costs in TensorFlow as the server calls "
        "it; *predict*: gRPC's Predict in process, TensorProtos decoded, run and written.",
        "",
        "| model | batch | level | Session: µs | `tf.saved_model.load`: µs | **ratio** |",
        "|---|---|---|---|---|---|",
    ]
    for cell in calls["cells"]:
        paths = cell["paths"]
        lines.append(
            f"| {cell['model']} | {cell['batch']} | {cell['level']} "
            f"| {num(paths['session']['median_us'])} "
            f"| {num(paths['tf.saved_model.load']['median_us'])} "
            f"| **{ratio(cell['session_vs_tf2'])}** |"
        )
    same = "yes" if all(calls["same_answers"].values()) else "**no**"
    lines += [
        "",
        f"Both paths gave the same answers (to float32 rounding): {same}; largest "
        f"difference {max(calls['largest_difference'].values()):.2g}.",
    ]
    profile = data.get("profile")
    if profile:
        session, function = profile["session"], profile["tf.saved_model.load"]
        lines += [
            "",
            f"**Where a call goes** (half_plus_two, batch 1, run, {session['calls']:,} calls "
            "under cProfile, which slows the Python part; µs per call of each function's own "
            f"time): Session {num(session['profiled_us_per_call'])} µs: "
            f"{_top(session, 3)}. `tf.saved_model.load` "
            f"{num(function['profiled_us_per_call'])} µs: {_top(function, 6)}.",
        ]
    lines += [
        "",
        "**Two servers** (one per loader, each `--cpus` "
        f"{c['cpus']}, serving the three models; `bench/protocol_load.py` in each server's "
        f"network namespace; {c['warmup']:g} s warm-up, {c['seconds']:g} s timed, the servers "
        f"taking turns cell by cell, {c['reps']} repetitions; medians). A REST request is "
        "3 values (half_plus_two), 8 rows (MLP) or one image (CNN).",
        "",
        "| model | concurrency | protocol | req/s: Session, tf2 | **req/s ratio** "
        "| p99 ms: Session, tf2 | server CPU ms/req: Session, tf2 | **CPU ratio** | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in data["servers"]["cells"]:
        s_, t = cell["loaders"]["session"], cell["loaders"]["tf2"]
        r = cell["session_vs_tf2"]

        def pair(key: str, a: dict[str, Any] = s_, b: dict[str, Any] = t) -> str:
            return ", ".join(num(x[key]) if x.get(key) is not None else "n/a" for x in (a, b))

        cpu_ratio = (
            ratio(r["server_cpu_ms_per_request"]) if "server_cpu_ms_per_request" in r else "n/a"
        )
        lines.append(
            f"| {cell['model']} | {cell['concurrency']} | {cell['mode']} | {pair('rps')} "
            f"| **{ratio(r['rps'])}** | {pair('p99_ms')} | {pair('server_cpu_ms_per_request')} "
            f"| **{cpu_ratio}** | {s_['errors']} / {t['errors']} |"
        )
    lines += [
        "",
        f"**Start-up and memory** (each model served alone, each loader in turn, "
        f"{c['startups']} times; medians): seconds from `docker run` to `/readyz` 200, the "
        "load time the server logs, the server's RSS once ready and after "
        f"{c['idle_predicts']} predicts.",
        "",
        "| model | loader | ready s | load s | RSS ready MiB | RSS after predicts MiB |",
        "|---|---|---|---|---|---|",
    ]
    for model, by_loader in data["startup"]["summary"].items():
        for loader, figures in by_loader.items():
            cells = " | ".join(
                num(figures[key]) if figures.get(key) is not None else "n/a"
                for key in ("ready_s", "load_s", "rss_ready_mib", "rss_after_predicts_mib")
            )
            lines.append(f"| {model} | {loader} | {cells} |")
    return lines


def _module_table(module: str) -> Any:
    def render(data: dict[str, Any]) -> list[str]:
        table: str = importlib.import_module(f"bench.{module}").table(data)
        return table.splitlines()

    return render


def startup_markdown(data: dict[str, Any]) -> list[str]:
    lines = [
        f"{data['rounds']} interleaved rounds, medians:",
        "",
        "| command | median | work before the exec | work / python -c pass |",
        "|---|---|---|---|",
    ]
    for name, c in data["commands"].items():
        lines.append(
            f"| {name} | {c['median_ms']:.1f} ms | {c['work_ms']:.1f} ms "
            f"| {c['work_vs_python']:.2f}x |"
        )
    return lines


def workers_markdown(data: dict[str, Any]) -> list[str]:
    lines = ["| cpus | workers | rows | req/s | p50 | p99 |", "|---|---|---|---|---|---|"]
    for r in data["runs"]:
        lines.append(
            f"| {r['cpus']} | {r['workers']} | {r['batch']} | {num(r['rps'])} "
            f"| {r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms |"
        )
    return lines


def processes_markdown(data: dict[str, Any]) -> list[str]:
    """Per (protocol, request): each arm's req/s, CPUs used, p50/p99 and memory; the ratios."""
    lines = [
        "| protocol | request | arm | req/s | CPUs used | p50 | p99 | memory idle / loaded |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    single: dict[str, float] = {}
    for cell in data["cells"]:
        if cell.get("connections") == 1:
            single = {k: v for k, v in cell.items() if k != "connections"}
            continue
        for arm, m in cell.items():
            if isinstance(m, dict):
                lines.append(
                    f"| {cell['protocol']} | {cell['request']} | {arm} | {num(m['rps'])} "
                    f"| {m['cpus']:.2f} | {m['p50_ms']:.2f} ms | {m['p99_ms']:.2f} ms "
                    f"| {m['idle_memory_mb']:.0f} / {m['memory_mb']:.0f} MB |"
                )
            elif " / " in arm:
                ratios.append(f"{cell['protocol']} {cell['request']}: {arm} = {m}x")
    if ratios:
        lines += ["", "Ratios of req/s: " + "; ".join(ratios) + "."]
    if single:
        shown = ", ".join(f"{arm} {p50:.3f} ms" for arm, p50 in single.items())
        lines += ["", f"p50 at one connection (REST): {shown}."]
    return lines


def app_cost_markdown(data: dict[str, Any]) -> list[str]:
    return [
        "| the server's app | a bare ASGI app | the server's own Python |",
        "|---|---|---|",
        f"| {data['server_us']:.1f} µs | {data['bare_us']:.1f} µs "
        f"| {data['server_us'] - data['bare_us']:.1f} µs |",
    ]


def request_memory_markdown(data: dict[str, Any]) -> list[str]:
    if "cases" not in data:  # the recorded history: {"before": run, "after": run} (issue 31)
        lines = []
        for label, run in data.items():
            if isinstance(run, dict) and "cases" in run:
                lines += [f"**{label}** (`{run.get('image', '?')}`):", ""]
                lines += [*request_memory_markdown(run), ""]
        return lines[:-1]
    lines = ["| case | request | answer | peak added / request size |", "|---|---|---|---|"]
    for case, c in data["cases"].items():
        factor = "OOM" if c["oom_killed"] else f"{c['factor']}x"
        lines.append(f"| {case} | {c['request_bytes']:,} B | {c['answer']} | {factor} |")
    return lines


def profiles_markdown(data: dict[str, Any]) -> list[str]:
    lines = ["| cell | CPU µs per request | req/s | Python-visible |", "|---|---|---|---|"]
    for c in data["cells"]:
        lines.append(
            f"| {c['name']} | {num(c['cpu_us_per_request'])} | {num(c['rps'])} "
            f"| {c['python_visible']:.0%} |"
        )
    return lines


#: scenario -> its section of results.md (the first line of a section is its heading when
#: it starts with "## ", else the scenario's title is).
SECTIONS: dict[str, Any] = {
    "sweep": lambda d: [*sweep_markdown(d), "", "![quota sweep](quota-sweep.png)"],
    "overhead": overhead_markdown,
    "startup": startup_markdown,
    "serving": lambda d: [*serving_markdown(d), "", "![serving](serving.png)"],
    "swap": swap_markdown,
    "grpc": grpc_markdown,
    "batching": batching_markdown,
    "workers": workers_markdown,
    "processes": processes_markdown,
    "cost": _module_table("cost"),
    "profiles": profiles_markdown,
    "app_cost": app_cost_markdown,
    "v2": _module_table("v2_cost"),
    "session_call": session_markdown,
    "request_memory": request_memory_markdown,
    "soak": soak_markdown,
    "object_store": _module_table("object_store_clients"),
    "before_after": _module_table("before_after"),
}


def section(name: str, part: dict[str, Any]) -> list[str]:
    body: list[str] = SECTIONS[name](part)
    if body and body[0].startswith("## "):
        return body
    title = next(s.title for s in SCENARIOS if s.name == name)
    return [f"## {title}", "", *body]


def provenance(name: str, part: dict[str, Any]) -> str:
    """When and how the latest result was made: a line for docs/benchmarks.md."""
    doc = part["_doc"]
    scenario = next(s for s in SCENARIOS if s.name == name)
    when = (doc["when"].get("started") or "undated")[:10]
    m = doc["machine"] or {}
    where = f"{m.get('cpus', '?')} CPUs ({m.get('cpu_model', 'unknown')})" if m else "unknown"
    quick = " (a --quick run: a smoke, not figures)" if doc["quick"] else ""
    if doc["command"]:
        made = f"made by `{doc['command']}`"
    else:
        made = f"made by the command of the time (today: `python -m bench run {name}`)"
    legacy = ", recorded before the one result schema" if doc["schema"] == 0 else ""
    return (
        f"Latest result: [`docs/bench/{scenario.result_name}.json`](bench/"
        f"{scenario.result_name}.json){legacy}, {when}, on {where}; {made}{quick}."
    )


def headline(lines: list[str]) -> list[str]:
    """A section up to the end of its first table (the rest is in results.md)."""
    seen_table = False
    for i, line in enumerate(lines):
        if line.startswith("|"):
            seen_table = True
        elif seen_table:
            more = ["", "Every table of this result: [results.md](results.md)."]
            return lines[:i] + (more if any(x.startswith("|") for x in lines[i:]) else [])
    return lines


def markdown(parts: dict[str, Any]) -> str:
    lines = [
        "# tf-entrypoint benchmarks",
        "",
        "Generated by `python -m bench run` (`make bench`) from the JSON files next to this "
        "one; `python -m bench report` re-renders it. Benchmarks, not tests: nothing here "
        "is asserted. One section per scenario, in bench/scenarios.py's order.",
        "",
        f"Machine: {machine_line(parts)}.",
        "",
        *load_lines(parts),
        "",
    ]
    for scenario in SCENARIOS:
        if scenario.name in parts:
            lines += [*section(scenario.name, parts[scenario.name]), ""]
    lines += image_build_markdown()
    return "\n".join(lines).rstrip() + "\n"


BLOCK = re.compile(r"<!-- figures: (\w+) -->\n.*?<!-- /figures -->", re.S)
HEADING = re.compile(r"^<!-- scenario: (\w+) -->$", re.M)


LINK = re.compile(r"\]\((?!https?:|#|/)([^)]+)\)")


def _rebase(line: str) -> str:
    """A line of results.md (in docs/bench/) with its relative links made from docs/."""

    def moved(match: re.Match[str]) -> str:
        target = match.group(1)
        return f"]({target[3:] if target.startswith('../') else 'bench/' + target})"

    return LINK.sub(moved, line)


def benchmarks_doc(text: str, parts: dict[str, Any]) -> str:
    """docs/benchmarks.md with its sections in the registry's order and every generated
    block rewritten. A section runs from its `<!-- scenario: NAME -->` line to the next."""
    marks = list(HEADING.finditer(text))
    head = text[: marks[0].start()] if marks else text.rstrip() + "\n\n"
    sections = {
        m.group(1): text[m.start() : marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        for i, m in enumerate(marks)
    }
    unknown = set(sections) - {s.name for s in SCENARIOS}
    if unknown:
        raise ValueError(f"docs/benchmarks.md has sections of no scenario: {sorted(unknown)}")
    out = [head.rstrip() + "\n"]
    for scenario in SCENARIOS:
        body = sections.get(scenario.name) or (
            f"<!-- scenario: {scenario.name} -->\n## {scenario.title}\n\n"
            f"{scenario.shows[0].upper()}{scenario.shows[1:]}.\n\n"
            f"<!-- figures: {scenario.name} -->\n<!-- /figures -->\n"
        )
        part = parts.get(scenario.name)
        block = (
            [
                provenance(scenario.name, part),
                "",
                *map(_rebase, headline(SECTIONS[scenario.name](part))),
            ]
            if part
            else [f"No result yet: `python -m bench run {scenario.name}`."]
        )
        if block[2:3] and block[2].startswith("## "):
            block = block[:2] + block[4:]  # the section's own heading is the doc's
        generated = (
            f"<!-- figures: {scenario.name} -->\n" + "\n".join(block) + "\n<!-- /figures -->"
        )
        if BLOCK.search(body):
            body = BLOCK.sub(lambda _match: generated, body, count=1)  # noqa: B023 - used at once
        else:
            body = body.rstrip() + "\n\n" + generated + "\n"
        out.append("\n" + body.strip() + "\n")
    return "".join(out)


# --- plots --------------------------------------------------------------------

COLORS = {"defaults": "#9e9e9e", "auto": "#1f77b4", "best manual": "#ff7f0e"}


def _errors(stats: list[dict[str, float]], scale: list[float]) -> list[list[float]]:
    return [
        [(s["median"] - s["min"]) / k for s, k in zip(stats, scale, strict=True)],
        [(s["max"] - s["median"]) / k for s, k in zip(stats, scale, strict=True)],
    ]


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (imported only for the plots)."""
    importlib.import_module("matplotlib").use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def _mode_for(cell: dict[str, Any], label: str) -> str:
    return str(cell["best_manual"]) if label == "best manual" else label


def plot_sweep(sweep: dict[str, Any], path: Path) -> None:
    plt = pyplot()

    workloads = sweep["config"]["workloads"]
    fig, axes = plt.subplots(2, len(workloads), figsize=(4.2 * len(workloads), 6.4), squeeze=False)
    for col, workload in enumerate(workloads):
        cells = [c for c in sweep["cells"] if c["workload"] == workload]
        limits = [c["limit"].replace("none", "no limit") for c in cells]
        xs = list(range(len(cells)))
        base = [c["modes"]["defaults"]["throughput"]["median"] for c in cells]
        width = 0.27
        for k, label in enumerate(("defaults", "auto", "best manual")):
            thr = [c["modes"][_mode_for(c, label)]["throughput"] for c in cells]
            p99 = [c["modes"][_mode_for(c, label)]["p99_ms"] for c in cells]
            pos = [x + (k - 1) * width for x in xs]
            axes[0][col].bar(
                pos,
                [s["median"] / b for s, b in zip(thr, base, strict=True)],
                width,
                yerr=_errors(thr, base),
                color=COLORS[label],
                label=label,
                capsize=2,
            )
            axes[1][col].bar(
                pos,
                [s["median"] for s in p99],
                width,
                yerr=_errors(p99, [1] * len(p99)),
                color=COLORS[label],
                label=label,
                capsize=2,
            )
        axes[0][col].set_title(WORKLOAD_TITLES.get(workload, workload))
        axes[0][col].axhline(1.0, color="black", linewidth=0.6)
        axes[1][col].set_yscale("log")
        ticker = importlib.import_module("matplotlib.ticker")
        axes[1][col].yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axes[1][col].yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        axes[1][col].yaxis.set_minor_formatter(ticker.NullFormatter())
        for row in (0, 1):
            axes[row][col].set_xticks(xs, limits, fontsize=8)
            axes[row][col].grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("throughput / TF defaults")
    axes[1][0].set_ylabel("p99 latency per call (ms, log)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(
        "TensorFlow under CPU limits: TF defaults vs tf-entrypoint's plan vs best manual setting"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    log(f"wrote {path}")


def plot_serving(serving: dict[str, Any], path: Path) -> None:
    plt = pyplot()

    models = list(dict.fromkeys(c["model"] for c in serving["cells"]))
    fig, axes = plt.subplots(len(models), 2, figsize=(9, 3.2 * len(models)), squeeze=False)
    for row, model in enumerate(models):
        cells = [c for c in serving["cells"] if c["model"] == model]
        xs = [c["concurrency"] for c in cells]
        for mode in ("defaults", "auto"):
            for col, key in enumerate(("rps", "p99_ms")):
                stats = [c["modes"][mode][key] for c in cells]
                axes[row][col].errorbar(
                    xs,
                    [s["median"] for s in stats],
                    yerr=_errors(stats, [1] * len(stats)),
                    marker="o",
                    capsize=3,
                    color=COLORS[mode],
                    label=mode,
                )
        for col, label in enumerate(("requests/s (2xx)", "p99 latency (ms)")):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.set_xlabel("concurrent connections")
            ax.set_ylabel(label)
            ax.set_title(f"{model}, --cpus {serving['config']['cpus']}", fontsize=10)
            ax.grid(alpha=0.3)
            ax.set_ylim(bottom=0)
        axes[row][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    log(f"wrote {path}")


def render(out: Path, plots: bool = True) -> dict[str, Any]:
    parts = load_parts(out)
    if not parts:
        raise SystemExit(f"no results in {out}: run python -m bench run first")
    (out / "results.md").write_text(markdown(parts))
    log(f"wrote {out / 'results.md'}")
    if out.resolve() == DOCS.parent / "bench":
        DOCS.write_text(benchmarks_doc(DOCS.read_text(), parts))
        log(f"wrote {DOCS}")
    if plots:
        if "sweep" in parts:
            plot_sweep(parts["sweep"], out / "quota-sweep.png")
        if "serving" in parts:
            plot_serving(parts["serving"], out / "serving.png")
    return parts
