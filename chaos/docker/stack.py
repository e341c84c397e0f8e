"""The stack file for Docker Swarm mode: ``make stack`` deploys the swarm on one or many machines.

The same shape and services as the compose file (``chaos.docker.compose``), written for
``docker stack deploy``, whose schema refuses what the compose file needs on one engine
(``profiles``, ``pull_policy``) and which needs what a multi-host cluster needs:

* an **overlay** network (attachable, so ``make stack`` can run ``swarm submit`` and
  ``swarm observe`` beside it), on which multicast does not pass: no mDNS. Every member is
  given one bootstrap address, the first observer's by its service name
  (``/dns4/observer/tcp/4001/p2p/ID``, resolved at each dial), and learns the rest from its
  peers (``agents/net/peer_exchange.py``). The observer's peer id comes from the lab's
  ``admin/members.json``, so this file is written after ``make admit``.
* ``endpoint_mode: dnsrr`` everywhere, and ``mode: host`` for published ports: Swarm's
  virtual IPs and routing mesh need IPVS, which not every kernel has (this one does not).
* the model service once per machine (``mode: global``, port 8090 published on the
  machine), and every member asking the one on its own machine at
  ``host.docker.internal``, which ``extra_hosts: host-gateway`` points at the machine.
* bind mounts as in the compose file: LAB_DIR (and SWARM_MODEL_FILE) must be at the same
  path on every machine (the README says how to copy them).

    python -m chaos.docker.stack --shape 3/3/3/1 --lab out/lab > out/lab/docker-stack.yml
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chaos.docker.compose import Shape, role_args

HEADER = """\
# The swarm on Docker Swarm mode (`make stack`; `make stack-down` removes it): one service per
# member, on an overlay network, found through the first observer's DNS name and then from
# each other (peer exchange). Written by chaos/docker/stack.py for the shape {shape} and the
# cluster admitted in LAB_DIR ({lab}).
version: "3.8"

x-member: &member
  image: swarm-plan:0.1.0
  networks: [lab]
  environment:
    SWARM_MODEL: /models/model.gguf
    SWARM_BOOTSTRAP: {bootstrap}
  extra_hosts: ["host.docker.internal:host-gateway"]  # this machine, where its model service listens
  deploy:
    endpoint_mode: dnsrr
    restart_policy: {{condition: on-failure, delay: 2s}}

services:
"""

AGENT = """\
  {name}:
    <<: *member
    command: agent --role {role} --data-dir /data --cluster ${{CLUSTER:-lab}} --llm ${{MEMBER_LLM:-openai}} \
--llm-url ${{LLM_URL:-http://host.docker.internal:8090/v1}} --llm-latency ${{LLM_LATENCY:-0.5}} \
--llm-parallel ${{LLM_PARALLEL:-1}} --listen /ip4/0.0.0.0/tcp/4001 --no-mdns --metrics 0.0.0.0:9100{extra}
    volumes: ["${{LAB_DIR:-./out/lab}}/members/{name}:/data"]
"""

OBSERVER = """\
  {name}:
    <<: *member
    command: observe --web 0.0.0.0:8080 --data-dir /data --cluster ${{CLUSTER:-lab}} --listen /ip4/0.0.0.0/tcp/4001 \
--no-mdns
    volumes: ["${{LAB_DIR:-./out/lab}}/members/{name}:/data"]
{ports}"""

PAGE_PORT = """\
    ports:  # the live page, on the machine that runs the observer
      - target: 8080
        published: ${WEB_PORT:-8080}
        mode: host
"""

FOOTER = """\
  # One batched model per machine (swarm model-service over SWARM_MODEL_FILE, which must be at
  # that path on every machine); members reach their own machine's at host.docker.internal:8090.
  # Left out (--no-model) for `make stack LLM=scripted` or LLM_URL=... (a server of your own).
  model:
    <<: *member
    command: model-service --listen 0.0.0.0:8090 --threads ${MODEL_THREADS:-2} --slots ${MODEL_SLOTS:-8}
    volumes: ["${SWARM_MODEL_FILE:-/dev/null}:/models/model.gguf:ro"]
    ports: [{target: 8090, published: 8090, mode: host}]
    deploy:
      mode: global
      endpoint_mode: dnsrr
      restart_policy: {condition: any, delay: 2s}

networks:
  lab:
    driver: overlay
    attachable: true
"""


def bootstrap_address(lab: Path) -> str:
    """The first observer's address by its service name, with its peer id from members.json."""
    members = lab / "admin" / "members.json"
    try:
        listed = json.loads(members.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {members} ({exc}): run 'make admit' (or 'make stack', which does) first") \
            from None
    for member in listed:
        if member.get("name") == "observer" and member.get("role") == "observer":
            return f"/dns4/observer/tcp/4001/p2p/{member['peer']}"
    raise ValueError(f"{members} admits no member named 'observer': run 'make admit' for this lab")


def render_stack(shape: Shape, lab: Path, model: bool = True) -> str:
    parts = [HEADER.format(shape=shape, lab=lab, bootstrap=bootstrap_address(lab))]
    for name, role in shape.members():
        if role == "observer":
            parts.append(OBSERVER.format(name=name, ports=PAGE_PORT if name == "observer" else ""))
            continue
        parts.append(AGENT.format(name=name, role=role, extra=role_args(name, role)))
    footer = FOOTER if model else "\n" + FOOTER[FOOTER.index("networks:"):]
    parts.append(footer)
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.docker.stack", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default=str(Shape()), help="DECOMPOSERS/SCORERS/EXECUTORS/OBSERVERS")
    parser.add_argument("--lab", type=Path, required=True, help="the admitted lab directory (LAB_DIR)")
    parser.add_argument("--no-model", dest="model", action="store_false",
                        help="leave the model service out (LLM=scripted, or LLM_URL names another server)")
    parser.add_argument("--bootstrap", action="store_true",
                        help="only print the address every member bootstraps from (for swarm submit)")
    args = parser.parse_args(argv)
    try:
        if args.bootstrap:
            print(bootstrap_address(args.lab))
            return 0
        sys.stdout.write(render_stack(Shape.parse(args.shape), args.lab.resolve(), args.model))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
