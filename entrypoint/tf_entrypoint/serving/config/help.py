"""Renderers of the flag table (tf_entrypoint.server_flags.FLAGS): ``--help``,
docs/tf-serving.md's table, and ``--version``."""

from __future__ import annotations

import textwrap
from importlib import metadata

from tf_entrypoint.server_flags import FLAGS, Flag


class ShowText(Exception):
    """--help or --version: print `text` on stdout and exit 0."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _row_spellings(flag: Flag) -> str:
    value = "" if flag.boolean else "=VALUE"
    return ", ".join(f"{spelling}{value}" for spelling in flag.spellings)


def help_text() -> str:
    """--help: usage, then every flag of the table."""
    lines = []
    for flag in FLAGS:
        extra = [f"env {flag.env}"] if flag.env else []
        if flag.default and flag.kind in ("serve", "plan"):
            extra.append(f"default {flag.default}")
        suffix = f" [{'; '.join(extra)}]" if extra else ""
        text = textwrap.fill(
            f"{flag.what_it_does()}{suffix}", 88, initial_indent="      ",
            subsequent_indent="      ", break_on_hyphens=False,
        )  # fmt: skip
        lines.append(f"  {_row_spellings(flag)}\n{text}\n")
    return f"""\
usage: tensorflow_model_server [FLAGS...]
       tf-entrypoint serve [FLAGS...]

Serve SavedModels over TF Serving's gRPC (--port, 8500) and REST (--rest_api_port,
8501) APIs, sized to the container's CPU budget: the model --model_name from
--model_base_path, or every model of TF Serving's --model_config_file. New versions
are loaded, warmed up and swapped in while serving. Takes TF Serving's flags
(--flag=VALUE or --flag VALUE; a boolean alone is true, or --flag=false); a flag
TF Serving has but this server does not implement is refused, never ignored.
Flags win over the environment variables shown.

flags:
{"".join(lines)}
exit codes: 0 stopped by SIGTERM/SIGINT after draining (or --help, --version); 1 a
model had no version within --wait-for-model, or its first load failed; 64 a bad
or unsupported flag or variable; 78 a model or monitoring config file that cannot
be served (file, line and field on stderr).
"""


def markdown_table() -> str:
    """docs/tf-serving.md's flag table (tests/unit/serving/config/test_help.py keeps them equal)."""
    rows = ["| Flag | Variable | Default | What it does here |", "|---|---|---|---|"]
    for flag in FLAGS:
        spellings = " ".join(f"`{spelling}`" for spelling in flag.spellings)
        default = flag.default if flag.kind in ("serve", "plan") and flag.default else ""
        env = f"`{flag.env}`" if flag.env else ""
        what = flag.what_it_does().replace("|", "\\|")
        rows.append(f"| {spellings} | {env} | {default} | {what} |")
    return "\n".join(rows)


def version_text() -> str:
    """--version, in TF Serving's two lines."""
    from tf_entrypoint import __version__  # noqa: PLC0415

    tensorflow = "not installed"
    for distribution in ("tensorflow", "tensorflow-cpu"):
        try:
            tensorflow = metadata.version(distribution)
            break
        except metadata.PackageNotFoundError:
            continue
    return (
        f"TensorFlow ModelServer: tf-entrypoint {__version__}\nTensorFlow Library: {tensorflow}\n"
    )
