"""The images under test: their tags, and building them as `make image-FLAVOR` does.

    python -m harness.images [FLAVOR ...]   # build them all at once (make images)

and, once the CPU image is built, the model library (harness/models.py), while
the other flavors still build.

$TF_ENTRYPOINT_TEST_REPOSITORY names another repository for the tags (e.g.
`tf-entrypoint-wip`), so two checkouts can test on one engine without
replacing each other's images; the layer cache is shared all the same.
Building is scripts/build-image, exactly what `make image-FLAVOR` runs; the
builds of several flavors run at once (their downloads overlap), each
logging to build/images/FLAVOR.log, and a failed one is reported with its log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLAVORS = ("cpu", "gpu")
LOGS = REPO / "build" / "images"


def tag(flavor: str) -> str:
    repository = os.environ.get("TF_ENTRYPOINT_TEST_REPOSITORY", "").strip() or "tf-entrypoint"
    return f"{repository}:{flavor}"


def build_image(flavor: str) -> str:
    """Build tf-entrypoint:FLAVOR the way `make image-FLAVOR` does; return the tag.

    With $TF_ENTRYPOINT_IMAGES_BUILT=1 (`make test` sets it after `make images`)
    the image must exist already and is not built again: each pytest worker would
    otherwise go through the build (all cache hits) once more.
    """
    if os.environ.get("TF_ENTRYPOINT_IMAGES_BUILT") == "1":
        found = subprocess.run(
            ["docker", "image", "inspect", tag(flavor)], capture_output=True, check=False
        )
        if found.returncode != 0:
            raise LookupError(f"{tag(flavor)} does not exist: run `make images` first")
        return tag(flavor)
    subprocess.run(
        [str(REPO / "scripts" / "build-image"), flavor],
        cwd=REPO,
        check=True,
        env={**os.environ, "TAG": tag(flavor)},
    )
    return tag(flavor)


def _build_logged(flavor: str) -> tuple[str, int, float]:
    LOGS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with (LOGS / f"{flavor}.log").open("w") as log:
        done = subprocess.run(
            [str(REPO / "scripts" / "build-image"), flavor],
            cwd=REPO,
            env={**os.environ, "TAG": tag(flavor)},
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    return flavor, done.returncode, time.monotonic() - started


def _build_then_export(flavor: str) -> tuple[str, int, float]:
    """Build `flavor`; the CPU image then exports the model library (harness/models.py) while
    the other flavors still build, so the container tier finds it made."""
    built = _build_logged(flavor)
    if flavor == "cpu" and built[1] == 0:
        from harness.models import library  # noqa: PLC0415  # only once the image exists

        started = time.monotonic()
        print(f"images: the model library is {library(tag(flavor)).root}", file=sys.stderr)
        print(f"images: model library ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return built


def build_all(flavors: tuple[str, ...] = FLAVORS) -> int:
    """Build every flavor at once (and the model library after the CPU image); 0 when all
    were built."""
    with ThreadPoolExecutor(len(flavors)) as pool:
        results = list(pool.map(_build_then_export, flavors))
    failed = 0
    for flavor, code, seconds in results:
        state = "built" if code == 0 else f"FAILED (exit {code})"
        print(f"images: {tag(flavor)} {state} in {seconds:.0f} s", file=sys.stderr)
        if code != 0:
            failed += 1
            print((LOGS / f"{flavor}.log").read_text()[-4000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    chosen = tuple(sys.argv[1:]) or FLAVORS
    unknown = sorted(set(chosen) - set(FLAVORS))
    if unknown:
        sys.exit(f"usage: python -m harness.images [{'|'.join(FLAVORS)} ...]; unknown: {unknown}")
    sys.exit(build_all(chosen))
