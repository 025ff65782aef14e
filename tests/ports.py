"""A free TCP port for a server a test names by number before it starts (a bot's web endpoint, a second
bot's, a conformance scenario's); bench uses it too.

port-for picks it at random among ports outside the kernel's ephemeral range
(`net.ipv4.ip_local_port_range`), and checks nothing holds it now. A port from `bind(("127.0.0.1", 0))` is
one the kernel may give any outgoing connection on the machine again before the server binds it: that failed
a test with "Address already in use" under the parallel suite (2026-12-06).
"""

from __future__ import annotations

import functools

import port_for


@functools.cache
def _good() -> frozenset[int]:
    """port-for's candidates, worked out once per process (from its range tables and the kernel's ephemeral range:
    10 ms of CPU a time, against 0.4 ms for the pick itself)."""
    return frozenset(port_for.available_good_ports())


def free_port() -> int:
    return port_for.select_random(set(_good()))  # a copy: select_random removes what it is told to exclude


def closed_port() -> int:
    """A port nothing listens on, for a connection that must be refused: outside the ephemeral range, no
    server a test binds to port 0 is given it meanwhile."""
    return free_port()
