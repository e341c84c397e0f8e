"""The cluster under test: one container per member, on testcontainers-python.

Every member runs the swarm image (``swarm agent --role ...``) on a bridge
network of its own run (masquerading off: nothing is routed outside this
machine; mDNS works on it). Its data directory is a host directory mounted at
``/data``, so a killed member restarts from the very same store, and the
recorder reads every store from the host.

testcontainers does the lifecycle: each member, the goal's one-shot client and
the hostile peer are ``DockerContainer`` objects, the run's network a
testcontainers ``Network``, and "the member is up" a testcontainers wait
strategy (:class:`Listening`: its addresses file appeared in its data
directory, the way it tells the world it listens). The Docker SDK stays
underneath for what testcontainers has no word for: starting the *same*
container again after a kill (its ``start`` creates a new one, with a new
address and no history), signals, pause and unpause, memory stats, detached
exec (Toxiproxy's server) and the sweep. Ryuk, testcontainers' reaper of
abandoned containers, is an image from Docker Hub, which is unreachable here:
it is turned off, and our labels do its work. Containers and the network carry
the label ``swarm-lab=<run id>`` (beside testcontainers' own); ``close`` removes
them, and ``sweep`` removes whatever an interrupted run left behind.
"""

from __future__ import annotations

import contextlib
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import structlog
from docker.models.containers import Container
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.exceptions import ContainerStartException
from testcontainers.core.network import Network
from testcontainers.core.waiting_utils import WaitStrategy

from agents.clusterdir import ClusterDir
from agents.llm import SHARED_PARALLEL
from chaos.lab.disk import FLAG_ENV, FLAG_NAME, FULL_FLAG_ENV, FULL_FLAG_NAME

# Ryuk's image (testcontainers/ryuk) cannot be pulled here; cleanup is by our labels. Our
# image is local: no registry prefix may be put before its name.
testcontainers_config.ryuk_disabled = True
testcontainers_config.hub_image_name_prefix = ""

log = structlog.get_logger("chaos.cluster")

LABEL = "swarm-lab"
IMAGE = "swarm-plan:0.1.0"
PORT = 4001
PAGE_PORT = 8080  # an observer's live page (swarm observe --web)
MODEL_PORT = 8090  # the run's one batched model (swarm model-service), alias "model" on the network
MODEL_READY_S = 300  # loading the model on a busy 2-core machine
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
TOXIPROXY_IN_CONTAINER = "/opt/toxiproxy/toxiproxy-server"
DISK_SHIM_IN_CONTAINER = "/opt/lab/failing-fsync.so"


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
    container: DockerContainer
    state: str = "created"  # created, running, paused, killed, stopped
    started_at: float | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def docker(self) -> Container:
        """The Docker SDK's handle on the member's container, for what testcontainers lacks."""
        return self.container.get_wrapped_container()


class _Polled(WaitStrategy):
    """Poll ``ready`` until it holds; a container that exits first fails at once with its log,
    one that is not ready by the startup timeout fails with the last reason it gave."""

    what = "the container"

    def ready(self, container: DockerContainer) -> str | None:
        """None once ready, else why not yet."""
        raise NotImplementedError

    def wait_until_ready(self, container: DockerContainer) -> None:  # type: ignore[override]
        deadline = time.monotonic() + self._startup_timeout
        while True:
            container.reload()
            if container.status == "exited":
                raise LabError(f"{self.what} exited at start; its log:\n" + _log_of(container)[-3000:])
            if (why := self.ready(container)) is None:
                return
            if time.monotonic() > deadline:
                raise LabError(f"{self.what} was not ready within {self._startup_timeout:.0f}s ({why}); "
                               "its log:\n" + _log_of(container)[-3000:])
            time.sleep(self._poll_interval)


class Listening(_Polled):
    """A member is up once it has written its listen addresses into its data directory.
    The file is on the host (the data directory is mounted), so no exec or port mapping is
    needed."""

    def __init__(self, addrs_file: Path, name: str) -> None:
        super().__init__()
        self.addrs_file, self.what = addrs_file, name

    def ready(self, container: DockerContainer) -> str | None:
        return None if self.addrs_file.exists() else "it has not written its listen addresses"


