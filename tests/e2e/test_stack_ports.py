"""A Temporal dev server that loses a port race at start is started again, and leaves nothing behind.

The race is staged: the first HTTP port handed to the server is already taken by a listener of
this test, as a port picked from the ephemeral range used to be by an outgoing connection.
"""

from __future__ import annotations

import socket

from harness import stack


def test_temporal_start_retries_after_a_port_taken_meanwhile(tmp_path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", stack.free_port()))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    real = stack.free_port
    monkeypatch.setattr(stack, "free_port", lambda: next(ports, None) or real())
    dev = stack.TemporalDev(home=tmp_path, name="temporal-race")
    try:
        address, _ = dev.start(real())
        assert dev.running(), address
        log = dev.log.read_text(errors="replace")
        assert "address already in use" in log  # the first attempt did lose the race
        assert dev.pid() is not None
    finally:
        dev.stop()
        taken.close()
    assert not dev.running()
