"""The health endpoint: real HTTP on a loopback port, with fake checks."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from kubegpu.errors import InputError
from kubegpu.probes import ConnectionLimits, ProbeServer, parse_address


def _get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            body = exc.read()
        return exc.code, json.loads(body) if exc.headers.get("Content-Type") == "application/json" else {}


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


# --- hostile clients (issue 55, finding 6): the limits hold for every EndpointServer --------------------


def _ok() -> tuple[bool, dict[str, object]]:
    return True, {}


def _closed_by_server(sock: socket.socket) -> bool:
    """True when the server closes ``sock`` without answering (the 10 s is a bound, not a speed)."""
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_connection_that_never_sends_a_request_is_closed_after_the_request_timeout() -> None:
    server = ProbeServer(
        "127.0.0.1:0", healthz=_ok, readyz=_ok, limits=ConnectionLimits(request_timeout_s=0.2)
    )
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as idle:
            assert _closed_by_server(idle)
        assert _get(server.port, "/healthz")[0] == 200
    finally:
        server.stop()


def test_a_request_trickled_a_byte_at_a_time_is_cut_off() -> None:
    """Each byte arrives well within the read timeout; the whole request does not within its deadline."""
    server = ProbeServer(
        "127.0.0.1:0", healthz=_ok, readyz=_ok, limits=ConnectionLimits(request_timeout_s=0.5)
    )
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\n")
            cut = False
            for _ in range(400):  # bounded: 400 x 50 ms = 20 s of trickling at most
                try:
                    slow.sendall(b"X")
                except OSError:
                    cut = True
                    break
                ready, _, _ = select.select([slow], [], [], 0.05)
                if ready:
                    cut = _closed_by_server(slow)
                    break
            assert cut, "a request that never ends must not hold its connection forever"
        assert _get(server.port, "/healthz")[0] == 200
    finally:
        server.stop()


def test_at_the_connection_cap_a_probe_still_gets_in_by_closing_the_oldest_idle_connection() -> None:
    limits = ConnectionLimits(max_connections=4, request_timeout_s=30)
    server = ProbeServer("127.0.0.1:0", healthz=_ok, readyz=_ok, limits=limits)
    server.start()
    idle = []
    try:
        for _ in range(4):  # one at a time, each taken in by the server before the next: their age order
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
            deadline = time.monotonic() + 10
            while server.connection_count() < len(idle) and time.monotonic() < deadline:
                time.sleep(0.01)
        assert server.connection_count() == 4
        assert _get(server.port, "/healthz") == (200, {"ok": True})
        assert _closed_by_server(idle[0]), "the oldest idle connection made room"
        assert _get(server.port, "/readyz") == (200, {"ok": True})
    finally:
        for s in idle:
            s.close()
        server.stop()


def test_when_every_connection_is_busy_a_new_one_gets_503_at_once_and_serving_goes_on() -> None:
    release = threading.Event()
    entered = threading.Semaphore(0)

    def slow() -> tuple[bool, dict[str, object]]:
        entered.release()
        return release.wait(30), {}

    server = ProbeServer("127.0.0.1:0", healthz=_ok, readyz=slow, limits=ConnectionLimits(max_connections=2))
    server.start()
    answers: list[int] = []
    busy = [
        threading.Thread(target=lambda: answers.append(_get(server.port, "/readyz")[0])) for _ in range(2)
    ]
    try:
        for t in busy:
            t.start()
        for _ in busy:
            assert entered.acquire(timeout=10), "both requests reached the check"
        assert _get(server.port, "/healthz")[0] == 503
    finally:
        release.set()
        for t in busy:
            t.join(timeout=10)
    try:
        assert answers == [200, 200]
        assert _get(server.port, "/healthz")[0] == 200
    finally:
        server.stop()


def test_connection_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ConnectionLimits(max_connections=0)