class Answers(_Polled):
    """A service is up once ``GET http://ADDRESS:PORT/PATH`` answers 200, ADDRESS being its
    address on the lab network: the host reaches it there, so nothing is published on the
    host's interfaces (testcontainers' own HTTP wait goes through a published port)."""

    def __init__(self, network: str, port: int, path: str, what: str) -> None:
        super().__init__()
        self.network, self.port, self.path, self.what = network, port, path, what

    def ready(self, container: DockerContainer) -> str | None:
        address = _address_on(container.get_wrapped_container(), self.network)
        try:
            with urllib.request.urlopen(f"http://{address}:{self.port}{self.path}", timeout=2) as answer:
                return None if answer.status == 200 else f"{self.path} answered {answer.status}"
        except (OSError, ValueError) as exc:
            return f"{self.path}: {str(exc)[:200]}"


def _created(container: DockerContainer) -> bool:
    """Has testcontainers created this container (even if starting it then failed)?"""
    try:
        container.get_wrapped_container()
    except ContainerStartException:
        return False
    return True


def _address_on(container: Container, network: str) -> str:
    """The container's IP address on ``network`` (as of its last reload)."""
    return container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]


def _log_of(container: DockerContainer) -> str:
    return container.get_wrapped_container().logs().decode(errors="replace")


