"""The nemesis: faults injected into the running cluster, each recorded with its time.

Process faults go through Docker (kill -9, stop, pause, restart). Network faults
are applied from the host inside each member's network namespace (``nsenter
-t PID -n``), so the image needs no privileges:

* partitions: an ``iptables`` chain ``SWARM-LAB`` on the member's ``eth0``
  drops traffic to and from every member outside its group, both directions;
  heal flushes it. Rules die with the namespace, so a restarted member gets
  the current partition and loss applied again.
* one-way partitions: the receivers' chain drops what the senders send them;
  what receivers send still arrives (TCP, needing both ways, breaks anyway;
  libp2p's liveness ping notices).
* random loss: ``-m statistic --mode random --probability P -j DROP`` in the
  same chain (this kernel has no netem).
* bandwidth: a ``tbf`` qdisc on the member's ``eth0``.
* latency, jitter, timeouts, resets: Toxiproxy inside the member's container,
  in front of its libp2p port. Connections other members open to it are
  redirected (iptables ``nat`` REDIRECT) to the proxy, which forwards to the
  member; toxics on that proxy shape those links.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from chaos.lab.cluster import PORT, TOXIPROXY_IN_CONTAINER, LabCluster, LabError

log = structlog.get_logger("chaos.nemesis")
CHAIN = "SWARM-LAB"
PROXY_PORT = 4002
API_PORT = 8474


@dataclass
class Nemesis:
    cluster: LabCluster
    record: Callable[[str, str], None]  # (kind, detail): the history's fault log
    groups: list[list[str]] = field(default_factory=list)
    loss: dict[str, float] = field(default_factory=dict)
    bandwidth: dict[str, str] = field(default_factory=dict)
    proxied: set[str] = field(default_factory=set)
    one_way: tuple[list[str], list[str]] | None = None  # (senders, receivers)

    # --- plumbing -------------------------------------------------------------

    def _in_netns(self, name: str, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["nsenter", "-t", str(self.cluster.pid(name)), "-n", *command],
                              capture_output=True, text=True, timeout=20)
        if check and done.returncode != 0:
            raise LabError(f"in {name}'s network namespace, {' '.join(command)} failed: "
                           f"{done.stderr.strip()[:300]} (the lab needs root and iptables/iproute2 on the host)")
        return done

    def _chain(self, name: str) -> None:
        """Create the member's SWARM-LAB chain (idempotent) and flush it."""
        if self._in_netns(name, "iptables", "-N", CHAIN, check=False).returncode == 0:
            self._in_netns(name, "iptables", "-A", "INPUT", "-i", "eth0", "-j", CHAIN)
            self._in_netns(name, "iptables", "-A", "OUTPUT", "-o", "eth0", "-j", CHAIN)
        self._in_netns(name, "iptables", "-F", CHAIN)

    def _apply_network(self, name: str) -> None:
        """Write the member's current partition and loss rules."""
        self._chain(name)
        group = next((g for g in self.groups if name in g), None)
        if self.groups:
            for other in self.cluster.running():
                if other != name and (group is None or other not in group):
                    ip = self.cluster.ip(other)
                    self._in_netns(name, "iptables", "-A", CHAIN, "-s", ip, "-j", "DROP")
                    self._in_netns(name, "iptables", "-A", CHAIN, "-d", ip, "-j", "DROP")
        if self.one_way is not None and name in self.one_way[1]:
            for sender in self.one_way[0]:
                if sender in self.cluster.running():
                    self._in_netns(name, "iptables", "-A", CHAIN, "-s", self.cluster.ip(sender), "-j", "DROP")
        if name in self.loss:
            # links between members lose packets, not the member's calls to the run's model
            # service (a container of its own with --llm llama): faults are the network's, not thought's
            if self.cluster.model_service is not None:
                model = self.cluster.model_ip()
                self._in_netns(name, "iptables", "-A", CHAIN, "-s", model, "-j", "RETURN")
                self._in_netns(name, "iptables", "-A", CHAIN, "-d", model, "-j", "RETURN")
            self._in_netns(name, "iptables", "-A", CHAIN, "-m", "statistic", "--mode", "random",
                           "--probability", f"{self.loss[name]:.3f}", "-j", "DROP")
        if name in self.bandwidth:
            self._in_netns(name, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
                           "rate", self.bandwidth[name], "burst", "32kbit", "latency", "400ms")

    def _apply_all(self) -> None:
        for name in self.cluster.running():
            self._apply_network(name)

    # --- process faults -------------------------------------------------------

    def kill(self, name: str) -> None:
        self.cluster.kill(name)
        self.record("kill", name)

    def stop(self, name: str) -> None:
        self.cluster.stop(name)
        self.record("stop", name)

    def pause(self, name: str) -> None:
        self.cluster.pause(name)
        self.record("pause", name)

    def unpause(self, name: str) -> None:
        self.cluster.unpause(name)
        self.record("unpause", name)

    def start(self, name: str, why: str = "") -> None:
        """Start (a late member) or restart (a killed or stopped one) from its data directory."""
        again = self.cluster.members[name].state in ("killed", "stopped")
        self.cluster.start(name)
        self.after_start(name)
        self.record("restart" if again else "start", f"{name} {why}".strip())

    def after_start(self, name: str) -> None:
        """A (re)started member is a fresh namespace, maybe with a new address: give it the
        faults in force, and rewrite the others' partition rules, which name addresses."""
        self._apply_network(name)
        if name in self.proxied:
            self._start_proxy(name)
        if self.groups:
            for other in self.cluster.running():
                if other != name:
                    self._apply_network(other)

    # --- network faults -------------------------------------------------------

    def partition(self, groups: list[list[str]]) -> None:
        self.groups = [list(g) for g in groups]
        self._apply_all()
        self.record("partition", " | ".join(",".join(g) for g in groups))

    def oneway(self, senders: list[str], receivers: list[str]) -> None:
        self.one_way = (list(senders), list(receivers))
        self._apply_all()
        self.record("oneway", f"{','.join(senders)} -> {','.join(receivers)} lost")

    def heal(self) -> None:
        self.groups, self.one_way = [], None
        self._apply_all()
        self.record("heal", "")

    def wipe(self, name: str) -> None:
        """Kill a member and delete its event store, keeping its key, ticket and feed head: it must
        learn its own feed back from its peers before it signs anything again."""
        self.cluster.kill(name)
        for path in self.cluster.members[name].data_dir.glob("events.sqlite3*"):
            path.unlink()
        self.record("wipe", f"{name} (store deleted, key kept)")

    def fail_disk(self, name: str) -> None:
        """From now on every fsync of the member fails with EIO (``chaos.lab.disk``)."""
        self.cluster.set_disk(name, failing=True)
        self.record("disk", f"{name} failing (every fsync answers EIO)")

    def replace_disk(self, name: str) -> None:
        """The member's fsyncs work again, on the store the failing disk left."""
        self.cluster.set_disk(name, failing=False)
        self.record("disk", f"{name} working again (a new disk under its old store)")

    def fill_disk(self, name: str) -> None:
        """From now on every write of the member to a file fails with ENOSPC."""
        self.cluster.set_disk(name, full=True)
        self.record("disk", f"{name} full (every write to a file answers ENOSPC)")

    def free_disk(self, name: str) -> None:
        self.cluster.set_disk(name, full=False)
        self.record("disk", f"{name} free")

    def set_loss(self, name: str, probability: float) -> None:
        if probability > 0:
            self.loss[name] = probability
        else:
            self.loss.pop(name, None)
        self._apply_network(name)
        self.record("loss", f"{name} {probability:.0%}")

    def set_bandwidth(self, name: str, rate: str | None) -> None:
        if rate:
            self.bandwidth[name] = rate
            self._apply_network(name)
        else:
            self.bandwidth.pop(name, None)
            self._in_netns(name, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        self.record("bandwidth", f"{name} {rate or 'unlimited'}")

    # --- Toxiproxy --------------------------------------------------------------

    def proxy(self, name: str) -> None:
        """Put Toxiproxy in front of ``name``'s libp2p port from its next start on (call it
        before the first start, so that every peer connects through the proxy)."""
        if self.cluster.toxiproxy_binary is None:
            raise LabError("this scenario uses Toxiproxy, whose server is not built: run 'make toxiproxy' "
                           "(it builds github.com/Shopify/toxiproxy/v2/cmd/server with go install)")
        self.proxied.add(name)

    def _start_proxy(self, name: str) -> None:
        # detached: testcontainers' exec waits for the command, the SDK's need not
        self.cluster.members[name].docker.exec_run(
            [TOXIPROXY_IN_CONTAINER, "-host", "0.0.0.0", "-port", str(API_PORT)], detach=True)
        ip = self.cluster.ip(name)
        api = self._api(name)
        deadline = time.monotonic() + 10
        while True:
            try:
                from toxiproxy import Toxiproxy

                server = Toxiproxy()
                if server.get_proxy("member") is None:
                    server.create(upstream=f"{ip}:{PORT}", name="member", listen=f"0.0.0.0:{PROXY_PORT}")
                break
            except Exception as exc:  # the server takes a moment to listen
                if time.monotonic() > deadline:
                    raise LabError(f"Toxiproxy in {name} does not answer at {api}: {exc}") from None
                time.sleep(0.2)
        self._in_netns(name, "iptables", "-t", "nat", "-A", "PREROUTING", "-i", "eth0", "-p", "tcp",
                       "--dport", str(PORT), "-j", "REDIRECT", "--to-ports", str(PROXY_PORT))

    def _api(self, name: str) -> str:
        from toxiproxy.api import APIConsumer

        # toxiproxy-python talks to one server, set on a class: point it at this member's
        APIConsumer.host, APIConsumer.port = self.cluster.ip(name), API_PORT
        return f"http://{APIConsumer.host}:{API_PORT}"

    def toxic(self, name: str, kind: str, attributes: dict[str, object], stream: str = "downstream",
              toxicity: float = 1.0) -> None:
        from toxiproxy import Toxiproxy

        if name not in self.proxied:
            raise LabError(f"{name} has no Toxiproxy in front of it; list it under cluster.toxiproxy")
        self._api(name)
        proxy = Toxiproxy().get_proxy("member")
        toxic_name = f"{kind}_{stream}"
        if proxy.get_toxic(toxic_name) is not None:
            proxy.destroy_toxic(toxic_name)
        proxy.add_toxic(name=toxic_name, type=kind, stream=stream, toxicity=toxicity, attributes=attributes)
        self.record("toxic", f"{name} {kind} {stream} {attributes}")

    def clear_toxics(self, name: str) -> None:
        from toxiproxy import Toxiproxy

        self._api(name)
        proxy = Toxiproxy().get_proxy("member")
        for toxic_name in list(proxy.toxics()):
            proxy.destroy_toxic(toxic_name)
        self.record("untoxic", name)

    def clear_all(self) -> None:
        """End every network fault (the end of a scenario's fault window), each logged."""
        for name, probability in sorted(self.loss.items()):
            if probability:
                self.record("loss", f"{name} 0%")
        if self.groups or self.one_way:
            self.record("heal", "")
        self.groups, self.loss, self.one_way = [], {}, None
        for name in list(self.bandwidth):
            self.set_bandwidth(name, None)
        for name in self.proxied:
            if self.cluster.members[name].state == "running":
                self.clear_toxics(name)
        self._apply_all()
