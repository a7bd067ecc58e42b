"""TLS and ACL credentials of every ``boltmq`` client command (produce, consume, admin).

:func:`security_options` adds, beside ``--registry``:

Option          | Environment                   | Meaning
----------------+-------------------------------+-----------------------------------------
--tls-ca        | BOLTMQ_TLS_CA_FILE            | CA bundle: call registries and brokers over TLS
--tls-cert      | BOLTMQ_TLS_CLIENT_CERT_FILE   | client certificate (servers with mutual TLS)
--tls-key       | BOLTMQ_TLS_CLIENT_KEY_FILE    | its private key
--access-key    | BOLTMQ_ACCESS_KEY             | sign broker calls with this ACL account
                |                               | (:mod:`boltmq.kernel.signing`, each call anew)
--secret-key    | BOLTMQ_SECRET_KEY             | its secret (prefer the environment: a flag
                |                               | shows in ``ps`` and shell history)

The environment names are the services' own settings of the same meaning
(``tls_ca_file``, ``access_key``, ...), so a shell inside a broker's pod
needs nothing more. The options do not reach the command's parameters: they
are kept in the click context, and :func:`client_tls`, :func:`credentials`,
:func:`signed_channel` and :func:`sdk_options` read them back, so commands
keep their signatures. Calls are signed for the broker group they go to when
the command knows its name (from the registry, or ``--broker`` beside
``--broker-address``); otherwise for any broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
import grpc

from boltmq.client import new_client_id
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.config import ConfigError
from boltmq.kernel.signing import Credentials, RequestSigner, SigningError
from boltmq.kernel.tls import ClientTLS

F = TypeVar("F", bound=Callable[..., Any])
_META_KEY = "boltmq.security"
_OPTIONS = (
    ("--tls-ca", "security_tls_ca", "BOLTMQ_TLS_CA_FILE", "CA bundle (PEM): use TLS."),
    (
        "--tls-cert",
        "security_tls_cert",
        "BOLTMQ_TLS_CLIENT_CERT_FILE",
        "Client certificate (PEM), for mutual TLS.",
    ),
    (
        "--tls-key",
        "security_tls_key",
        "BOLTMQ_TLS_CLIENT_KEY_FILE",
        "Private key of --tls-cert (PEM).",
    ),
    (
        "--access-key",
        "security_access_key",
        "BOLTMQ_ACCESS_KEY",
        "ACL access key to sign calls with.",
    ),
    (
        "--secret-key",
        "security_secret_key",
        "BOLTMQ_SECRET_KEY",
        "ACL secret key (prefer the BOLTMQ_SECRET_KEY environment variable).",
    ),
)


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value:
        ctx.meta.setdefault(_META_KEY, {})[param.name] = value


def security_options(fn: F) -> F:
    """Add the TLS and credential options to a command (values kept in the context)."""
    for flag, name, env, text in reversed(_OPTIONS):
        fn = click.option(
            flag,
            name,
            envvar=env,
            default=None,
            expose_value=False,
            callback=_remember,
            help=text,
            show_envvar=True,
        )(fn)
    return fn


def _values() -> dict[str, str]:
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(_META_KEY, {})) if ctx is not None else {}


def client_tls() -> ClientTLS | None:
    """TLS of the current command (None: plaintext); a bad file is one clear CLI line."""
    values = _values()
    ca, cert, key = (values.get(f"security_tls_{k}", "") for k in ("ca", "cert", "key"))
    if not (ca or cert or key):
        return None
    try:
        return ClientTLS.from_files(ca, cert, key, prefix="--tls-")
    except ConfigError as exc:
        raise click.ClickException(_flag_names(str(exc))) from None


def _flag_names(text: str) -> str:
    return (
        text.replace("--tls-client_cert_file", "--tls-cert")
        .replace("--tls-client_key_file", "--tls-key")
        .replace("--tls-ca_file", "--tls-ca")
    )


def credentials() -> Credentials | None:
    """The current command's ACL credentials (None: unsigned calls)."""
    values = _values()
    access_key = values.get("security_access_key", "")
    secret_key = values.get("security_secret_key", "")
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise click.ClickException(
            "--access-key and --secret-key (or BOLTMQ_ACCESS_KEY and "
            "BOLTMQ_SECRET_KEY) must be given together"
        )
    try:
        return Credentials(access_key, secret_key)
    except SigningError as exc:
        raise click.ClickException(str(exc)) from None


def sdk_options() -> dict[str, Any]:
    """``tls`` and ``credentials`` keyword arguments for a Producer or consumer."""
    return {"tls": client_tls(), "credentials": credentials()}


def signed_channel(address: str, target: str = "") -> grpc.Channel:
    """A blocking channel for a CLI call: TLS when asked, every call signed when asked, for
    the broker group named ``target`` (empty: any broker; :mod:`boltmq.kernel.signing`)."""
    channel = sync_channel(address, client_tls())
    signing = credentials()
    if signing is None:
        return channel
    return grpc.intercept_channel(channel, RequestSigner(signing, new_client_id(), target))
