"""The internal CA and the application CA of a port must be two CAs."""

from __future__ import annotations

from pathlib import Path

import pytest

from boltmq.cli.dev import certificates as dev_certificates
from boltmq.kernel.config import ConfigError, ServerSettings
from boltmq.kernel.tls import server_tls, shared_keys


def test_dev_certificates_come_from_two_cas(tmp_path: Path) -> None:
    files = dev_certificates.generate(tmp_path)
    internal, application = files.ca_file.read_bytes(), files.app_ca_file.read_bytes()
    assert not shared_keys(internal, application)
    assert shared_keys(internal, application + internal)  # found inside a bundle


def test_a_port_whose_internal_ca_admits_applications_is_refused(tmp_path: Path) -> None:
    files = dev_certificates.generate(tmp_path)
    cert, key = files.component_files("store", "broker-a")
    common = {"tls_cert_file": str(cert), "tls_key_file": str(key)}
    separate = ServerSettings(
        **common,
        tls_client_ca_file=str(files.app_ca_file),
        tls_internal_ca_file=str(files.ca_file),
    )
    assert server_tls(separate) is not None
    shared = ServerSettings(
        **common, tls_client_ca_file=str(files.ca_file), tls_internal_ca_file=str(files.ca_file)
    )
    with pytest.raises(ConfigError, match="must issue component certificates only"):
        server_tls(shared)
