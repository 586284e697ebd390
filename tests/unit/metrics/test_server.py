"""The /metrics endpoint: real HTTP on a loopback port; a failing collection is a 500, not a dead server."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from kubegpu.errors import InputError
from kubegpu.metrics.server import MetricsServer


def _get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_metrics_answers_the_body_and_a_failing_collection_answers_500_then_recovers() -> None:
    broken = {"now": False}

    def body() -> bytes:
        if broken["now"]:
            raise RuntimeError("sampler exploded")
        return b"up 1\n"

    server = MetricsServer("127.0.0.1:0", body)
    server.start()
    try:
        assert _get(server.port, "/metrics") == (200, "text/plain; version=0.0.4; charset=utf-8", "up 1\n")
        broken["now"] = True
        status, _, text = _get(server.port, "/metrics")
        assert status == 500 and "sampler exploded" in text
        broken["now"] = False
        assert _get(server.port, "/metrics?x=1")[0] == 200
        assert _get(server.port, "/other")[0] == 404
    finally:
        server.stop()


def test_a_bad_or_busy_address_is_one_clear_error_naming_the_flag() -> None:
    with pytest.raises(InputError, match="--metrics-address 'nonsense'"):
        MetricsServer("nonsense", lambda: b"")
    first = MetricsServer("127.0.0.1:0", lambda: b"")
    first.start()
    try:
        second = MetricsServer(f"127.0.0.1:{first.port}", lambda: b"")
        with pytest.raises(InputError, match=r"--metrics-address .*cannot listen"):
            second.start()
    finally:
        first.stop()
