"""Which models and versions are wanted: the specs, their version policies and labels.

A :class:`ServingConfig` is what the operator asked for, whatever it came
from (``--model_name``/``--model_base_path``, TF Serving's model config file,
a ReloadConfigRequest: ``config/model_config.py`` reads those). The manager
(``manager.py``) asks :func:`aspired_versions` which of the versions on disk a
model's policy wants served (README: "Model versions: policies, swaps, labels").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Latest:
    """Serve the `num_versions` highest versions on disk (TF Serving's default: 1)."""

    num_versions: int = 1


@dataclass(frozen=True)
class All:
    """Serve every version on disk."""


@dataclass(frozen=True)
class Specific:
    """Serve exactly these versions (once they are on disk)."""

    versions: tuple[int, ...]


Policy = Latest | All | Specific


def describe_policy(policy: Policy) -> str:
    if isinstance(policy, Latest):
        return f"latest {policy.num_versions}"
    if isinstance(policy, All):
        return "all"
    return "specific " + ",".join(str(v) for v in policy.versions)


def aspired_versions(policy: Policy, on_disk: Sequence[int]) -> frozenset[int]:
    """The versions `policy` wants served, given the versions on disk."""
    if isinstance(policy, Latest):
        return frozenset(sorted(on_disk)[-policy.num_versions :])
    if isinstance(policy, All):
        return frozenset(on_disk)
    return frozenset(policy.versions) & frozenset(on_disk)


@dataclass(frozen=True)
class StoreURL:
    """A model path in object storage: `s3://bucket/models/resnet` (`core/object_store.py`).

    Used where a local model path is a :class:`~pathlib.Path`: joined with
    ``/``, printed as the URL, `.name` its last part.
    """

    scheme: str
    bucket: str
    #: The key prefix, without leading or trailing "/" ("" for the bucket's root).
    key: str = ""

    def __truediv__(self, name: str) -> StoreURL:
        return StoreURL(self.scheme, self.bucket, f"{self.key}/{name}" if self.key else name)

    def __str__(self) -> str:
        return (
            f"{self.scheme}://{self.bucket}/{self.key}"
            if self.key
            else f"{self.scheme}://{self.bucket}"
        )

    @property
    def name(self) -> str:
        return self.key.rpartition("/")[2] or self.bucket


#: Where a model's versions are: a local directory or an object store prefix.
ModelPath = Path | StoreURL


@dataclass(frozen=True)
class ModelSpec:
    """One model to serve."""

    name: str
    #: The directory (or object store prefix) holding the model's numbered versions.
    base_path: ModelPath
    policy: Policy = Latest()
    #: Label -> version (TF Serving's version_labels).
    labels: Mapping[str, int] = field(default_factory=dict)
    #: Where it was configured, for messages: "FILE:LINE" or "--model-name".
    origin: str = "command line"


@dataclass(frozen=True)
class ServingConfig:
    models: tuple[ModelSpec, ...]
    #: The config file it was read from, or None for the command-line model.
    path: Path | None = None

    def names(self) -> list[str]:
        return [m.name for m in self.models]
