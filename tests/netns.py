"""Test hosts in Linux network namespaces on a private bridge, and partitions between them.

Each host is a namespace with one veth into a bridge that exists only for this
test. A partition adds blackhole routes between every pair across the groups,
in both directions: packets are silently dropped, as on a cut link, and the
members must notice by themselves (their liveness ping). ``heal`` removes the
routes. Needs root (CAP_NET_ADMIN) and iproute2; nothing leaves the bridge.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess

_subnets = itertools.count(os.getpid() % 200 + 20)


def _ip(*args: str) -> None:
    run = subprocess.run(["ip", *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"'ip {' '.join(args)}' failed: {run.stderr.strip()} "
                           "(network namespaces need root and iproute2)")


class NetnsLab:
    def __init__(self) -> None:
        self.subnet = next(_subnets)
        self.tag = f"{os.getpid() % 10000}{self.subnet}"
        self.bridge = f"swb{self.tag}"[:15]
        self.hosts: dict[str, tuple[str, str]] = {}  # name -> (namespace, ip)
        self._routes: list[tuple[str, str]] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"10.231.{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        # A Docker engine on the host sets the FORWARD policy to DROP and makes bridged
        # frames pass iptables (br_netfilter): let this bridge forward to itself.
        self._forward_rule = ["FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]
        self._iptables = shutil.which("iptables")
        if self._iptables:
            subprocess.run([self._iptables, "-I", *self._forward_rule], capture_output=True, check=True)

    def add_host(self, name: str) -> tuple[str, tuple[str, ...]]:
        """Create a namespace for ``name``; returns its ip and the command prefix to run in it."""
        index = len(self.hosts) + 2
        namespace = f"sw{self.tag}h{index}"
        ip = f"10.231.{self.subnet}.{index}"
        outer, inner = f"sv{self.tag}h{index}"[:15], f"si{self.tag}h{index}"[:15]
        _ip("netns", "add", namespace)
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", namespace)
        _ip("link", "set", outer, "master", self.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{ip}/24", "dev", inner)
        _ip("-n", namespace, "link", "set", inner, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        # multicast (mDNS) goes out on the bridge; there is no default route, so nothing else leaves it
        _ip("-n", namespace, "route", "add", "224.0.0.0/4", "dev", inner)
        self.hosts[name] = (namespace, ip)
        return ip, ("ip", "netns", "exec", namespace)

    def partition(self, left: list[str], right: list[str]) -> None:
        for a, b in itertools.product(left, right):
            for src, dst in ((a, b), (b, a)):
                namespace, target = self.hosts[src][0], self.hosts[dst][1]
                _ip("-n", namespace, "route", "add", "blackhole", f"{target}/32")
                self._routes.append((namespace, target))

    def heal(self) -> None:
        for namespace, target in self._routes:
            _ip("-n", namespace, "route", "del", "blackhole", f"{target}/32")
        self._routes.clear()

    def cleanup(self) -> None:
        for namespace, _ in self.hosts.values():
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        if self._iptables:
            subprocess.run([self._iptables, "-D", *self._forward_rule], capture_output=True)

    def can_reach(self, src: str, dst: str, port: int) -> bool:
        """Whether a TCP connection from ``src``'s namespace to ``dst``'s port opens within 1 s."""
        namespace, target = self.hosts[src][0], self.hosts[dst][1]
        probe = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)\n"
                 "except OSError:\n sys.exit(1)")
        run = subprocess.run(["ip", "netns", "exec", namespace, "python3", "-c", probe, target, str(port)],
                             capture_output=True)
        return run.returncode == 0
