"""The version matrix: the entrypoint's wheel in TensorFlow images that are not ours.

Each cell is a stand-in for someone else's TensorFlow image
(tests/matrix/tensorflow.Dockerfile: a Python base plus TensorFlow from a
hashed lock in requirements/matrix/), with the README's recipe
docs/own-image/Dockerfile.add-entrypoint applied on top, exactly as a user
would: the wheel `make wheel` builds (here from the working tree's tracked
files), `pip install`, `ENTRYPOINT ["tini", "--", "tf-entrypoint"]`.

Cells (TF_ENTRYPOINT_MATRIX=tf2.12,tf2.21 limits a run to some of them):

| cell          | TensorFlow | Keras | Python | base                   | installed in |
|---------------|------------|-------|--------|------------------------|--------------|
| tf2.12        | 2.12.0     | 2     | 3.11   | bookworm (the images') | /opt/venv    |
| tf2.15        | 2.15.1     | 2     | 3.11   | bookworm               | /opt/venv    |
| tf2.16        | 2.16.2     | 3     | 3.11   | bookworm               | /opt/venv    |
| tf2.21        | 2.21.0     | 3     | 3.11   | bookworm               | /opt/venv    |
| tf2.12-py3.10 | 2.12.0     | 2     | 3.10   | Ubuntu 22.04 (jammy)   | system       |

plus, for the bad-input tests, TensorFlow 2.11.1 on jammy (older than the
range) and the bookworm base with no TensorFlow at all; and, for the model
server on Python 3.10 (test_serving.py), the tf2.12-py3.10 cell with the
server's packages (serve.Dockerfile, tagged :tf2.12-py3.10-serve).

Base images: always the air-gapped ones from scripts/build-base-image
(tf-entrypoint-base:bookworm, which the images' build makes too, and
tf-entrypoint-matrix-base:jammy), built on first use, so the matrix runs the
same with or without a registry (the public python:3.11-slim-bookworm and
ubuntu:22.04 are not used). The Ubuntu archive's keyring comes from its own
ubuntu-keyring package, checked against a pinned SHA-256. Images are tagged
$TF_ENTRYPOINT_MATRIX_REPOSITORY (default tf-entrypoint-matrix):CELL-tf
(TensorFlow alone, the expensive layer the cache keeps) and :CELL (with the
entrypoint).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from harness.docker import Containers

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RECIPES = REPO / "docs" / "own-image"
LOCKS = REPO / "requirements" / "matrix"

BOOKWORM_AIRGAP = "tf-entrypoint-base:bookworm"
JAMMY_AIRGAP = "tf-entrypoint-matrix-base:jammy"
UBUNTU_MIRROR = "http://archive.ubuntu.com/ubuntu"
#: ubuntu-keyring 2021.03.26 (jammy main): the archive keys 790BC7277767219C42C86F933B4FE6ACC0B21F32
#: and F6ECB3762474EDA9D21B7022871920D1991BC93C.
UBUNTU_KEYRING_DEB = "pool/main/u/ubuntu-keyring/ubuntu-keyring_2021.03.26_all.deb"
UBUNTU_KEYRING_SHA256 = "0d0e7ed6b112f5d03eabf3c7eb01ebdacf9c57714b279e90495cfc58c8c4520f"


@dataclass(frozen=True)
class Cell:
    name: str
    tensorflow: str
    python: str
    keras: str
    base: str  # "bookworm" or "jammy"
    install: str  # "venv" or "system"
    lock: str  # file in requirements/matrix; "" for no TensorFlow


CELLS = {
    cell.name: cell
    for cell in (
        Cell("tf2.12", "2.12.0", "3.11", "2", "bookworm", "venv", "tf2.12-py3.11.lock"),
        Cell("tf2.15", "2.15.1", "3.11", "2", "bookworm", "venv", "tf2.15-py3.11.lock"),
        Cell("tf2.16", "2.16.2", "3.11", "3", "bookworm", "venv", "tf2.16-py3.11.lock"),
        Cell("tf2.21", "2.21.0", "3.11", "3", "bookworm", "venv", "tf2.21-py3.11.lock"),
        Cell("tf2.12-py3.10", "2.12.0", "3.10", "2", "jammy", "system", "tf2.12-py3.10.lock"),
    )
}
#: Older than the supported range, and no TensorFlow at all (tests/matrix/test_bad_installs.py).
OLD = Cell("tf2.11-py3.10", "2.11.1", "3.10", "2", "jammy", "system", "tf2.11-py3.10.lock")
NO_TF = Cell("no-tf", "", "3.11", "", "bookworm", "venv", "")


def _chosen_cells() -> list[str]:
    raw = os.environ.get("TF_ENTRYPOINT_MATRIX", "").strip()
    if not raw:
        return list(CELLS)
    chosen = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(CELLS))
    if unknown or not chosen:
        raise pytest.UsageError(
            f"TF_ENTRYPOINT_MATRIX={raw!r}: expected a comma-separated subset of {', '.join(CELLS)}"
        )
    return [name for name in CELLS if name in chosen]


CHOSEN = _chosen_cells()


def repository() -> str:
    return os.environ.get("TF_ENTRYPOINT_MATRIX_REPOSITORY", "").strip() or "tf-entrypoint-matrix"


#: The Ubuntu 22.04 stand-ins (Python 3.10 with TensorFlow 2.12 and 2.11 in the
#: system site-packages: the Rasa-like image, the `pip install --user` copy of
#: the hook, TensorFlow older than the range) need Ubuntu's package archive,
#: which is not among the package sources this project's machines are promised
#: (PyPI, Debian, npm). They run where TF_ENTRYPOINT_MATRIX_UBUNTU=1 (`make
#: matrix` sets it); elsewhere, `make test` and CI included, they are
#: deselected, and the README records their last result with its date. One
#: exception: test_serving.py, the model server on Python 3.10 (the only
#: Python 3.10 there is here), runs in CI too (about 3 minutes cold); it uses
#: none of the fixtures or names below. README: "The matrix in CI".
UBUNTU = os.environ.get("TF_ENTRYPOINT_MATRIX_UBUNTU", "").strip() == "1"
UBUNTU_FIXTURES = frozenset({"two_copies", "rasa_like"})
UBUNTU_TESTS = ("test_tensorflow_older_than_the_range",)


def needs_ubuntu(item: pytest.Item) -> bool:
    if UBUNTU_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    if item.name.startswith(UBUNTU_TESTS):
        return True
    callspec = getattr(item, "callspec", None)
    cell = CELLS.get(str(callspec.params.get("cell"))) if callspec is not None else None
    return cell is not None and cell.base == "jammy"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if HERE in Path(str(item.path)).parents]
    for item in mine:
        item.add_marker(pytest.mark.container)
    if UBUNTU:
        return
    deselected = [item for item in mine if needs_ubuntu(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]


def have_image(tag: str) -> bool:
    found = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False)
    return found.returncode == 0


@contextmanager
def building(tag: str) -> Iterator[None]:
    """Hold the build of `tag` for this process: pytest-xdist workers that need one
    image at once build it once (the second finds the layer cache full)."""
    name = "".join(c if c.isalnum() else "-" for c in tag)
    with (Path(tempfile.gettempdir()) / f"tf-entrypoint-build-{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def docker_build(context: Path, tag: str, dockerfile: str = "Dockerfile", **args: str) -> str:
    """`docker build -q` (legacy builder or BuildKit alike); fails the test with the log."""
    with building(tag):
        return _docker_build(context, tag, dockerfile, **args)


def _docker_build(context: Path, tag: str, dockerfile: str, **args: str) -> str:
    command = ["docker", "build", "-q", "-f", str(context / dockerfile), "-t", tag]
    for key, value in args.items():
        command += ["--build-arg", f"{key}={value}"]
    built = subprocess.run(
        [*command, str(context)], capture_output=True, text=True, check=False, timeout=1800
    )
    if built.returncode != 0:
        pytest.fail(f"docker build of {tag} failed:\n{built.stdout}\n{built.stderr}")
    return tag


def ubuntu_keyring(cache: Path) -> Path:
    """Ubuntu's archive keyring, from its package in the archive, checked by SHA-256."""
    deb = cache / "ubuntu-keyring.deb"
    with urllib.request.urlopen(f"{UBUNTU_MIRROR}/{UBUNTU_KEYRING_DEB}", timeout=120) as answer:  # noqa: S310 - a fixed http URL, checked below
        deb.write_bytes(answer.read())
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    if digest != UBUNTU_KEYRING_SHA256:
        pytest.fail(f"{UBUNTU_KEYRING_DEB}: SHA-256 {digest}, expected {UBUNTU_KEYRING_SHA256}")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(cache / "keyring")], check=True)
    return cache / "keyring" / "usr" / "share" / "keyrings" / "ubuntu-archive-keyring.gpg"


