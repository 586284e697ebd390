"""The health endpoint: real HTTP on a loopback port, with fake checks."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from kubegpu.errors import InputError
from kubegpu.probes import ProbeServer, parse_address


def _get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_healthz_and_readyz_answer_200_or_503_with_the_checks_details() -> None:
    ready = {"ok": False}
    server = ProbeServer(
        "127.0.0.1:0",
        healthz=lambda: (True, {"status": "alive"}),
        readyz=lambda: (ready["ok"], {"reason": "waiting"} if not ready["ok"] else {}),
    )
    server.start()
    try:
        assert _get(server.port, "/healthz") == (200, {"ok": True, "status": "alive"})
        assert _get(server.port, "/readyz") == (503, {"ok": False, "reason": "waiting"})
        ready["ok"] = True
        assert _get(server.port, "/readyz") == (200, {"ok": True})
        assert _get(server.port, "/nope")[0] == 404
    finally:
        server.stop()


def test_a_check_that_raises_is_not_ready_and_the_server_keeps_serving() -> None:
    def broken() -> tuple[bool, dict[str, object]]:
        raise RuntimeError("boom")

    server = ProbeServer("127.0.0.1:0", healthz=lambda: (True, {}), readyz=broken)
    server.start()
    try:
        assert _get(server.port, "/readyz") == (503, {"ok": False, "error": "boom"})
        assert _get(server.port, "/healthz")[0] == 200
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("text", "want"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:9", ("127.0.0.1", 9)), ("[::1]:80", ("::1", 80))],
)
def test_addresses(text: str, want: tuple[str, int]) -> None:
    assert parse_address(text) == want


@pytest.mark.parametrize("text", ["8080", "host:", "h:99999", "h:x"])
def test_bad_addresses_name_the_flag(text: str) -> None:
    with pytest.raises(InputError, match="--health-address"):
        parse_address(text)


def test_a_port_in_use_is_an_input_error() -> None:
    first = ProbeServer("127.0.0.1:0", healthz=lambda: (True, {}), readyz=lambda: (True, {}))
    first.start()
    try:
        second = ProbeServer(f"127.0.0.1:{first.port}", healthz=lambda: (True, {}), readyz=lambda: (True, {}))
        with pytest.raises(InputError, match="cannot listen"):
            second.start()
    finally:
        first.stop()
