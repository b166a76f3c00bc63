"""Helpers of the model manager's tests: Fake (a servable answering x + version),
a recording Loader, ModelSpecs, and readings of a Manager's states and metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.unit.serving.fake_servable import FakeServable
from tf_entrypoint.serving.codec import metadata
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.manager import Manager
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.model_specs import (
    Latest,
    ModelSpec,
    Policy,
    ServingConfig,
)

F32 = p.TensorSpec("DT_FLOAT", (-1,))


class Fake(FakeServable):
    """A servable that answers x + version."""

    signatures: Mapping[str, p.Signature] = {"serving_default": p.Signature({"x": F32}, {"y": F32})}
    signature_def_map = b""

    def __init__(self, version: int, warmup_records: int = 0) -> None:
        self.version = version
        self.warmup_records = warmup_records

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        x = inputs["x"]
        return {"y": p.Tensor("DT_FLOAT", x.shape, [v + self.version for v in x.values])}


class Loader:
    """Records loads; fails for the directories in `broken`."""

    def __init__(self, warmup_records: int = 0) -> None:
        self.loaded: list[tuple[str, int]] = []
        self.broken: set[Path] = set()
        self.warmup_records = warmup_records

    def __call__(self, directory: Path, version: int) -> Fake:
        self.loaded.append((directory.parent.name, version))
        if directory in self.broken:
            raise OSError(f"{directory}/variables is incomplete")
        return Fake(version, self.warmup_records)


def export(base: Path, version: int, name: str = "m") -> Path:
    directory = base / name / str(version)
    directory.mkdir(parents=True)
    (directory / "saved_model.pb").write_bytes(b"")
    return directory


LATEST = Latest()


def spec(base: Path, policy: Policy = LATEST, name: str = "m", **labels: int) -> ModelSpec:
    return ModelSpec(name, base / name, policy, labels, origin=f"test.config:1 (model {name!r})")


def manager_for(*specs: ModelSpec, loader: Loader | None = None) -> tuple[Manager, Metrics]:
    metrics = Metrics()
    manager = Manager(loader or Loader(), metrics, metadata.rest_answer)
    manager.apply(ServingConfig(specs), initial=True)
    return manager, metrics


def states(manager: Manager, name: str = "m") -> dict[int, str]:
    return {s.version: s.state for s in manager.status(p.Route("status", name))}


def route(kind: p.Kind = "predict", name: str = "m", version: int | None = None) -> p.Route:
    return p.Route(kind, name, version)


def served(manager: Manager, r: p.Route | None = None) -> int:
    with manager.lease(r or route()) as version:
        return version.number


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
