"""The cluster under test: one container per member, controlled through the Docker API.

Every member runs the swarm image (``swarm agent --role ...``) on a bridge
network of its own run (masquerading off: nothing is routed outside this
machine; mDNS works on it). Its data directory is a host directory mounted at
``/data``, so a killed member restarts from the very same store, and the
recorder reads every store from the host. Containers and the network carry
the label ``swarm-lab=<run id>``; ``close`` removes them, and ``sweep`` removes
whatever an interrupted run left behind.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import structlog

from agents.clusterdir import ClusterDir

log = structlog.get_logger("chaos.cluster")

LABEL = "swarm-lab"
IMAGE = "swarm-plan:0.1.0"
PORT = 4001
PAGE_PORT = 8080  # an observer's live page (swarm observe --web)
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
TOXIPROXY_IN_CONTAINER = "/opt/toxiproxy/toxiproxy-server"


class LabError(RuntimeError):
    """The lab could not do what a scenario asked; the message says what and how to fix it."""


@dataclass
class MemberSpec:
    name: str
    role: str
    strategy: str = "activity"
    skew_ms: int = 0


@dataclass
class LabMember:
    spec: MemberSpec
    data_dir: Path
    peer_id: str
    container: object | None = None
    state: str = "created"  # created, running, paused, killed, stopped
    started_at: float | None = None

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class LabCluster:
    run_id: str
    root: Path  # host directory: members/NAME/ data dirs live here
    cluster: str
    llm: str = "scripted"
    llm_latency: float = 1.0
    model_file: Path | None = None
    toxiproxy_binary: Path | None = None
    image: str = IMAGE
    log_level: str = "info"  # "debug" logs every admitted event (the propagation figures read them)
    members: dict[str, LabMember] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            self.docker = docker.from_env(timeout=60)
            self.docker.ping()
        except docker.errors.DockerException as exc:
            raise LabError(f"no Docker engine answers ({exc}); start one with 'make engine' "
                           "(or chaos/docker/engine.sh), then run again") from None
        try:
            self.docker.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise LabError(f"image {self.image} is not built; run 'make image' first") from None
        self._remove_leftovers()
        # the operator's side of admission: every member of the run gets a ticket from it
        self.admin = ClusterDir.init(self.root / "admin", self.cluster)
        self.network = self.docker.networks.create(
            f"swarm-lab-{self.run_id}", driver="bridge", labels={LABEL: self.run_id},
            options={"com.docker.network.bridge.enable_ip_masquerade": "false"},
        )

    def _remove_leftovers(self) -> None:
        """An interrupted run with the same id leaves containers and a network behind."""
        selector = {"label": f"{LABEL}={self.run_id}"}
        for container in self.docker.containers.list(all=True, filters=selector):
            container.remove(force=True)
        for network in self.docker.networks.list(filters=selector):
            network.remove()

    # --- members --------------------------------------------------------------

    def add(self, spec: MemberSpec) -> LabMember:
        """Create the member's container (not started) and its identity, so its peer id is known."""
        data_dir = self.root / "members" / spec.name
        peer_id = self.admin.admit_dir(data_dir, spec.role, spec.name).peer
        command = ["agent", "--role", spec.role, "--data-dir", "/data", "--cluster", self.cluster,
                   "--listen", f"/ip4/0.0.0.0/tcp/{PORT}", "--llm", self.llm,
                   "--llm-threads", "1", "--llm-latency", str(self.llm_latency)]
        if spec.role == "decomposer":
            command += ["--strategy", spec.strategy]
        if spec.role == "observer":  # the silent observer serves the live page (PAGE_PORT)
            command = ["observe", "--web", f"0.0.0.0:{PAGE_PORT}", "--data-dir", "/data", "--cluster", self.cluster,
                       "--listen", f"/ip4/0.0.0.0/tcp/{PORT}"]
        environment = {"SWARM_MODEL": "/models/model.gguf"}
        if spec.skew_ms:
            environment.update(LD_PRELOAD=FAKETIME_LIB, FAKETIME=f"{spec.skew_ms / 1000:+.3f}",
                               FAKETIME_DONT_FAKE_MONOTONIC="1")
        volumes = {str(data_dir.resolve()): {"bind": "/data", "mode": "rw"}}
        if self.model_file is not None:
            volumes[str(self.model_file)] = {"bind": "/models/model.gguf", "mode": "ro"}
        if self.toxiproxy_binary is not None:
            volumes[str(self.toxiproxy_binary)] = {"bind": TOXIPROXY_IN_CONTAINER, "mode": "ro"}
        container = self.docker.containers.create(
            self.image, command=["--log-level", self.log_level, *command],
            name=f"swarm-lab-{self.run_id}-{spec.name}", hostname=spec.name,
            labels={LABEL: self.run_id, "swarm-lab.member": spec.name}, environment=environment,
            volumes=volumes, network=self.network.name, detach=True,
        )
        member = LabMember(spec, data_dir, peer_id, container)
        self.members[spec.name] = member
        return member

    def start(self, name: str) -> None:
        member = self.members[name]
        addrs = member.data_dir / "addrs"
        addrs.unlink(missing_ok=True)
        member.container.start()  # type: ignore[union-attr]
        member.state = "running"
        member.started_at = member.started_at or time.monotonic()
        log.debug("started", member=name)

    def wait_listening(self, names: list[str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for name in names:
            addrs = self.members[name].data_dir / "addrs"
            while not addrs.exists():
                if time.monotonic() > deadline:
                    raise LabError(f"{name} did not start listening within {timeout:.0f}s; its log:\n"
                                   + self.logs(name)[-3000:])
                self._refresh(name)
                if self.members[name].container.status == "exited":  # type: ignore[union-attr]
                    raise LabError(f"{name} exited at start; its log:\n" + self.logs(name)[-3000:])
                time.sleep(0.2)

    def kill(self, name: str) -> None:
        self.members[name].container.kill(signal="SIGKILL")  # type: ignore[union-attr]
        self.members[name].state = "killed"

    def stop(self, name: str) -> None:
        self.members[name].container.stop(timeout=10)  # type: ignore[union-attr]
        self.members[name].state = "stopped"

    def pause(self, name: str) -> None:
        self.members[name].container.pause()  # type: ignore[union-attr]
        self.members[name].state = "paused"

    def unpause(self, name: str) -> None:
        self.members[name].container.unpause()  # type: ignore[union-attr]
        self.members[name].state = "running"

    def _refresh(self, name: str) -> None:
        self.members[name].container.reload()  # type: ignore[union-attr]

    def ip(self, name: str) -> str:
        self._refresh(name)
        networks = self.members[name].container.attrs["NetworkSettings"]["Networks"]  # type: ignore[union-attr]
        return networks[self.network.name]["IPAddress"]

    def pid(self, name: str) -> int:
        self._refresh(name)
        pid = self.members[name].container.attrs["State"]["Pid"]  # type: ignore[union-attr]
        if not pid:
            raise LabError(f"{name} has no running process (state {self.members[name].state})")
        return int(pid)

    def logs(self, name: str) -> str:
        return self.members[name].container.logs().decode(errors="replace")  # type: ignore[union-attr]

    def memory_mb(self, name: str) -> float | None:
        """The member's container memory (cgroup usage less page cache), in MiB, if it runs."""
        member = self.members[name]
        if member.state != "running":
            return None
        try:
            stats = member.container.stats(stream=False)  # type: ignore[union-attr]
            memory = stats.get("memory_stats", {})
            cache = memory.get("stats", {}).get("cache", 0) or memory.get("stats", {}).get("inactive_file", 0)
            return round((memory.get("usage", 0) - cache) / 2**20, 1)
        except docker.errors.DockerException:
            return None

    def running(self) -> list[str]:
        return [n for n, m in self.members.items() if m.state in ("running", "paused")]

    # --- the client -----------------------------------------------------------

    def submit(self, goal: str, quorum: int, claim_lease_s: float, round_s: float, timeout: float = 60.0) -> str:
        """Publish the goal from a one-shot client container (admitted as a client, the roster
        is every admitted scorer); returns its output."""
        client_dir = self.root / "client"
        self.admin.admit_dir(client_dir, "client", "client")
        container = self.docker.containers.run(
            self.image, ["submit", goal, "--cluster", self.cluster, "--quorum", str(quorum),
                         "--claim-lease", str(claim_lease_s), "--round", str(round_s), "--timeout", str(timeout),
                         "--data-dir", "/data", "--roster", "/admin/members.json"],
            name=f"swarm-lab-{self.run_id}-client", labels={LABEL: self.run_id},
            network=self.network.name, detach=True,
            volumes={str(client_dir.resolve()): {"bind": "/data", "mode": "rw"},
                     str((self.root / "admin" / "members.json").resolve()): {"bind": "/admin/members.json",
                                                                            "mode": "ro"}},
        )
        result = container.wait(timeout=timeout + 30)
        output = container.logs(stdout=True, stderr=False).decode(errors="replace")
        errors = container.logs(stdout=False, stderr=True).decode(errors="replace")
        container.remove(force=True)
        if result.get("StatusCode") != 0:
            raise LabError(f"swarm submit failed (exit {result.get('StatusCode')}): {errors[-2000:]}")
        return output.strip()

    def hostile(self, seconds: float) -> None:
        """Start the hostile peer (``chaos.lab.hostile_peer``, never admitted) in a container of
        its own on the lab network, aimed at every running member, for ``seconds``."""
        bootstrap = []
        for name in self.running():
            addrs = self.members[name].data_dir / "addrs"
            if addrs.exists():
                bootstrap += ["--bootstrap", addrs.read_text().split()[0]]
        self.hostile_container = self.docker.containers.run(
            self.image, ["-m", "chaos.lab.hostile_peer", "--cluster", self.cluster, "--seconds", str(seconds),
                         *bootstrap],
            entrypoint=["/opt/swarm/bin/python"], name=f"swarm-lab-{self.run_id}-hostile",
            labels={LABEL: self.run_id}, network=self.network.name, detach=True,
        )

    def hostile_report(self) -> str:
        container = getattr(self, "hostile_container", None)
        if container is None:
            return ""
        try:
            container.wait(timeout=90)
            lines = container.logs(stdout=True, stderr=False).decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
        except Exception as exc:
            return f"(no report: {exc})"

    # --- cleanup --------------------------------------------------------------

    def close(self) -> None:
        hostile = getattr(self, "hostile_container", None)
        if hostile is not None:
            with contextlib.suppress(docker.errors.DockerException):
                hostile.remove(force=True)
        for member in self.members.values():
            try:
                member.container.remove(force=True)  # type: ignore[union-attr]
            except docker.errors.DockerException as exc:
                log.warning("could not remove container", member=member.name, error=str(exc)[:200])
        try:
            self.network.remove()
        except docker.errors.DockerException as exc:
            log.warning("could not remove network", error=str(exc)[:200])


def sweep() -> int:
    """Remove every container and network any lab run left behind. Returns how many."""
    client = docker.from_env()
    removed = 0
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        container.remove(force=True)
        removed += 1
    for network in client.networks.list(filters={"label": LABEL}):
        network.remove()
        removed += 1
    return removed
