"""TLS and ACL credentials of a ``boltmq`` read or write (the SDK's own objects).

Option        | Meaning
--------------+---------------------------------------------------------------------
tls.caFile    | PEM CA bundle the servers' certificates chain to; turns TLS on for
              | every call (registry and brokers)
tls.certFile  | PEM client certificate, for servers that ask for one (mutual TLS);
              | needs tls.keyFile and tls.caFile
tls.keyFile   | its unencrypted PEM private key; needs tls.certFile
accessKey     | ACL account every broker call is signed with (its method, its body and a
              | fresh nonce: :mod:`boltmq.kernel.signing`); needs secretKey
secretKey     | its secret; never shown in a repr, an error or a log line

The files are read and checked on the driver while the query is planned, by
:mod:`boltmq.kernel.tls` (the readers every BoltMQ client uses), and their bytes travel
to the tasks inside the pickled reader or writer as a
:class:`~boltmq.kernel.tls.ClientTLS`: executors need no copy of the files.
Reading the paths on each executor (the Kafka connector's way) was rejected:
a missing file would only show when a task starts, once per executor. The
credentials are a :class:`~boltmq.kernel.signing.Credentials`, whose repr hides the
secret; each task's ``ClientInstance`` signs its calls with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from boltmq.client import ClientInstance
from boltmq.kernel.config import ConfigError
from boltmq.kernel.signing import Credentials, SigningError
from boltmq.kernel.tls import ClientTLS, read_certificates, read_private_key
from boltmq.spark.errors import OptionError

CA_FILE: Final = "tls.caFile"
CERT_FILE: Final = "tls.certFile"
KEY_FILE: Final = "tls.keyFile"
ACCESS_KEY: Final = "accessKey"
SECRET_KEY: Final = "secretKey"
OPTIONS: Final = (CA_FILE, CERT_FILE, KEY_FILE, ACCESS_KEY, SECRET_KEY)
"""The options :func:`client_security` takes, in its parameters' order."""


@dataclass(frozen=True)
class ClientSecurity:
    """What every connection of one query presents: TLS (None: plaintext) and credentials
    (None: unsigned calls). Picklable; the repr names the files and the access key only."""

    tls: ClientTLS | None = field(default=None, repr=False)
    """CA, and client certificate and key, as PEM bytes (read on the driver)."""
    credentials: Credentials | None = field(default=None, repr=False)
    """Access key / secret key pair."""
    tls_files: tuple[str, ...] = ()
    """The paths the PEM bytes came from (for the repr and errors)."""

    def __repr__(self) -> str:
        tls = f"tls={list(self.tls_files)}" if self.tls is not None else "tls=off"
        access = self.credentials.access_key if self.credentials is not None else None
        return f"ClientSecurity({tls}, accessKey={access!r})"

    def unreachable_hint(self) -> str:
        """What to check when a server could not be reached: the usual cause is a TLS
        mismatch, which gRPC reports only as UNAVAILABLE ("Socket closed")."""
        if self.tls is None:
            return (
                f" (calls were plaintext: if the cluster serves TLS, set {CA_FILE}, and "
                f"{CERT_FILE} / {KEY_FILE} if it asks for client certificates)"
            )
        if self.tls.cert_chain is None:
            return (
                f" (calls used TLS without a client certificate: if the servers ask for "
                f"one (mutual TLS), set {CERT_FILE} and {KEY_FILE})"
            )
        return f" (calls used TLS: check that {CA_FILE} is the CA that signed the servers')"

    def client(self, registry: str, rpc_timeout_s: float) -> ClientInstance:
        """A client for ``registry`` that uses this TLS and signs with these credentials."""
        return ClientInstance(
            registry, rpc_timeout_s=rpc_timeout_s, tls=self.tls, credentials=self.credentials
        )


def _tls(
    ca: str | None, cert: str | None, key: str | None
) -> tuple[ClientTLS | None, tuple[str, ...]]:
    if (cert is None) != (key is None):
        given, missing = (CERT_FILE, KEY_FILE) if cert is not None else (KEY_FILE, CERT_FILE)
        raise OptionError(
            f"option {given} needs {missing}: a client certificate and its "
            f"private key are given together (mutual TLS)"
        )
    if ca is None:
        if cert is not None:
            raise OptionError(
                f"options {CERT_FILE} and {KEY_FILE} need {CA_FILE}, the CA "
                f"bundle (PEM) the servers' certificates chain to"
            )
        return None, ()
    try:
        tls = ClientTLS(
            read_certificates(f"option {CA_FILE}", ca),
            read_certificates(f"option {CERT_FILE}", cert) if cert else None,
            read_private_key(f"option {KEY_FILE}", key) if key else None,
        )
    except ConfigError as exc:
        raise OptionError(str(exc)) from None
    return tls, tuple(path for path in (ca, cert, key) if path)


def _credentials(access_key: str | None, secret_key: str | None) -> Credentials | None:
    if access_key is None and secret_key is None:
        return None
    if access_key is None or secret_key is None:
        missing = SECRET_KEY if secret_key is None else ACCESS_KEY
        raise OptionError(
            f"options {ACCESS_KEY} and {SECRET_KEY} are given together "
            f"(signed calls to an ACL cluster); {missing} is missing"
        )
    try:
        return Credentials(access_key, secret_key)
    except SigningError as exc:  # the message never holds the secret itself
        raise OptionError(f"options {ACCESS_KEY} / {SECRET_KEY}: {exc}") from None


def client_security(
    ca_file: str | None,
    cert_file: str | None,
    key_file: str | None,
    access_key: str | None,
    secret_key: str | None,
) -> ClientSecurity:
    """Check the values of :data:`OPTIONS` (None: not given) and read the files;
    OptionError naming the option otherwise."""
    tls, files = _tls(ca_file, cert_file, key_file)
    return ClientSecurity(tls, _credentials(access_key, secret_key), files)
