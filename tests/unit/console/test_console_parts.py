"""The console's pieces that need no cluster: time fields, body views, trace ids, rights
text, login throttling, and the command's refusals."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from boltmq.cli.main import main
from boltmq.console.access import _pairs
from boltmq.console.app import parse_local_time
from boltmq.console.calls import ConsoleError
from boltmq.console.messages import Shown, hex_dump, iso_ms
from boltmq.console.sessions import LOGIN_FAILURES, Sessions, TooManyLogins
from boltmq.console.topics import is_system_topic, perm_text


def test_a_form_time_is_utc_unless_it_names_its_zone() -> None:
    assert parse_local_time("2026-01-01T00:00") == 1767225600000
    assert parse_local_time("2026-01-01T00:00:01") == 1767225601000
    assert parse_local_time("2026-01-01T01:00:00+01:00") == 1767225600000
    assert parse_local_time(" 1767225600000 ") == 1767225600000
    for bad in ("", "yesterday", "2026-13-01T00:00", "-5"):
        with pytest.raises(ValueError, match="is not a time"):
            parse_local_time(bad)


def test_the_hex_view_shows_offset_bytes_and_printable_text() -> None:
    dump = hex_dump(b'{"a": 1}\x00\xff' + b"x" * 10)
    lines = dump.splitlines()
    assert lines[0] == '00000000  7b 22 61 22 3a 20 31 7d 00 ff 78 78 78 78 78 78  {"a": 1}..xxxxxx'
    assert lines[1].startswith("00000010  78 78 78 78") and lines[1].endswith("xxxx")
    assert hex_dump(b"") == ""


def _shown(body: bytes, properties: dict[str, str]) -> Shown:
    return Shown(
        "broker-a", "ID", "t", 0, 0, 0, 1767225600000, 0, "h:1", "", [], properties, body
    ).render()


def test_a_message_body_is_text_json_when_it_parses_and_hex() -> None:
    shown = _shown(b'{"b": [1, 2]}', {})
    assert shown.views["text"] == '{"b": [1, 2]}'
    assert shown.views["json"] == '{\n  "b": [\n    1,\n    2\n  ]\n}'
    assert shown.views["hex"].startswith("00000000  7b 22 62")
    binary = _shown(b"\xff\xfe\x00", {})
    assert "json" not in binary.views and binary.views["text"] == "\ufffd\ufffd\x00"
    assert shown.stored == iso_ms(1767225600000) == "2026-01-01T00:00:00.000Z"


def test_the_trace_id_is_read_from_the_traceparent_property() -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    good = _shown(b"", {"traceparent": f"00-{trace}-00f067aa0ba902b7-01"})
    assert good.trace_id == trace
    for bad in ("", "00-short-00f067aa0ba902b7-01", f"00-{trace}", "garbage"):
        assert _shown(b"", {"traceparent": bad}).trace_id == ""


def test_rights_are_name_equals_perm_lines() -> None:
    assert _pairs("orders=pub|sub\n audit = SUB ,billing=DENY", "topic rights") == {
        "orders": "PUB|SUB",
        "audit": "SUB",
        "billing": "DENY",
    }
    assert _pairs("", "topic rights") == {}
    for bad in ("orders", "=SUB", "orders=READ", "orders=PUB SUB"):
        with pytest.raises(ConsoleError, match="topic rights: NAME=PERM"):
            _pairs(bad, "topic rights")


def test_system_topics_and_permissions() -> None:
    assert all(
        is_system_topic(t)
        for t in ("%RETRY%g", "%DLQ%g", "SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRANS_HALF_TOPIC")
    )
    assert not is_system_topic("orders") and not is_system_topic("RETRY")
    assert [perm_text(p) for p in (6, 4, 2, 0)] == ["RW", "R-", "-W", "--"]


def test_failed_logins_are_limited_per_client() -> None:
    sessions = Sessions("127.0.0.1:1", None)
    try:
        for _ in range(LOGIN_FAILURES):
            with pytest.raises(ConsoleError) as refused:
                sessions.login("ab", "short", "10.0.0.1")  # malformed: refused before any call
            assert not isinstance(refused.value, TooManyLogins)
        with pytest.raises(TooManyLogins, match="too many failed logins"):
            sessions.login("ab", "short", "10.0.0.1")
        with pytest.raises(ConsoleError) as other:  # another client is not held back
            sessions.login("ab", "short", "10.0.0.2")
        assert not isinstance(other.value, TooManyLogins)
    finally:
        sessions.close()


def test_the_console_command_refuses_credentials_of_its_own_and_half_https(tmp_path) -> None:
    runner = CliRunner()
    own = runner.invoke(
        main,
        ["console", "--port", "0"],
        env={"BOLTMQ_ACCESS_KEY": "console-admin", "BOLTMQ_SECRET_KEY": "console-secret"},
    )
    assert own.exit_code == 1 and "has no account of its own" in own.output
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    half = runner.invoke(main, ["console", "--port", "0", "--https-cert", str(cert)])
    assert half.exit_code == 1 and "--https-cert and --https-key go together" in half.output
    busy = runner.invoke(main, ["console", "--host", "192.0.2.1", "--port", "0"])
    assert busy.exit_code == 1 and "cannot listen on 192.0.2.1:0" in busy.output
