"""The suite's Ray clusters stay on 127.0.0.1, the way the Ray guide says: their nodes'
address, and every port their processes listen on (read from ``/proc/net``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import ray

ROOT = Path(__file__).resolve().parent.parent.parent
GUIDE = ROOT / "docs" / "guides" / "ray.md"

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/net, on Linux"),
]


def listening() -> dict[int, set[str]]:
    """Every TCP port listened on, with the addresses it is listened on."""
    ports: dict[int, set[str]] = {}
    for table, ipv6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            if state != "0A":  # LISTEN
                continue
            address, port = local.split(":")
            ports.setdefault(int(port, 16), set()).add(_address(address, ipv6))
    return ports


def _address(hexed: str, ipv6: bool) -> str:
    raw = bytes.fromhex(hexed)
    if not ipv6:
        return ".".join(str(b) for b in reversed(raw))
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    if words[:12] == b"\0" * 10 + b"\xff\xff":  # an IPv4 address mapped into IPv6
        return ".".join(str(b) for b in words[12:])
    return ":".join(words[i : i + 2].hex() for i in range(0, 16, 2))


def ray_ports() -> set[int]:
    """The ports of the connected cluster's GCS, raylets and object managers."""
    ports = {int(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1])}
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if node["Alive"]:
            ports |= {node["NodeManagerPort"], node["ObjectManagerPort"]}
    return ports


def check_on_loopback() -> None:
    assert ray.util.get_node_ip_address() == "127.0.0.1"  # type: ignore[no-untyped-call]
    nodes = [n for n in ray.nodes() if n["Alive"]]  # type: ignore[no-untyped-call]
    assert nodes and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    open_ports = listening()
    for port in ray_ports():
        assert open_ports.get(port) == {"127.0.0.1"}, (port, open_ports.get(port))


@pytest.mark.usefixtures("ray_local")
def test_the_local_cluster_stays_on_127_0_0_1() -> None:
    check_on_loopback()


@pytest.mark.usefixtures("ray_two_nodes")
def test_the_two_node_cluster_stays_on_127_0_0_1() -> None:
    check_on_loopback()


def test_the_guide_says_how_the_suite_does_it() -> None:
    from conftest import RAY_ON_LOOPBACK

    name, value = RAY_ON_LOOPBACK
    assert f"{name}={value}" in GUIDE.read_text()
