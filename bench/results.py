"""The one result schema: one JSON file per scenario run, and how the report reads history.

    {
     "schema": 1,
     "scenario": "grpc",                  # bench/scenarios.py's name
     "title": "...", "shows": "...",
     "command": "python -m bench run grpc --quick",   # the exact command that made it
     "quick": true,
     "when": {"started": ISO, "finished": ISO, "seconds": S},
     "machine": {cpu_model, cpus, memory_gib, os, kernel, docker, cgroup},
     "image": {"tag": "tf-entrypoint:cpu", "id": "sha256:..."} or null,
     "quiet": {...} or null,              # the quiet-machine wait (full runs)
     "config": {...},                     # the scenario's config, as run
     "results": {...}                     # what the scenario's measure returned
    }

History: docs/bench/ holds the latest result of each scenario (NAME.json);
files written before this schema (no "schema" key: the scenario's own dict
with "machine" and "config" at its top level) stay as they were, and `load`
reads both, so no recorded figure is lost. docs/bench/cost-before.json is
the cost scenario's run before issue 24's changes (legacy form).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

SCHEMA = 1
KEYS = ("schema", "scenario", "title", "shows", "command", "quick", "when", "machine", "image",
        "quiet", "config", "results")  # fmt: skip


def as_json(value: Any) -> Any:
    """A config dataclass (or anything with them inside) as JSON-able data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def document(
    *,
    scenario: Any,
    command: str,
    quick: bool,
    when: dict[str, Any],
    machine: dict[str, Any],
    image: dict[str, str] | None,
    quiet: dict[str, Any] | None,
    config: Any,
    results: dict[str, Any],
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "scenario": scenario.name,
        "title": scenario.title,
        "shows": scenario.shows,
        "command": command,
        "quick": quick,
        "when": when,
        "machine": machine,
        "image": image,
        "quiet": quiet,
        "config": as_json(config),
        "results": results,
    }


def problems(doc: dict[str, Any], scenario: Any) -> list[str]:
    """What is wrong with a result document of `scenario` (empty: nothing): the schema's
    keys and types, every number finite, and the cells it has against those its config
    declares. Never a timing."""
    found: list[str] = []
    if sorted(doc) != sorted(KEYS):
        found.append(f"keys {sorted(doc)} != {sorted(KEYS)}")
        return found
    if doc["schema"] != SCHEMA or doc["scenario"] != scenario.name:
        found.append(f"schema {doc['schema']}, scenario {doc['scenario']}")
    if not doc["command"].startswith(f"python -m bench run {scenario.name}"):
        found.append(f"command {doc['command']!r}")
    for key in ("started", "finished", "seconds"):
        if key not in doc["when"]:
            found.append(f"when has no {key}")
    for key in ("cpu_model", "cpus", "memory_gib", "kernel"):
        if key not in doc["machine"]:
            found.append(f"machine has no {key}")
    if "image" in scenario.needs and not (doc["image"] and doc["image"].get("id")):
        found.append(f"image {doc['image']}")
    found += [f"not finite: {where}" for where in _not_finite(doc["results"], "results")]
    config = _rebuild(scenario, doc["config"])
    expected, have = scenario.cells(config), scenario.found(doc["results"])
    if expected != have:
        found.append(f"cells: missing {expected - have}, unexpected {have - expected}")
    return found


def _rebuild(scenario: Any, raw: dict[str, Any]) -> Any:
    """The scenario's config from its JSON form (lists back to tuples)."""
    kind = type(scenario.config)

    def tuples(value: Any) -> Any:
        return tuple(tuples(v) for v in value) if isinstance(value, list) else value

    return kind(**{k: tuples(v) for k, v in raw.items()})


def _not_finite(value: Any, where: str) -> list[str]:
    if isinstance(value, float):
        return [] if math.isfinite(value) else [where]
    if isinstance(value, dict):
        return [w for k, v in value.items() for w in _not_finite(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [w for i, v in enumerate(value) for w in _not_finite(v, f"{where}[{i}]")]
    return []


def load(path: Path) -> dict[str, Any] | None:
    """A result file in the schema, a legacy one wrapped in it (schema 0), or None."""
    if not path.exists():
        return None
    raw: dict[str, Any] = json.loads(path.read_text())
    if raw.get("schema") == SCHEMA:
        return raw
    machine = raw.get("machine") or {}
    return {
        "schema": 0,  # written before the one schema: the scenario's own dict
        "scenario": path.stem,
        "command": raw.get("command", ""),
        "quick": bool(raw.get("quick", False)),
        "when": {
            "started": raw.get("started") or raw.get("date") or "",
            "finished": raw.get("finished", ""),
        },
        "machine": machine,
        "image": {
            "tag": machine.get("image", raw.get("image", "")),
            "id": machine.get("image_id", ""),
        },
        "quiet": raw.get("quiet"),
        "config": raw.get("config", {}),
        "results": raw,
    }
