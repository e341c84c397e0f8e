"""The compose file for any shape of swarm: ``make swarm DECOMPOSERS=n SCORERS=n EXECUTORS=n OBSERVERS=n``.

Every member needs its own ticket, so its own service (``decomposer-1``, ... ``observer``,
``observer-2``, ...): replicas of one service would share a data directory. The
top-level ``docker-compose.yml`` is this module's output for the default shape (a test
keeps them equal: ``python -m chaos.docker.compose --write-default`` rewrites it); any
other shape is written under the lab's directory with its Prometheus targets beside it.

    python -m chaos.docker.compose --shape 5/7/5/2 --out out/lab
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STRATEGIES = ("geography", "activity", "day")  # the decomposers' styles, in turn

HEADER = """\
# The swarm as containers, one member each, on one bridge network (mDNS works on it;
# masquerading is off, so nothing is routed outside this machine). `make swarm` builds
# the image, admits every member (LAB_DIR/admin is the cluster's authority; each member's
# data directory LAB_DIR/members/NAME holds its key and ticket and is mounted at /data),
# brings this up, submits the goal and follows it; `make swarm-down` removes it all.
# Works with `docker compose` v2 and Debian's docker-compose 1.29.
#
# LLM=llama (default): every member thinks with one shared, batched model (the `model`
# service, profile "model": swarm model-service over the GGUF file SWARM_MODEL_FILE on the
# host, mounted read-only), at MEMBER_LLM=openai LLM_URL=http://model:8090/v1. LLM_URL=URL
# points them at any other OpenAI-compatible server instead (the Makefile then leaves the
# model service out). LLM=scripted: the deterministic stand-in. LLM_PARALLEL: the model
# calls each executor and decomposer runs at once (the Makefile gives 2 with the model
# service, which batches them; else 1). CLUSTER names the gossip topic (and must match the
# tickets).
#
# Written by chaos/docker/compose.py for the shape {shape}; `make swarm DECOMPOSERS=n
# SCORERS=n EXECUTORS=n OBSERVERS=n` writes the same for another shape under LAB_DIR.

x-member: &member
  image: swarm-plan:0.1.0
  pull_policy: never
  networks: [lab]
  environment:
    SWARM_MODEL: /models/model.gguf
  restart: "no"

services:
"""

AGENT = """\
  {name}:
    <<: *member
    command: agent --role {role} --data-dir /data --cluster ${{CLUSTER:-lab}} --llm ${{MEMBER_LLM:-openai}} \