@dataclass
class LabCluster:
    run_id: str
    root: Path  # host directory: members/NAME/ data dirs live here
    cluster: str
    llm: str = "scripted"
    llm_latency: float = 1.0
    model_file: Path | None = None
    toxiproxy_binary: Path | None = None
    disk_shim: Path | None = None  # preloaded into every member: its disk can be failed (chaos.lab.disk)
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
            # testcontainers would try to pull it, from a registry this machine cannot reach
            raise LabError(f"image {self.image} is not built; run 'make image' first") from None
        self._remove_leftovers()
        self._spares: list[DockerContainer] = []  # model service, client, hostile peer: removed at close
        self.model_service: DockerContainer | None = None
        # the operator's side of admission: every member of the run gets a ticket from it
        self.admin = ClusterDir.init(self.root / "admin", self.cluster)
        self.network = Network(docker_network_kw={
            "driver": "bridge", "labels": {LABEL: self.run_id},
            "options": {"com.docker.network.bridge.enable_ip_masquerade": "false"},
        })
        self.network.name = f"swarm-lab-{self.run_id}"
        self.network.create()

    def _remove_leftovers(self) -> None:
        """An interrupted run with the same id leaves containers and a network behind."""
        sweep(self.run_id)

    def _container(self, command: list[str], name: str, **docker_kwargs: object) -> DockerContainer:
        """A container of this run's image on its network, labelled for ``close`` and ``sweep``."""
        labels = {LABEL: self.run_id, **docker_kwargs.pop("labels", {})}  # type: ignore[dict-item]
        return (DockerContainer(self.image, docker_client_kw={"timeout": 60}, command=command)
                .with_name(f"swarm-lab-{self.run_id}-{name}").with_network(self.network)
                .with_kwargs(labels=labels, **docker_kwargs))

    # --- members --------------------------------------------------------------

    def add(self, spec: MemberSpec) -> LabMember:
        """Describe the member's container (started by ``start``) and make its identity, so its
        peer id is known before it runs."""
        data_dir = self.root / "members" / spec.name
        peer_id = self.admin.admit_dir(data_dir, spec.role, spec.name).peer
        # with the real model, members think through the run's one model service, as `make swarm`'s do
        llm = (["--llm", "openai", "--llm-url", f"http://model:{MODEL_PORT}/v1", "--llm-parallel", str(SHARED_PARALLEL)]
               if self.llm == "llama"
               else ["--llm", self.llm, "--llm-latency", str(self.llm_latency)])
        command = ["agent", "--role", spec.role, "--data-dir", "/data", "--cluster", self.cluster,
                   "--listen", f"/ip4/0.0.0.0/tcp/{PORT}", *llm]
        if spec.role == "decomposer":
            command += ["--strategy", spec.strategy]
        if spec.role == "observer":  # the silent observer serves the live page (PAGE_PORT)
            command = ["observe", "--web", f"0.0.0.0:{PAGE_PORT}", "--data-dir", "/data", "--cluster", self.cluster,
                       "--listen", f"/ip4/0.0.0.0/tcp/{PORT}"]
        container = self._container(["--log-level", self.log_level, *command], spec.name, hostname=spec.name,
                                    labels={"swarm-lab.member": spec.name})
        preload = []
        if spec.skew_ms:
            preload.append(FAKETIME_LIB)
            container.with_envs(FAKETIME=f"{spec.skew_ms / 1000:+.3f}", FAKETIME_DONT_FAKE_MONOTONIC="1")
        if self.disk_shim is not None:
            preload.append(DISK_SHIM_IN_CONTAINER)
            container.with_volume_mapping(self.disk_shim.resolve(), DISK_SHIM_IN_CONTAINER, "ro")
            container.with_env(FLAG_ENV, f"/data/{FLAG_NAME}").with_env(FULL_FLAG_ENV, f"/data/{FULL_FLAG_NAME}")
        if preload:
            container.with_env("LD_PRELOAD", ":".join(preload))
        container.with_volume_mapping(data_dir.resolve(), "/data", "rw")
        if self.toxiproxy_binary is not None:
            container.with_volume_mapping(self.toxiproxy_binary, TOXIPROXY_IN_CONTAINER, "ro")
        member = LabMember(spec, data_dir, peer_id, container)
        self.members[spec.name] = member
        return member

    def start(self, name: str) -> None:
        """Start the member: created and started by testcontainers the first time, the same
        container started again after a kill or stop (same store, same name)."""
        member = self.members[name]
        (member.data_dir / "addrs").unlink(missing_ok=True)
        if self.llm == "llama" and self.model_service is None:
            self._start_model_service()
        if _created(member.container):
            member.docker.start()  # the same container again (testcontainers' start would make another)
        else:
            member.container.start()
        member.state = "running"
        member.started_at = member.started_at or time.monotonic()
        log.debug("started", member=name)

    def _start_model_service(self) -> None:
        """Start the run's one batched model and wait until it answers ``/health``:
        members started before it would fail their first calls."""
        if self.model_file is None:
            raise LabError("the llama backend needs a model file: run 'make install' (it fetches the default "
                           "model) or set SWARM_MODEL to a GGUF file")
        service = (self._container(["model-service", "--listen", f"0.0.0.0:{MODEL_PORT}", "--threads", "2",
                                    "--slots", "8"], "model")
                   .with_network_aliases("model").with_env("SWARM_MODEL", "/models/model.gguf")
                   .with_volume_mapping(self.model_file, "/models/model.gguf", "ro")
                   .waiting_for(Answers(self.network.name, MODEL_PORT, "/health", "the model service")
                                .with_startup_timeout(MODEL_READY_S).with_poll_interval(0.5)))
        self._spares.append(service)
        self.model_service = service  # kept even if it fails to answer: close removes it, none is made twice
        service.start()
        log.info("model service up", model=str(self.model_file))

    def model_ip(self) -> str:
        """The model service's address on the run's network."""
        assert self.model_service is not None
        container = self.model_service.get_wrapped_container()
        container.reload()
        return _address_on(container, self.network.name)

    def wait_listening(self, names: list[str], timeout: float = 60.0) -> None:
        """Wait until every one of ``names`` listens (started side by side, waited for in turn)."""
        deadline = time.monotonic() + timeout
        for name in names:
            member = self.members[name]
            ready = Listening(member.data_dir / "addrs", name).with_poll_interval(0.2)
            ready.with_startup_timeout(max(1, int(deadline - time.monotonic())))
            ready.wait_until_ready(member.container)

    def kill(self, name: str) -> None:
        self.members[name].docker.kill(signal="SIGKILL")
        self.members[name].state = "killed"

    def stop(self, name: str) -> None:
        self.members[name].docker.stop(timeout=10)
        self.members[name].state = "stopped"

    def set_disk(self, name: str, *, failing: bool | None = None, full: bool | None = None) -> None:
        """From now on every fsync of the member fails with EIO (``failing``), every write to a file
        with ENOSPC (``full``), or no longer (``chaos.lab.disk``); None leaves that one as it is."""
        if self.disk_shim is None:
            raise LabError("this run's members were started without the lab's disk shim: a scenario with a "
                           "disk step (disk_fails, disk_full) gets it")
        for flag, on in ((FLAG_NAME, failing), (FULL_FLAG_NAME, full)):
            if on is not None:
                path = self.members[name].data_dir / flag
                if on:
                    path.touch()
                else:
                    path.unlink(missing_ok=True)

    def exit_code(self, name: str) -> int | None:
        """The member's exit status if its process has ended by itself, else None."""
        container = self.members[name].docker
        container.reload()
        return int(container.attrs["State"]["ExitCode"]) if container.status == "exited" else None

    def pause(self, name: str) -> None:
        self.members[name].docker.pause()
        self.members[name].state = "paused"

    def unpause(self, name: str) -> None:
        self.members[name].docker.unpause()
        self.members[name].state = "running"

    def ip(self, name: str) -> str:
        container = self.members[name].docker
        container.reload()
        return _address_on(container, self.network.name)

    def pid(self, name: str) -> int:
        container = self.members[name].docker
        container.reload()
        pid = container.attrs["State"]["Pid"]
        if not pid:
            raise LabError(f"{name} has no running process (state {self.members[name].state})")
        return int(pid)

    def logs(self, name: str) -> str:
        return _log_of(self.members[name].container)

    def memory_mb(self, name: str) -> float | None:
        """The member's container memory (cgroup usage less page cache), in MiB, if it runs."""
        member = self.members[name]
        if member.state != "running":
            return None
        try:
            stats = member.docker.stats(stream=False)
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
        client = (self._container(["submit", goal, "--cluster", self.cluster, "--quorum", str(quorum),
                                   "--claim-lease", str(claim_lease_s), "--round", str(round_s),
                                   "--timeout", str(timeout), "--data-dir", "/data",
                                   "--roster", "/admin/members.json"], "client")
                  .with_volume_mapping(client_dir.resolve(), "/data", "rw")
                  .with_volume_mapping((self.root / "admin" / "members.json").resolve(), "/admin/members.json"))
        try:
            client.start()
            status = client.get_wrapped_container().wait(timeout=timeout + 30).get("StatusCode")
            output, errors = (stream.decode(errors="replace") for stream in client.get_logs())
        finally:
            client.stop()
        if status != 0:
            raise LabError(f"swarm submit failed (exit {status}): {errors[-2000:]}")
        return output.strip()

    def hostile(self, seconds: float) -> None:
        """Start the hostile peer (``chaos.lab.hostile_peer``, never admitted) in a container of
        its own on the lab network, aimed at every running member, for ``seconds``."""
        bootstrap = []
        for name in self.running():
            addrs = self.members[name].data_dir / "addrs"
            if addrs.exists():
                bootstrap += ["--bootstrap", addrs.read_text().split()[0]]
        self.hostile_container = self._container(
            ["-m", "chaos.lab.hostile_peer", "--cluster", self.cluster, "--seconds", str(seconds), *bootstrap],
            "hostile", entrypoint=["/opt/swarm/bin/python"])
        self._spares.append(self.hostile_container)
        self.hostile_container.start()

    def hostile_report(self) -> str:
        container = getattr(self, "hostile_container", None)
        if container is None:
            return ""
        try:
            container.get_wrapped_container().wait(timeout=90)
            lines = container.get_logs()[0].decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
        except Exception as exc:
            return f"(no report: {exc})"

    # --- cleanup --------------------------------------------------------------

    def close(self) -> None:
        for container in self._spares:
            with contextlib.suppress(Exception):
                container.stop()
        for member in self.members.values():
            try:
                member.container.stop()  # a forced remove (none if it was never created)
            except docker.errors.DockerException as exc:
                log.warning("could not remove container", member=member.name, error=str(exc)[:200])
        try:
            self.network.remove()
        except docker.errors.DockerException as exc:
            log.warning("could not remove network", error=str(exc)[:200])


def sweep(run_id: str | None = None) -> int:
    """Remove every container and network lab runs left behind, or one run's (by label: see
    the module's docstring for why not Ryuk). Returns how many."""
    client = docker.from_env()
    selector = {"label": LABEL if run_id is None else f"{LABEL}={run_id}"}
    removed = 0
    for container in client.containers.list(all=True, filters=selector):
        container.remove(force=True)
        removed += 1
    for network in client.networks.list(filters=selector):
        network.remove()
        removed += 1
    return removed
