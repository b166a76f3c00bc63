"""The `tf-entrypoint` command: parse the command line, plan, report, exec.

Our messages go to stderr; stdout belongs to the command. docs/configuration.md:
"The command line".
"""

from __future__ import annotations

import os
import sys

from tf_entrypoint import __version__
from tf_entrypoint.common import say
from tf_entrypoint.explain import no_gpu_line, render_json, render_text, summary_line
from tf_entrypoint.frozen import frozen
from tf_entrypoint.handoff import tensorflow_missing
from tf_entrypoint.plan import MemoryFraction, Plan, child_environment, resolve
from tf_entrypoint.problems import EXIT_CANNOT_EXECUTE, EXIT_CONFIG, EXIT_NOT_FOUND, EXIT_USAGE
from tf_entrypoint.settings import TABLE, plain
from tf_entrypoint.tfserving import (
    SERVER,
    PlanFlags,
    find_command,
    gpu_memory_fraction,
    is_model_server,
    is_our_server,
    plan_flags,
    serving_argv,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: collections.abc costs start-up time
    from collections.abc import Sequence

PROG = "tf-entrypoint"

#: What `tf-entrypoint` runs when it is given no command, or only options
#: (arguments starting with "-"), following the official images' convention.
DEFAULT_COMMAND: tuple[str, ...] = ("serve",)

#: Our own subcommands. Anything else is a command to run; `--` forces that
#: reading for a command that happens to share a subcommand's name.
SUBCOMMANDS = frozenset({"explain", "serve"})


@frozen
class ShowHelp:
    pass


@frozen
class ShowVersion:
    pass


@frozen
class UsageError:
    message: str


@frozen
class Subcommand:
    name: str
    args: tuple[str, ...]


@frozen
class Exec:
    """Replace this process with `argv` (argv[0] is looked up on PATH)."""

    argv: tuple[str, ...]


Invocation = ShowHelp | ShowVersion | UsageError | Subcommand | Exec


def parse_command_line(args: Sequence[str], default: Sequence[str] = DEFAULT_COMMAND) -> Invocation:
    """Decide what an argument vector asks for. Pure: no I/O."""
    if not args:
        return _command(tuple(default))
    first, rest = args[0], tuple(args[1:])
    if first == "--":
        return Exec(rest) if rest else UsageError("'--' must be followed by a command to run")
    if first in _OWN_FLAGS:
        return _OWN_FLAGS[first]
    if first.startswith("-"):
        # docker run IMAGE --flag: the flags are for the default command.
        return _command((*default, *args))
    return _command(tuple(args))


_OWN_FLAGS: dict[str, Invocation] = {
    "-h": ShowHelp(),
    "--help": ShowHelp(),
    "--version": ShowVersion(),
}


def _command(argv: tuple[str, ...]) -> Invocation:
    if argv and argv[0] in SUBCOMMANDS:
        return Subcommand(argv[0], argv[1:])
    return Exec(argv)


def help_text() -> str:
    """--help: the usage, then every variable of the table (tf_entrypoint.settings.TABLE)."""
    variables = "".join(
        f"  {v.name}\n      {plain(v.accepted)} [default: {plain(v.default)}]\n" for v in TABLE
    )
    return f"""\
usage: {PROG} [--] COMMAND [ARGS...]
       {PROG} [OPTIONS-FOR-THE-DEFAULT-COMMAND...]
       {PROG} explain [--json] [PLAN-FLAGS...]
       {PROG} --help | --version

Makes TensorFlow fit the container it runs in, then replaces itself with
COMMAND (exec): same PID, same environment, same stdout, stdin and exit code.
With no COMMAND it runs the default command ({" ".join(DEFAULT_COMMAND)}); a
first argument starting with '-' is passed to the default command. Use '--'
before a COMMAND whose name is also one of ours (serve, explain).

commands:
  serve [OPTIONS]    serve SavedModels over TF Serving's APIs, gRPC on :8500
                     (--port) and REST on :8501 (--rest_api_port, env PORT):
                     MODEL_BASE_PATH/MODEL_NAME, or every model of TF Serving's
                     --model_config_file; new versions are swapped in while
                     serving. Takes TF Serving's flags (the default command;
                     see serve --help)
  explain [--json] [PLAN-FLAGS...]
                     print what would be applied in this container, run nothing;
                     with TF Serving's flags that the plan reads (thread counts,
                     --per_process_gpu_memory_fraction), what serve would apply
  {SERVER} [FLAGS]
                     the same server under TF Serving's name (also a command
                     of its own, /usr/bin/{SERVER}, which plans like
                     {PROG} and then serves). A derived image's real TF
                     Serving binary of that name is run instead, with the
                     plan as flags

environment variables:
{variables}
exit codes (before the hand-off; afterwards the exit code is COMMAND's own):
  {EXIT_USAGE}   wrong {PROG} command line
  {EXIT_CONFIG}   invalid configuration (every problem is listed on stderr)
  {EXIT_CANNOT_EXECUTE}  COMMAND exists but cannot be executed
  {EXIT_NOT_FOUND}  COMMAND not found on PATH

Our messages go to stderr, prefixed '{PROG}:'. See docs/configuration.md for
the rules of each variable and the detection.
"""


def run_subcommand(name: str, args: tuple[str, ...]) -> int:
    if name == "serve":
        return serve(args, dict(os.environ))
    if name == "explain":
        return explain_command(args, dict(os.environ))
    say(f"unknown command {name!r}")  # pragma: no cover - SUBCOMMANDS guards this
    return EXIT_USAGE


def serve(args: tuple[str, ...], env: dict[str, str], name: str = "serve") -> int:
    """Plan, then hand off to the model server with `args`.

    The server imports TensorFlow and Starlette (the entrypoint itself never
    does). TF Serving's thread flags in `args` become the plan's thread counts,
    --per_process_gpu_memory_fraction its GPU memory caps.
    """
    flags = plan_flags(args, env)
    if not isinstance(flags, PlanFlags):
        say(f"error: {flags} (exit {EXIT_USAGE})")
        return EXIT_USAGE
    for note in flags.notes:
        say(f"note: {note}")
    argv = (sys.executable, "-m", "tf_entrypoint.serving", *flags.args)
    return start(argv, {**env, **dict(flags.env)}, name=name, fraction=flags.fraction)


def model_server_main() -> int:
    """The ``tensorflow_model_server`` command (console script): ``serve`` under
    TF Serving's name, for platforms that replace the image's ENTRYPOINT
    (Kubernetes ``command:``, KServe): planned and validated like tf-entrypoint."""
    return serve(tuple(sys.argv[1:]), dict(os.environ), name=SERVER)


def is_our_model_server(argv: tuple[str, ...], env: dict[str, str]) -> bool:
    """argv runs our ``tensorflow_model_server`` (not a derived image's real binary)."""
    return is_model_server(argv) and is_our_server(find_command(argv[0], env.get("PATH", "")))


def explain_command(args: tuple[str, ...], env: dict[str, str]) -> int:
    """``explain [--json] [PLAN-FLAGS...]``: the plan flags as serve reads them."""
    as_json = "--json" in args
    flags = plan_flags(tuple(arg for arg in args if arg != "--json"), env)
    if not isinstance(flags, PlanFlags):
        say(f"error: {flags} (exit {EXIT_USAGE})")
        return EXIT_USAGE
    if flags.args:
        say(
            f"usage: {PROG} explain [--json] [PLAN-FLAGS...], the flags being TF Serving's "
            f"that the plan reads (got: {' '.join(flags.args)})"
        )
        return EXIT_USAGE
    for note in flags.notes:
        say(f"note: {note}")
    return explain(as_json=as_json, env={**env, **dict(flags.env)}, fraction=flags.fraction)


def explain(*, as_json: bool, env: dict[str, str], fraction: MemoryFraction | None = None) -> int:
    """Print the plan on stdout; exit EXIT_CONFIG when it has problems."""
    plan = resolve(env, fraction=fraction)
    sys.stdout.write(render_json(plan, env) if as_json else render_text(plan, env))
    return 0 if plan.ok else EXIT_CONFIG


def start(
    argv: tuple[str, ...],
    env: dict[str, str],
    name: str | None = None,
    fraction: MemoryFraction | None = None,
) -> int:
    """Plan, report, and hand off to argv with the planned environment.

    `name` is what messages call the command (default: argv[0]); `fraction`
    is --per_process_gpu_memory_fraction, read by serve.
    """
    name = name or argv[0]
    try:
        plan = resolve(env, fraction=fraction)
    except Exception as err:  # noqa: BLE001 - our bug must not block the workload
        say(
            f"internal error while planning ({type(err).__name__}: {err}); starting "
            f"{name!r} with TensorFlow's defaults. Please report this."
        )
        return hand_off(argv, env)
    if not plan.ok:
        for problem in plan.problems:
            say(f"error: {problem}")
        count = len(plan.problems)
        say(
            f"{count} configuration problem{'s' if count > 1 else ''}: not starting "
            f"{name!r} (exit {EXIT_CONFIG}; `{PROG} explain` shows the whole plan)"
        )
        return EXIT_CONFIG
    for notice in plan.notices:
        say(f"warning: {notice}")
    missing = tensorflow_missing(env)
    if missing:
        say(f"warning: {missing}")
    argv, serving_notes = serving_command(argv, plan)
    for note in serving_notes:
        say(f"warning: {note}")
    if not plan.quiet:
        no_gpu = no_gpu_line(plan, env)
        if no_gpu:
            say(no_gpu)
        say(summary_line(plan, (name,)))
    return hand_off(argv, child_environment(plan, env))


def serving_command(argv: tuple[str, ...], plan: Plan) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """argv plus TF Serving's flags when argv runs tensorflow_model_server; and notes."""
    if not is_model_server(argv):
        return argv, ()
    fraction = gpu_memory_fraction(
        {cap.index: cap.memory_mb for cap in plan.applied_caps},
        {gpu.index: gpu.memory_mb for gpu in plan.gpus.gpus},
    )
    flagged = serving_argv(
        argv,
        intra=plan.intra_op.value,
        inter=plan.inter_op.value,
        cpus=plan.cpu.cpus,
        gpu_fraction=fraction.fraction,
    )
    return flagged, fraction.notes


def hand_off(argv: tuple[str, ...], env: dict[str, str]) -> int:
    """exec argv; only returns (with a shell-style exit code) when exec fails."""
    # Anything we printed must be out before the process image is replaced.
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)  # noqa: S606 - the hand-off is the product
    except FileNotFoundError:
        say(f"cannot run {argv[0]!r}: command not found (PATH={env.get('PATH', '')})")
        return EXIT_NOT_FOUND
    except PermissionError:
        say(f"cannot run {argv[0]!r}: permission denied (not executable?)")
        return EXIT_CANNOT_EXECUTE
    except OSError as err:
        say(f"cannot run {argv[0]!r}: {err.strerror or err}")
        return EXIT_CANNOT_EXECUTE
    return EXIT_CANNOT_EXECUTE  # pragma: no cover - execvpe returns only by raising


def main(argv: Sequence[str] | None = None) -> int:
    invocation = parse_command_line(sys.argv[1:] if argv is None else argv)
    if isinstance(invocation, ShowHelp):
        sys.stdout.write(help_text())
        return 0
    if isinstance(invocation, ShowVersion):
        sys.stdout.write(f"{PROG} {__version__}\n")
        return 0
    if isinstance(invocation, UsageError):
        say(f"{invocation.message} (see {PROG} --help)")
        return EXIT_USAGE
    if isinstance(invocation, Subcommand):
        return run_subcommand(invocation.name, invocation.args)
    env = dict(os.environ)
    if is_our_model_server(invocation.argv, env):
        # Ours is `serve`: run it directly rather than planning twice.
        return serve(invocation.argv[1:], env, name=SERVER)
    return start(invocation.argv, env)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