--llm-url ${{LLM_URL:-http://model:8090/v1}} --llm-latency ${{LLM_LATENCY:-0.5}} --llm-parallel ${{LLM_PARALLEL:-1}} \
--listen /ip4/0.0.0.0/tcp/4001 --metrics 0.0.0.0:9100{extra}
    volumes: ["${{LAB_DIR:-./out/lab}}/members/{name}:/data"]
"""

FIRST_OBSERVER = """\
  # The silent observer serves the live page (swarm observe --web) on this machine only:
  # http://127.0.0.1:${WEB_PORT:-8080}/ (make swarm prints it).
  observer:
    <<: *member
    command: observe --web 0.0.0.0:8080 --data-dir /data --cluster ${CLUSTER:-lab} --listen /ip4/0.0.0.0/tcp/4001
    ports: ["127.0.0.1:${WEB_PORT:-8080}:8080"]
    volumes: ["${LAB_DIR:-./out/lab}/members/observer:/data"]
"""

MORE_OBSERVER = """\
  {name}:
    <<: *member
    command: observe --web 0.0.0.0:8080 --data-dir /data --cluster ${{CLUSTER:-lab}} --listen /ip4/0.0.0.0/tcp/4001
    volumes: ["${{LAB_DIR:-./out/lab}}/members/{name}:/data"]
"""

FOOTER = """\
  # One batched model for every member on this host (swarm model-service): started by
  # `make swarm` with LLM=llama unless LLM_URL names another server. SWARM_MODEL_FILE is
  # any GGUF file on the host (default: the packaged Qwen 0.5B); MODEL_THREADS its cores.
  model:
    <<: *member
    profiles: [model]
    restart: unless-stopped  # members wait for it and carry on when it is back
    command: model-service --listen 0.0.0.0:8090 --threads ${{MODEL_THREADS:-2}} --slots ${{MODEL_SLOTS:-8}}
    volumes: ["${{SWARM_MODEL_FILE:-/dev/null}}:/models/model.gguf:ro"]

  # Not started by `up`: `make swarm` runs it for `swarm submit` (as the admitted client, the
  # roster from members.json) and `swarm observe` (as an admitted observer).
  client:
    <<: *member
    profiles: [tools]
    volumes: ["${{OUT_DIR:-./out}}:/out", "${{LAB_DIR:-./out/lab}}/client:/client",
              "${{LAB_DIR:-./out/lab}}/watcher:/watcher", "${{LAB_DIR:-./out/lab}}/admin/members.json:/roster.json:ro"]

  # `make swarm PROMETHEUS=1`: Debian's Prometheus (the binary from its package, mounted into
  # the member image) scrapes every member's /metrics, found by DNS ({prometheus});
  # http://127.0.0.1:${{PROMETHEUS_PORT:-9090}}/ on this machine.
  prometheus:
    image: swarm-plan:0.1.0
    pull_policy: never
    profiles: [metrics]
    networks: [lab]
    entrypoint: ["/opt/prometheus/prometheus"]
    command: ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/tmp/prometheus",
              "--web.listen-address=0.0.0.0:9090"]
    ports: ["127.0.0.1:${{PROMETHEUS_PORT:-9090}}:9090"]
    volumes: ["${{PROMETHEUS_BIN:-/dev/null}}:/opt/prometheus/prometheus:ro",
              "${{PROMETHEUS_WEB:-/dev/null}}:/usr/share/prometheus/web:ro",
              "{prometheus}:/etc/prometheus/prometheus.yml:ro"]

networks:
  lab:
    driver: bridge
    driver_opts:
      com.docker.network.bridge.enable_ip_masquerade: "false"
"""

PROMETHEUS = """\
# Prometheus for the compose cluster (docker-compose.yml, profile "metrics"): every member
# serves /metrics on port 9100 (swarm agent --metrics 0.0.0.0:9100). Docker's DNS answers a
# service's name with the address of every container of it, so scaled services are found too.
# Written by chaos/docker/compose.py for the shape {shape}.
global:
  scrape_interval: 5s
  evaluation_interval: 5s
scrape_configs:
  - job_name: swarm
    dns_sd_configs:
      - names: [{names}]
        type: A
        port: 9100
        refresh_interval: 10s
    relabel_configs:
      - source_labels: [__meta_dns_name]
        target_label: service
"""


@dataclass(frozen=True)
class Shape:
    decomposers: int = 3
    scorers: int = 3
    executors: int = 3
    observers: int = 1

    def __str__(self) -> str:
        return f"{self.decomposers}/{self.scorers}/{self.executors}/{self.observers}"

    @classmethod
    def parse(cls, text: str) -> Shape:
        """``D/S/E/O``: at least one of each role, and at most 50 members in all."""
        try:
            numbers = [int(part) for part in text.split("/")]
        except ValueError:
            numbers = []
        if len(numbers) != 4 or min(numbers) < 1:
            raise ValueError(f"{text!r} is not a shape: write DECOMPOSERS/SCORERS/EXECUTORS/OBSERVERS, "
                             "each at least 1 (e.g. 3/3/3/1)")
        shape = cls(*numbers)
        if sum(numbers) > 50:
            raise ValueError(f"{text!r} is {sum(numbers)} members; this lab runs at most 50 on one machine")
        return shape

    def members(self) -> list[tuple[str, str]]:
        """(name, role) of every member, in the compose file's order."""
        out = [(f"{role}-{i}", role) for role, count in (("decomposer", self.decomposers),
                                                           ("scorer", self.scorers),
                                                           ("executor", self.executors))
               for i in range(1, count + 1)]
        return out + [("observer" if i == 1 else f"observer-{i}", "observer") for i in range(1, self.observers + 1)]


def role_args(name: str, role: str) -> str:
    """What a member's command adds for its role: decomposers take the strategies in turn."""
    if role != "decomposer":
        return ""
    return f" --strategy {STRATEGIES[(int(name.rsplit('-', 1)[1]) - 1) % len(STRATEGIES)]}"


def render_compose(shape: Shape, prometheus: str = "./chaos/docker/prometheus.yml") -> str:
    parts = [HEADER.format(shape=shape)]
    for name, role in shape.members():
        if role == "observer":
            parts.append(FIRST_OBSERVER if name == "observer" else MORE_OBSERVER.format(name=name))
            continue
        parts.append(AGENT.format(name=name, role=role, extra=role_args(name, role)))
    parts.append(FOOTER.format(prometheus=prometheus))
    return "".join(parts)


def render_prometheus(shape: Shape) -> str:
    names = [name for name, role in shape.members() if role != "observer"]
    lines, line = [], ""
    for name in names:  # wrapped as the default file is, so the default comes out the same
        piece = f"{name}, "
        if line and len(" " * 15 + line + piece) > 84:
            lines.append(line.rstrip())
            line = ""
        line += piece
    lines.append(line.rstrip(", "))
    return PROMETHEUS.format(shape=shape, names=("\n" + " " * 16).join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.docker.compose", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default=str(Shape()), help="DECOMPOSERS/SCORERS/EXECUTORS/OBSERVERS")
    parser.add_argument("--out", type=Path, help="write docker-compose.yml and prometheus.yml into this directory")
    parser.add_argument("--members", action="store_true", help="print each member as NAME:ROLE (for make)")
    parser.add_argument("--check", action="store_true", help="only check the shape (a clear error if it is not one)")
    parser.add_argument("--write-default", action="store_true",
                        help="rewrite the top-level docker-compose.yml and chaos/docker/prometheus.yml")
    args = parser.parse_args(argv)
    try:
        shape = Shape.parse(args.shape)
    except ValueError as exc:
        parser.error(str(exc))
    if args.check:
        return 0
    if args.members:
        print(" ".join(f"{name}:{role}" for name, role in shape.members()))
        return 0
    if args.write_default:
        (ROOT / "docker-compose.yml").write_text(render_compose(Shape()))
        (ROOT / "chaos" / "docker" / "prometheus.yml").write_text(render_prometheus(Shape()))
        return 0
    if args.out is None:
        sys.stdout.write(render_compose(shape))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "docker-compose.yml").write_text(render_compose(shape, prometheus="./prometheus.yml"))
    (args.out / "prometheus.yml").write_text(render_prometheus(shape))
    print(f"compose file for {len(shape.members())} members ({shape}) in {args.out}/docker-compose.yml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
