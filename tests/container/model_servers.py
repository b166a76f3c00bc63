"""/usr/bin/tensorflow_model_server as TF Serving's own end-to-end test starts it.

TF Serving's harness (test_util's RunServer) starts every server with
HARNESS's flags; `model_server(...)` is the ServerSpec (harness/servers.py)
of the image's tensorflow_model_server with them, and `model_config(...)`
the text of a ModelServerConfig as TF Serving's tests write it (a file in
the server's /models, or the body of a ReloadConfigRequest).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.servers import MODEL_SERVER, ModelSource, ServerSpec

#: TF Serving's harness (test_util's RunServer) starts every server with these.
HARNESS = ("--port=8500", "--rest_api_port=8501", "--rest_api_timeout_in_ms=5000")
#: Where model_server's `config` is written (in the server's /models).
CONFIG = "/models/models.config"


def model_config(models: Mapping[str, str], *, file: bool = True) -> str:
    """A ModelServerConfig naming each model -> base path (model_platform included),
    as TF Serving's tests write it to a file, or (`file` False) as the text of a
    ReloadConfigRequest."""
    if not file:
        entries = " ".join(
            f'config {{ name: "{model}" base_path: "{path}" model_platform: "tensorflow" }}'
            for model, path in models.items()
        )
        return f"model_config_list {{ {entries} }}"
    lines = ",\n".join(
        f'  config: {{ name: "{model}", base_path: "{path}", model_platform: "tensorflow" }}'
        for model, path in models.items()
    )
    return f"model_config_list: {{\n{lines}\n}}\n"


def write_config(folder: Path, models: Mapping[str, str], name: str = "models.config") -> None:
    """model_config(models) as folder/name, replaced in one rename so that a polling
    server never reads half a file."""
    staged = folder / f".{name}.new"
    staged.write_text(model_config(models))
    os.replace(staged, folder / name)


def model_server(
    *flags: str,
    models: Mapping[str, ModelSource] | None = None,
    config: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
    **more: Any,
) -> ServerSpec:
    """tensorflow_model_server HARNESS FLAGS (the image's binary, its ENTRYPOINT
    replaced) on the library `models` (/models/NAME -> library source) and `files`
    (/models/NAME -> text); with `config` (model -> base path) also
    --model_config_file=CONFIG naming them."""
    written = dict(files or {})
    if config is not None:
        flags = (f"--model_config_file={CONFIG}", *flags)
        written[Path(CONFIG).name] = model_config(config)
    return ServerSpec(
        args=(*HARNESS, *flags),
        entrypoint=(MODEL_SERVER,),
        models=tuple(sorted((models or {}).items())),
        files=tuple(sorted(written.items())),
        **more,
    )
