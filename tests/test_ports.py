"""The ports handed to the servers tests start. CI failed on 2026-12-05 when two calls of the
old helper (bind to 0, close, return the port) gave one test's two servers the same port."""

from __future__ import annotations

import socket

import pytest

from benchmarks import ports

LINUX_DEFAULT_LOW = 32768


def test_ports_are_bindable_distinct_and_below_the_kernels_own_choices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: LINUX_DEFAULT_LOW)
    handed = [ports.free_port() for _ in range(500)]
    assert len(set(handed)) == len(handed)
    assert all(ports.UNRESERVED <= port < LINUX_DEFAULT_LOW for port in handed)
    with socket.socket() as server:
        server.bind(("127.0.0.1", handed[-1]))


def test_a_range_without_room_below_it_leaves_the_choice_to_the_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: ports.UNRESERVED + 10)
    handed = [ports.free_port() for _ in range(200)]
    assert len(set(handed)) == len(handed)
    assert all(port > 0 for port in handed)
