"""The model library: every model the tests and benchmarks use, exported once.

One container run of the CPU image executes every export script of EXPORTS
(in parallel, one process per script) into a fresh folder; the folder is kept
under the cache root, named by a hash of the export scripts and this module
plus the id of the image's TensorFlow layer, so a later run (or another
pytest worker) that finds it exports nothing. The cache keeps the newest
KEEP libraries and removes older ones not used in the last hour.

A test never serves the cached folder itself: `ModelLibrary.copy` (or
`tree`) copies what it needs into its own directory, so a test may rename,
delete or add versions as it likes.

The cache root is $TF_ENTRYPOINT_MODEL_CACHE, else ~/.cache/tf-entrypoint/models.
Adding a model: add an Export below (its script writes under the folder it is
given; the file must be listed in SOURCES if the script imports a sibling).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEEP = 3
#: Seconds since its last use during which a library is never pruned.
IN_USE = 3600.0
EXPORT_TIMEOUT = 900.0
COMPLETE = ".complete"


@dataclass(frozen=True)
class Export:
    """One export: `python SCRIPT ARGS...` in the image, where "{out}" in ARGS is
    this export's folder in the library (library/NAME) and "{root}" the library's;
    `after`: once every other export is done (it reads their folders)."""

    name: str
    script: str  # relative to the repository root
    args: tuple[str, ...] = ("{out}",)
    after: bool = False


_MAKE = "tests/container/make_models.py"

#: Every model of the tests and benchmarks. Folder -> what is in it.
EXPORTS: tuple[Export, ...] = (
    # y = x + V, versions 1-3 (plus/V); the warm-up and failure variants.
    Export("plus", _MAKE, ("{out}", "1", "2", "3")),
    Export("staged", _MAKE, ("{out}", "4", "--staged")),
    Export("warm", _MAKE, ("{out}", "1", "--warmup", "5")),
    Export("badwarm", _MAKE, ("{out}", "1", "--warmup", "1", "--bad-warmup")),
    Export("huge_warmup", _MAKE, ("{out}", "1", "--warmup", "1", "--huge-warmup")),
    Export("counting", _MAKE, ("{out}", "1", "--warmup", "3", "--counting")),
    # TF1-style classify/regress exports (examples/V), with and without warm-up.
    Export("examples", _MAKE, ("{out}", "1", "--kind", "classify_regress")),
    Export("examples_warm", _MAKE, ("{out}", "1", "--kind", "classify_regress", "--warmup", "2")),
    # Folders of several models each (the scripts' docstrings say what).
    Export("grpc", "tests/container/make_grpc_models.py"),
    Export("batch", "tests/container/make_batch_models.py"),
    Export("dtype", "tests/container/make_dtype_models.py"),
    Export("gated", "tests/container/make_gated_models.py"),
    Export("loading", "tests/container/make_loading_models.py"),
    Export("tfserving", "tests/container/make_tfserving_models.py"),
    Export("v2", "tests/container/make_v2_models.py"),
    # The benchmarks' models.
    Export(
        "half_plus_two",
        "demo/train.py",
        ("--model-base-path", "{out}", "--model-name", "half_plus_two"),
    ),
    Export("mlp", "bench/workload.py", ("--export", "{out}/1")),
    # bench/session_probe.py's half_plus_two (a tf.Module), MLP and CNN (session/MODEL/1).
    Export("session", "bench/session_probe.py", ("export", "{out}")),
    # The soak's versions of plus and cr (staging/), slow and extra (models/), poison/:
    # enough versions for the default ten-minute soak (bench/soak.py says how many it needs).
    Export("soak", "bench/soak_models.py", ("{out}", "--versions", "100")),
    # The benchmark models' answers to the load client's requests (their answer.json),
    # so that the client checks answers without TensorFlow (bench/answers.py).
    Export("answers", "bench/answers.py", ("{root}",), after=True),
)

#: Files an export script reads besides itself (siblings it imports).
SOURCES: tuple[str, ...] = (
    "bench/bodies.py",
    "tests/container/gates.py",
    "tests/container/grpc_dtypes.py",
    "harness/export_all.py",
    "harness/stats.py",
)


def cache_root() -> Path:
    raw = os.environ.get("TF_ENTRYPOINT_MODEL_CACHE", "").strip()
    return Path(raw) if raw else Path.home() / ".cache" / "tf-entrypoint" / "models"


def recipe_hash(exports: Sequence[Export] = EXPORTS) -> str:
    """A hash of every file the exports run and of their arguments."""
    digest = hashlib.sha256()
    digest.update(json.dumps([[e.name, e.script, list(e.args), e.after] for e in exports]).encode())
    for name in sorted({e.script for e in exports} | set(SOURCES)):
        digest.update(name.encode() + b"\0" + (REPO / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def tensorflow_layer(image: str) -> str:
    """The id of the image's TensorFlow stack: its `-deps` stage when tagged (so an
    entrypoint-only change keeps the library), else the image itself."""
    for candidate in (f"{image}-deps", image):
        found = subprocess.run(
            ["docker", "image", "inspect", "-f", "{{.Id}}", candidate],
            capture_output=True,
            text=True,
            check=False,
        )
        if found.returncode == 0:
            return found.stdout.strip().removeprefix("sha256:")[:16]
    raise LookupError(f"image {image} does not exist: build it first (make images)")


@dataclass(frozen=True)
class ModelLibrary:
    """An exported, read-only library: root/NAME for each Export."""

    root: Path

    def path(self, *parts: str) -> Path:
        found = self.root.joinpath(*parts)
        if not found.exists():
            raise LookupError(f"the model library has no {'/'.join(parts)} (see harness/models.py)")
        return found

    def copy(self, source: str, target: Path, versions: Iterable[int | str] | None = None) -> Path:
        """Copy library folder `source` (e.g. "plus" or "grpc/gated") to `target`,
        only `versions` of it when given; ownership and modes kept. Returns target."""
        origin = self.path(*source.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        if versions is None:
            _copy_tree(origin, target)
        else:
            target.mkdir(exist_ok=True)
            for version in versions:
                _copy_tree(origin / str(version), target / str(version))
        return target

    def tree(self, root: Path, models: Mapping[str, str | tuple[str, Iterable[int | str]]]) -> Path:
        """root/MODEL for each MODEL -> source (or (source, versions)); root writable by the
        images' user (a server may write beside them). Returns root."""
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o777)
        for model, spec in models.items():
            source, versions = (spec, None) if isinstance(spec, str) else spec
            self.copy(source, root / model, versions)
        return root


