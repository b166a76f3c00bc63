"""--profile-dir's rule: a profile's trace is written only under it (core/trace_paths.py).

TF Serving writes REPOSITORY_ROOT/SESSION_ID/HOST.xplane.pb wherever the
client says; here the gRPC port must not be a file-write primitive
(docs/robustness.md), so every way out is refused before a capture starts.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tf_entrypoint.serving.core import trace_paths
from tf_entrypoint.serving.core.errors import Code, ServingError


def _refused(profile_dir: str | None, root: str, run: str = "run", host: str = "h") -> str:
    with pytest.raises(ServingError) as caught:
        trace_paths.trace_folder(profile_dir, root, run, host)
    assert caught.value.code == Code.PERMISSION_DENIED
    return caught.value.message


def test_a_root_inside_the_directory_is_written_there(tmp_path: Path) -> None:
    allowed = trace_paths.normalise_dir(str(tmp_path))
    root = f"{tmp_path}/logs/plugins/profile"
    assert trace_paths.trace_folder(allowed, root, "2026_11_28", "server") == os.path.join(
        allowed, "logs", "plugins", "profile", "2026_11_28"
    )
    # the directory itself, and one whose name has a dot in it, are inside
    assert trace_paths.trace_folder(allowed, str(tmp_path), "run", "h") == f"{allowed}/run"
    assert trace_paths.trace_folder(allowed, f"{tmp_path}/a..b/", "r", "h") == f"{allowed}/a..b/r"


@pytest.mark.parametrize(
    "root",
    [
        "/etc",
        "/tmp",
        "logs/plugins/profile",  # relative: the server's working directory, not the client's
        "",
    ],
)
def test_a_root_outside_is_permission_denied_naming_the_path_and_the_flag(
    tmp_path: Path, root: str
) -> None:
    allowed = trace_paths.normalise_dir(str(tmp_path / "profile"))
    message = _refused(allowed, root)
    assert repr(root) in message
    assert "--profile-dir" in message
    assert allowed in message


def test_a_sibling_with_the_same_prefix_is_outside(tmp_path: Path) -> None:
    allowed = trace_paths.normalise_dir(str(tmp_path / "logs"))
    _refused(allowed, f"{tmp_path}/logs2/plugins/profile")
    _refused(allowed, f"{tmp_path}/log")


def test_dot_dot_climbs_are_resolved(tmp_path: Path) -> None:
    allowed = trace_paths.normalise_dir(str(tmp_path / "profile"))
    _refused(allowed, f"{tmp_path}/profile/../elsewhere")
    _refused(allowed, f"{tmp_path}/profile/logs/../../../../etc")
    inside = trace_paths.trace_folder(allowed, f"{tmp_path}/profile/a/../b", "r", "h")
    assert inside == f"{allowed}/b/r"


def test_a_symlink_out_of_the_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "profile").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "profile" / "logs").symlink_to(tmp_path / "outside")
    (tmp_path / "profile" / "run").symlink_to(tmp_path / "outside")
    (tmp_path / "profile" / "r2").mkdir()
    (tmp_path / "profile" / "r2" / "h.xplane.pb").symlink_to(tmp_path / "outside" / "f")
    allowed = trace_paths.normalise_dir(str(tmp_path / "profile"))
    _refused(allowed, f"{tmp_path}/profile/logs")  # the root
    _refused(allowed, f"{tmp_path}/profile", run="run")  # the session's folder
    _refused(allowed, f"{tmp_path}/profile", run="r2", host="h")  # the file itself


def test_a_symlinked_profile_dir_is_its_target(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    allowed = trace_paths.normalise_dir(str(tmp_path / "link"))
    assert allowed == str((tmp_path / "real").resolve())
    folder = trace_paths.trace_folder(allowed, f"{tmp_path}/link/logs", "r", "h")
    assert folder == f"{allowed}/logs/r"


@pytest.mark.parametrize(
    ("profile_dir", "root", "folder"),
    [
        ("gs://b/logs", "gs://b/logs/plugins/profile", "gs://b/logs/plugins/profile/run"),
        ("gs://b/logs/", "gs://b/logs", "gs://b/logs/run"),
        ("gs://b", "gs://b/any/where", "gs://b/any/where/run"),
        ("s3://b/logs", "s3://b/logs//x/./y/", "s3://b/logs/x/y/run"),
        ("GS://b/logs", "gs://b/logs/a/../c", "gs://b/logs/c/run"),
    ],
)
def test_url_prefixes_inside(profile_dir: str, root: str, folder: str) -> None:
    allowed = trace_paths.normalise_dir(profile_dir)
    assert trace_paths.trace_folder(allowed, root, "run", "h") == folder


@pytest.mark.parametrize(
    ("profile_dir", "root"),
    [
        ("gs://b/logs", "gs://b/logs2"),
        ("gs://b/logs", "gs://b/logs2/plugins/profile"),
        ("gs://b/logs", "gs://b/log"),
        ("gs://b/logs", "gs://b/logs/../secrets"),
        ("gs://b/logs", "gs://other/logs"),
        ("gs://b/logs", "s3://b/logs"),
        ("gs://b/logs", "/logs"),
        ("gs://b/logs", "http://b/logs"),
        ("s3://b", "s3://b2/x"),
    ],
)
def test_url_prefixes_outside(profile_dir: str, root: str) -> None:
    message = _refused(trace_paths.normalise_dir(profile_dir), root)
    assert repr(root) in message


def test_a_local_directory_refuses_urls(tmp_path: Path) -> None:
    _refused(trace_paths.normalise_dir(str(tmp_path)), "gs://b/logs")


def test_without_the_flag_writing_is_refused_saying_how_to_allow_it() -> None:
    message = _refused(None, "/profile/logs/plugins/profile")
    assert "'/profile/logs/plugins/profile'" in message
    assert "--profile-dir=DIR" in message
    assert "logdir inside DIR" in message


@pytest.mark.parametrize(
    ("field", "run", "host"),
    [
        ("session_id", "", "h"),
        ("session_id", ".", "h"),
        ("session_id", "..", "h"),
        ("session_id", "../../etc", "h"),
        ("session_id", "a/b", "h"),
        ("session_id", "a\0b", "h"),
        ("host_name", "run", ""),
        ("host_name", "run", ".."),
        ("host_name", "run", "../../../etc/cron.d/x"),
        ("host_name", "run", "h\0"),
    ],
)
def test_session_id_and_host_name_must_be_plain_names(
    tmp_path: Path, field: str, run: str, host: str
) -> None:
    for allowed in (str(tmp_path), None):  # named whether or not the flag is set
        with pytest.raises(ServingError) as caught:
            trace_paths.trace_folder(allowed, str(tmp_path), run, host)
        assert caught.value.code == Code.INVALID_ARGUMENT
        assert f"ProfileRequest.{field}" in caught.value.message


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("", "expected a directory"),
        ("a\0b", "expected a directory"),
        ("gs://", "names no bucket"),
        ("gs:///x", "names no bucket"),
        ("ftp://b/x", "ftp:// is not supported"),
    ],
)
def test_a_bad_profile_dir_is_refused(value: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        trace_paths.normalise_dir(value)


def test_a_relative_profile_dir_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert trace_paths.normalise_dir("traces/") == str(tmp_path.resolve() / "traces")
