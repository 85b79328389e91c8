"""Listening ports for the embedded servers: picked away from the ports outgoing connections use,
and a restart waits for its own port instead of moving."""

from __future__ import annotations

import socket
import threading

import pytest

from harness import stack
from harness.errors import BenchError


def test_free_ports_lie_below_the_ephemeral_range_and_are_free():
    lo, hi = stack._listen_ports()
    for _ in range(20):
        port = stack.free_port()
        assert lo <= port < hi, (port, lo, hi)
        assert stack.port_is_free(port)


def test_a_restart_waits_for_its_port_and_says_when_it_stays_taken():
    holder = socket.socket()
    holder.bind(("127.0.0.1", stack.free_port()))
    holder.listen()
    port = holder.getsockname()[1]
    with pytest.raises(BenchError, match=f"port {port} is still taken"):
        stack.wait_port_free(port, "a test server", timeout_s=0.5)
    threading.Timer(0.5, holder.close).start()  # the borrower lets go
    stack.wait_port_free(port, "a test server", timeout_s=10)
    assert stack.port_is_free(port)
