"""Helpers of the serving tests: HalfPlusTwo (a pure-Python model) and a REST app serving it.

config() parses the server's flags over a model base path, export() writes a
version directory, make_app() builds the app as main does, serving() yields a
ready client."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from starlette.testclient import TestClient

from tests.unit.serving import example_protos
from tests.unit.serving.fake_servable import FakeServable
from tf_entrypoint.serving.config import PlannedCpus, ServeConfig, parse_config
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import invalid_argument
from tf_entrypoint.serving.core.servable import Loader, Servable
from tf_entrypoint.serving.main import build_core
from tf_entrypoint.serving.rest.app import create_app
from tf_entrypoint.serving.rest.asgi import RestApp

F32 = p.TensorSpec("DT_FLOAT", (-1,))
STR = p.TensorSpec("DT_STRING", (-1,))
F32_2D = p.TensorSpec("DT_FLOAT", (-1, 2))
STR_2D = p.TensorSpec("DT_STRING", (-1, 2))


def make_app(
    conf: ServeConfig,
    loader: Loader | None = None,
    on_fatal: Callable[[str], None] = lambda message: None,
) -> RestApp:
    """The REST app over its own serving core, as main builds them (the app owns the core)."""
    return create_app(build_core(conf, loader=loader, on_fatal=on_fatal), conf)


class HalfPlusTwo(FakeServable):
    """y = 0.5 x + 2, like the demo's SavedModel."""

    version = 1
    signatures: Mapping[str, p.Signature] = {
        "serving_default": p.Signature({"x": F32}, {"y": F32}),
        "two_inputs": p.Signature({"x": F32, "scale": F32}, {"y": F32, "scaled": F32}),
        "broken": p.Signature({"x": F32}, {"y": F32}),
        "classify": p.Signature(
            {"inputs": STR}, {"classes": STR_2D, "scores": F32_2D}, p.CLASSIFY_METHOD
        ),
        "regress": p.Signature({"inputs": STR}, {"outputs": F32}, p.REGRESS_METHOD),
    }

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        if name == "broken":
            raise invalid_argument("the model says no")
        if name == "classify":
            # Per example ("half", x / 2) and ("plus_two", x + 2), from float feature "x".
            xs = [self._x(example) for example in inputs["inputs"].values]
            shape = (len(xs), 2)
            return {
                "classes": p.Tensor("DT_STRING", shape, [b"half", b"plus_two"] * len(xs)),
                "scores": p.Tensor("DT_FLOAT", shape, [v for x in xs for v in (0.5 * x, x + 2)]),
            }
        if name == "regress":  # 0.5 x + 2 per example
            values = [0.5 * self._x(example) + 2 for example in inputs["inputs"].values]
            return {"outputs": p.Tensor("DT_FLOAT", (len(values),), values)}
        x = inputs["x"]
        y = p.Tensor("DT_FLOAT", x.shape, [0.5 * v + 2 for v in x.values])
        if name == "two_inputs":
            scale = inputs["scale"].values
            scaled = [a * b for a, b in zip(y.values, scale, strict=True)]
            return {"y": y, "scaled": p.Tensor("DT_FLOAT", x.shape, scaled)}
        return {"y": y}

    @staticmethod
    def _x(serialized: bytes) -> float:
        kind, values = example_protos.features(serialized).get("x", (None, []))
        if kind != "float_list" or len(values) != 1:
            raise invalid_argument(
                "Feature: x (data type: float) is required but could not be found."
            )
        x: float = values[0]
        return x


def config(tmp_path: Path, *args: str) -> ServeConfig:
    """A server's config for a budget of 2 CPUs, as one process unless `args` say
    --frontends (the processes' own tests do)."""
    one = () if "--frontends" in args else ("--frontends", "1")
    return parse_config(
        ["--model-base-path", str(tmp_path), "--wait-for-model", "5", *one, *args],
        {},
        budget=PlannedCpus(2, "test"),
    )


def export(tmp_path: Path, version: int = 1, name: str = "model") -> None:
    directory = tmp_path / name / str(version)
    directory.mkdir(parents=True)
    (directory / "saved_model.pb").write_bytes(b"")


def wait_ready(client: TestClient, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get("/readyz").status_code == 200:
            return
        time.sleep(0.01)
    raise AssertionError(client.get("/readyz").json())


@contextlib.contextmanager
def serving(tmp_path: Path, servable: Servable, *flags: str) -> Iterator[TestClient]:
    """A client of the app serving `servable` as version 1 of `model`, ready."""
    export(tmp_path)
    app = make_app(config(tmp_path, *flags), loader=lambda directory, version: servable)
    with TestClient(app) as test_client:
        wait_ready(test_client)
        yield test_client
