"""The one benchmark runner (bench/scenarios.py says how to add a scenario).

    python -m bench list
    python -m bench run SCENARIO[,SCENARIO...]|all [--quick] [--image IMAGE] [--out DIR]
                        [--before IMAGE] [--no-wait] [--jobs N]
    python -m bench report [--out DIR] [--no-plot]

run: for each scenario, in the registry's order, waits for a quiet machine
(full runs of scenarios that ask for one; --no-wait skips it), pins the image
under a private tag (so a rebuild of its tag during the run changes nothing),
measures, and writes OUT/NAME.json in the one schema (bench/results.py);
then re-renders OUT/results.md (and docs/benchmarks.md when OUT is
docs/bench). A scenario that fails is named and the others still run; the
exit status is 1 if any failed. --jobs N (--quick only: a smoke, whose
timings mean nothing) runs N scenarios at once. `all` skips the scenarios whose needs this
run cannot meet (before_after without --before; object_store outside the
bench venv; app_cost where the server cannot be imported), saying so.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import results as schema
from bench.common import (
    NAMES,
    REPO,
    docker,
    log,
    machine,
    now_iso,
    use_library,
    wait_for_quiet,
    write_json,
)
from bench.scenarios import BY_NAME, SCENARIOS, Context, Scenario
from harness import models as model_library

DEFAULT_OUT = REPO / "docs" / "bench"


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # runs the cleanup in run's finally


def unmet(scenario: Scenario, args: argparse.Namespace) -> str:
    """Why this run cannot run `scenario` ("" when it can)."""
    if "bench venv" in scenario.needs:
        from bench.object_store_clients import NEEDED, missing  # noqa: PLC0415

        arms_may_miss = args.quick and scenario.quick.missing_arms
        if absent := [m for m in missing() if m in NEEDED or not arms_may_miss]:
            return f"needs the bench venv ({', '.join(absent)} missing)"
    if "dev venv" in scenario.needs and scenario.config is None:
        return "needs the dev venv (.venv): it imports the server"
    if "before image" in scenario.needs and not args.before:
        return "needs --before IMAGE"
    return ""


def pin(image: str, label: str) -> str:
    pinned = f"tf-entrypoint-bench:{label}-{os.getpid()}"
    docker("tag", docker("image", "inspect", "-f", "{{.Id}}", image), pinned)
    return pinned


def choose(args: argparse.Namespace) -> list[Scenario] | None:
    """The scenarios to run (None: a usage error, said)."""
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    if names == ["all"]:
        chosen = list(SCENARIOS)
    else:
        wrong = [n for n in names if n not in BY_NAME]
        if wrong or not names:
            log(f"unknown scenario {', '.join(wrong)}: python -m bench list")
            return None
        chosen = [BY_NAME[n] for n in names]
    runnable = []
    for scenario in chosen:
        why = unmet(scenario, args)
        if why and names != ["all"]:
            log(f"{scenario.name}: {why}")
            return None
        if why:
            log(f"{scenario.name}: skipped: {why}")
            continue
        runnable.append(scenario)
    return runnable


def prepare(
    args: argparse.Namespace, runnable: list[Scenario]
) -> tuple[dict[str, Any], dict[str, str] | None, str, str]:
    """(the machine's facts, the image's, the pinned image, the pinned BEFORE image)."""
    if not any("image" in s.needs for s in runnable):
        return machine_without_image(), None, "", ""
    facts = machine(args.image)
    # The library is keyed by the image's own tag (its -deps stage), so resolve it
    # before pinning: a second run, or the tests, reuse it.
    use_library(model_library.library(args.image))
    image_facts = {"tag": args.image, "id": facts.pop("image_id", "")}
    facts.pop("image", None)
    pinned = pin(args.image, "run")
    before = pin(args.before, "before") if args.before else ""
    return facts, image_facts, pinned, before


def run(args: argparse.Namespace) -> int:
    runnable = choose(args)
    if runnable is None:
        return 2
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)  # even when started in the background
    facts, image_facts, pinned, before = prepare(args, runnable)
    command = "python -m bench " + " ".join(shlex.quote(a) for a in args.argv)
    started = time.monotonic()

    def one(scenario: Scenario) -> bool:
        """Measure `scenario` and write its result; False if it failed."""
        config = scenario.quick if args.quick else scenario.config
        quiet = None
        if not args.quick and not args.no_wait and scenario.quiet_load is not None:
            quiet = wait_for_quiet(scenario.quiet_load, args.max_wait)
        log(f"{scenario.name}: starting ({time.monotonic() - started:.0f} s in)")
        began, clock = now_iso(), time.monotonic()
        ctx = Context(image=pinned, out=args.out, quick=args.quick, before=before)
        try:
            found = scenario.measure(ctx, config)
        except Exception as err:  # noqa: BLE001 - one scenario's failure, named; the others run
            log(f"{scenario.name}: FAILED: {err}\n{traceback.format_exc()}")
            return False
        finally:
            if args.jobs == 1:  # with jobs in parallel, the others' containers are live
                NAMES.remove_all()
        seconds = round(time.monotonic() - clock, 1)
        doc = schema.document(
            scenario=scenario,
            command=command if len(runnable) == 1 else _one(command, scenario.name),
            quick=args.quick,
            when={"started": began, "finished": now_iso(), "seconds": seconds},
            machine=facts,
            image=image_facts if "image" in scenario.needs else None,
            quiet=quiet,
            config=config,
            results=found,
        )
        write_json(args.out / f"{scenario.result_name}.json", doc)
        log(f"{scenario.name}: done in {seconds:.0f} s")
        return True

    # With --jobs, the scenarios without the image run first, alone: object_store's
    # emulators take free ports, which a server container starting meanwhile could publish.
    alone = [s for s in runnable if args.jobs > 1 and "image" not in s.needs]
    together = [s for s in runnable if s not in alone]
    try:
        done = [one(s) for s in alone]
        with ThreadPoolExecutor(args.jobs) as pool:
            done += list(pool.map(one, together))
    finally:
        NAMES.remove_all()
        for tag in (pinned, before):
            if tag:
                docker("rmi", tag, check=False)
    failed = [s.name for s, ok in zip([*alone, *together], done, strict=True) if not ok]
    log(f"done in {time.monotonic() - started:.0f} s" + (f"; FAILED: {failed}" if failed else ""))
    from bench import report  # noqa: PLC0415

    report.render(args.out, plots=not args.no_plot)
    return 1 if failed else 0


def _one(command: str, name: str) -> str:
    """The command that runs only `name` with the same options (what the result records)."""
    words = shlex.split(command)
    words[4] = name  # python -m bench run SCENARIOS ...
    return " ".join(shlex.quote(w) for w in words)


def machine_without_image() -> dict[str, Any]:
    facts = machine("")
    for key in ("image", "image_id", "docker"):
        facts.pop(key, None)
    return facts


def listing() -> int:
    for s in SCENARIOS:
        needs = f" [needs {', '.join(s.needs)}]" if s.needs else ""
        print(f"{s.name:15} {s.title}{needs}\n{'':15} {s.shows}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the scenarios")
    running = commands.add_parser("run", help="run scenarios")
    running.add_argument("scenarios", help="NAME[,NAME...] or all")
    running.add_argument("--quick", action="store_true", help="each scenario's quick config")
    running.add_argument("--image", default="tf-entrypoint:cpu")
    running.add_argument("--before", default="", help="before_after's BEFORE image")
    running.add_argument("--out", type=Path, default=DEFAULT_OUT, help="default: docs/bench")
    running.add_argument("--no-wait", action="store_true", help="never wait for a quiet machine")
    running.add_argument("--max-wait", type=float, default=1200, help="most seconds to wait")
    running.add_argument("--no-plot", action="store_true", help="no PNGs (needs matplotlib)")
    running.add_argument(
        "--jobs", type=int, default=1, help="scenarios at once (only with --quick: a smoke)"
    )
    reporting = commands.add_parser("report", help="re-render results.md and docs/benchmarks.md")
    reporting.add_argument("--out", type=Path, default=DEFAULT_OUT)
    reporting.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.command == "run" and args.jobs != 1 and not (args.quick and args.jobs > 1):
        parser.error(
            "--jobs: more than 1 only with --quick (measurements would disturb each other)"
        )
    if args.command == "list":
        return listing()
    if args.command == "run":
        return run(args)
    from bench import report  # noqa: PLC0415

    report.render(args.out, plots=not args.no_plot)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
