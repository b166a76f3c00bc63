"""--ssl_config_file: TF Serving's SSLConfig read and checked (no TensorFlow).

The PEMs are made by tests/tls_certs.py with the openssl command; the
container test (tests/container/test_tls.py) serves them to real clients."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tls_certs import Certs, make_certs, quoted, ssl_config_text
from tf_entrypoint.serving import main as server
from tf_entrypoint.serving.config import PlannedCpus, parse_config, ssl_config
from tf_entrypoint.serving.config.textproto import ConfigError


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ssl.config"
    path.write_text(text)
    return path


def test_the_message_is_tf_servings() -> None:
    """tensorflow_serving/config/ssl_config.proto: package, names, numbers and types."""
    descriptor = ssl_config._message_class().DESCRIPTOR
    fields = {(f.name, f.number, f.type) for f in descriptor.fields}
    string, boolean = 9, 8  # FieldDescriptor.TYPE_STRING, TYPE_BOOL
    assert descriptor.full_name == "tensorflow.serving.SSLConfig"
    assert fields == {
        ("server_key", 1, string),
        ("server_cert", 2, string),
        ("custom_ca", 3, string),
        ("client_verify", 4, boolean),
    }


def test_a_good_file(tmp_path: Path, certs: Certs) -> None:
    path = write(tmp_path, ssl_config_text(certs, client_verify=True))
    tls = ssl_config.read_ssl_config(path)
    assert tls.server_key == certs.server_key.encode()
    assert tls.server_cert == certs.server_cert.encode()
    assert tls.custom_ca == certs.ca.encode()
    assert tls.client_verify is True


def test_without_custom_ca_or_client_verify(tmp_path: Path, certs: Certs) -> None:
    path = write(tmp_path, ssl_config_text(certs, custom_ca=False))
    tls = ssl_config.read_ssl_config(path)
    assert (tls.custom_ca, tls.client_verify) == (None, False)


def test_adjacent_strings_are_one_pem(tmp_path: Path, certs: Certs) -> None:
    """Text format joins adjacent literals: a PEM may be written one line per line."""
    lines = "\n".join(quoted(line + "\n") for line in certs.server_cert.splitlines())
    text = f"server_key: {quoted(certs.server_key)}\nserver_cert:\n{lines}\n"
    tls = ssl_config.read_ssl_config(write(tmp_path, text))
    assert tls.server_cert == certs.server_cert.encode()


def test_a_missing_cert_is_named(tmp_path: Path, certs: Certs) -> None:
    path = write(tmp_path, f"server_key: {quoted(certs.server_key)}\n")
    with pytest.raises(ConfigError, match=rf"^{path}: server_cert is empty: expected the PEM"):
        ssl_config.read_ssl_config(path)


def test_a_missing_key_is_named(tmp_path: Path, certs: Certs) -> None:
    path = write(tmp_path, f"server_cert: {quoted(certs.server_cert)}\n")
    with pytest.raises(ConfigError, match=rf"^{path}: server_key is empty"):
        ssl_config.read_ssl_config(path)


def test_client_verify_without_custom_ca_is_refused(tmp_path: Path, certs: Certs) -> None:
    path = write(tmp_path, ssl_config_text(certs, client_verify=True, custom_ca=False))
    with pytest.raises(
        ConfigError, match=rf"^{path}:3: client_verify is true but custom_ca is empty"
    ):
        ssl_config.read_ssl_config(path)


def test_a_path_instead_of_pem_is_explained(tmp_path: Path, certs: Certs) -> None:
    text = f'server_key: "/certs/server.key"\nserver_cert: {quoted(certs.server_cert)}\n'
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"^{path}:1: server_key holds no PEM block") as err:
        ssl_config.read_ssl_config(path)
    assert "it looks like a path" in str(err.value)


def test_a_certificate_where_the_key_belongs(tmp_path: Path, certs: Certs) -> None:
    text = f"server_key: {quoted(certs.server_cert)}\nserver_cert: {quoted(certs.server_cert)}\n"
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=r"server_key holds a PEM CERTIFICATE, expected a PRIV"):
        ssl_config.read_ssl_config(path)


def test_a_key_that_is_not_the_certificates(tmp_path: Path, certs: Certs) -> None:
    text = f"server_key: {quoted(certs.client_key)}\nserver_cert: {quoted(certs.server_cert)}\n"
    path = write(tmp_path, text)
    with pytest.raises(
        ConfigError, match=rf"^{path}:1: server_key and server_cert cannot be loaded"
    ) as err:
        ssl_config.read_ssl_config(path)
    assert "MISMATCH" in str(err.value).upper()


def test_an_unreadable_pem_is_named(tmp_path: Path, certs: Certs) -> None:
    broken = certs.server_cert.replace("\n", "\nAAAA", 3)
    text = f"server_key: {quoted(certs.server_key)}\nserver_cert: {quoted(broken)}\n"
    with pytest.raises(ConfigError, match=r"server_key and server_cert cannot be loaded"):
        ssl_config.read_ssl_config(write(tmp_path, text))
    text = ssl_config_text(certs).replace(quoted(certs.ca), quoted(certs.ca[:200]))
    with pytest.raises(ConfigError, match=r":3: custom_ca cannot be loaded as CA certificates"):
        ssl_config.read_ssl_config(write(tmp_path, text))


def test_an_unknown_field_is_refused_in_tf_servings_words(tmp_path: Path) -> None:
    path = write(tmp_path, "server_pem: 'x'\n")
    with pytest.raises(ConfigError, match=r"Error parsing text-format tensorflow\.serving\.SSL"):
        ssl_config.read_ssl_config(path)


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.config: cannot read the SSL config file"):
        ssl_config.read_ssl_config(tmp_path / "missing.config")


def test_the_flag_reads_the_file(tmp_path: Path, certs: Certs) -> None:
    path = write(tmp_path, ssl_config_text(certs))
    conf = parse_config(
        ["--model-base-path", str(tmp_path), "--ssl_config_file", str(path)],
        {},
        PlannedCpus(1, "test"),
    )
    assert conf.ssl is not None
    assert conf.ssl.source == path
    plain = parse_config(["--model-base-path", str(tmp_path)], {}, PlannedCpus(1, "test"))
    assert plain.ssl is None


def test_a_bad_file_exits_78_at_start(
    tmp_path: Path, certs: Certs, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, f"server_key: {quoted(certs.server_key)}\n")
    argv = ["--model-base-path", str(tmp_path), "--ssl_config_file", str(path)]
    assert server.main(argv) == server.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: server_cert is empty")
    assert "Traceback" not in err
