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
class ModelSpec:
    """One model to serve."""

    name: str
    #: The directory holding the model's numbered version directories.
    base_path: Path
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