def base_image(kind: str) -> str:
    """The air-gapped base of that kind (built on first use).

    Always these, even where python:3.11-slim-bookworm or ubuntu:22.04 could
    be pulled: the matrix then runs the same everywhere, and this is the path
    that is tested.
    """
    airgap = BOOKWORM_AIRGAP if kind == "bookworm" else JAMMY_AIRGAP
    with building(airgap):
        if not have_image(airgap):
            _build_base(kind, airgap)
    return airgap


def _build_base(kind: str, airgap: str) -> None:
    ca = os.environ.get("EXTRA_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    command = [str(REPO / "scripts" / "build-base-image"), "--tag", airgap]
    if ca and Path(ca).is_file():
        command += ["--ca-bundle", ca]
    with tempfile.TemporaryDirectory() as cache:
        if kind == "jammy":
            keyring = ubuntu_keyring(Path(cache))
            command += ["--suite", "jammy", "--mirror", UBUNTU_MIRROR]
            command += ["--components", "main,universe", "--keyring", str(keyring)]
        subprocess.run(command, check=True, timeout=1800)


def tensorflow_image(cell: Cell, tmp: Path) -> str:
    """The stand-in for someone's TensorFlow image (no tf-entrypoint in it)."""
    context = tmp / f"{cell.name}-tf"
    context.mkdir(exist_ok=True)  # a session fixture may be set up again (its param order)
    shutil.copy(HERE / "tensorflow.Dockerfile", context / "Dockerfile")
    lock = (LOCKS / cell.lock).read_text() if cell.lock else "# no TensorFlow\n"
    (context / "tf.lock").write_text(lock)
    return docker_build(
        context,
        f"{repository()}:{cell.name}-tf",
        BASE_IMAGE=base_image(cell.base),
        INSTALL=cell.install,
    )


def recipe_context(tmp: Path, name: str, wheel: Path, *files: Path) -> Path:
    """A build context: the wheel and the given files, as a user's would be."""
    context = tmp / name
    context.mkdir(exist_ok=True)  # a session fixture may be set up again (its param order)
    shutil.copy(wheel, context / wheel.name)
    for path in files:
        shutil.copy(path, context / path.name)
    return context


def with_entrypoint(cell: Cell, tf_image: str, wheel: Path, tmp: Path) -> str:
    """docs/own-image/Dockerfile.add-entrypoint applied to tf_image."""
    context = recipe_context(tmp, cell.name, wheel, RECIPES / "Dockerfile.add-entrypoint")
    return docker_build(
        context, f"{repository()}:{cell.name}", "Dockerfile.add-entrypoint", TF_IMAGE=tf_image
    )


@pytest.fixture(scope="session")
def build_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tf-entrypoint-matrix-") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="session")
def wheel(build_dir: Path) -> Path:
    """The wheel of the tracked files as they are (`scripts/build-wheel --worktree`)."""
    out = build_dir / "dist"
    built = subprocess.run(
        [str(REPO / "scripts" / "build-wheel"), "--worktree", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    return Path(built.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session", params=CHOSEN)
def cell(request: pytest.FixtureRequest) -> Cell:
    return CELLS[str(request.param)]


@pytest.fixture(scope="session")
def cell_image(cell: Cell, wheel: Path, build_dir: Path, docker_client: docker.DockerClient) -> str:
    tmp = build_dir / cell.name
    tmp.mkdir(exist_ok=True)
    return with_entrypoint(cell, tensorflow_image(cell, tmp), wheel, tmp)


@pytest.fixture(scope="session")
def cell_containers(docker_client: docker.DockerClient, cell_image: str) -> Containers:
    return Containers(docker_client, cell_image)


@pytest.fixture(scope="session")
def probe_mount() -> dict[str, dict[str, str]]:
    """volumes= for run(): tests/matrix read-only at /probe (probe.py, rasa_like.py)."""
    for name in ("probe.py", "rasa_like.py"):
        (HERE / name).chmod(0o644)  # the images run as other users
    return {str(HERE): {"bind": "/probe", "mode": "ro"}}