def _copy_tree(source: Path, target: Path) -> None:
    # cp -a keeps the exporting user's ownership when run as root (as the exports
    # are the image user's, a server may delete or rename them as in a real volume).
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)


def library(
    image: str, *, exports: Sequence[Export] = EXPORTS, root: Path | None = None
) -> ModelLibrary:
    """The library for `image`, exported now unless the cache has it."""
    cache = root or cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    key = f"{recipe_hash(exports)}-{tensorflow_layer(image)}"
    folder = cache / key
    with (cache / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one exporter; other workers wait, then reuse
        if not (folder / COMPLETE).exists():
            _export(image, exports, folder)
        os.utime(folder)
        _prune(cache, keep=KEEP)
    return ModelLibrary(folder)


def _export(image: str, exports: Sequence[Export], folder: Path) -> None:
    work = folder.with_name(folder.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    work.mkdir(parents=True)
    work.chmod(0o777)
    plan = [
        {"name": e.name, "script": e.script, "args": list(e.args), "after": e.after}
        for e in exports
    ]
    started = time.monotonic()
    ran = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--label",
            "tf-entrypoint.test=1",
            "-e",
            "TF_CPP_MIN_LOG_LEVEL=2",
            "-e",
            "HOME=/tmp",
            "-v",
            f"{REPO}:/repo:ro",
            "-v",
            f"{work}:/out",
            image,
            "python",
            "/repo/harness/export_all.py",
            "/repo",
            "/out",
            json.dumps(plan),
        ],
        capture_output=True,
        text=True,
        timeout=EXPORT_TIMEOUT,
        check=False,
    )
    if ran.returncode != 0:
        raise RuntimeError(f"exporting the model library failed:\n{ran.stdout}\n{ran.stderr}")
    (work / COMPLETE).write_text(
        json.dumps({"image": image, "seconds": round(time.monotonic() - started, 1)}) + "\n"
    )
    work.rename(folder)


def _prune(cache: Path, keep: int) -> None:
    libraries = sorted(
        (p for p in cache.iterdir() if p.is_dir() and (p / COMPLETE).exists()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    now = time.time()
    for stale in libraries[keep:]:
        # A library used within the hour may still be copied from by another session.
        if now - stale.stat().st_mtime > IN_USE:
            shutil.rmtree(stale, ignore_errors=True)
    for partial in cache.glob("*.partial"):
        shutil.rmtree(partial, ignore_errors=True)


if __name__ == "__main__":  # python -m harness.models IMAGE: export (or find) the library
    import sys

    print(library(sys.argv[1] if len(sys.argv) > 1 else "tf-entrypoint:cpu").root)
