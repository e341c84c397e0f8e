#!/usr/bin/env bash
# Make sure this Docker engine is in a swarm (Docker Swarm mode), for `make stack`.
#
# An engine already in a swarm (a manager of one you set up across your machines) is used
# as it is. One in none is made a one-node swarm with `docker swarm init`, and this says so:
# `docker swarm leave --force` undoes it.
set -euo pipefail

state=$(docker info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null || true)
case "$state" in
  active) exit 0 ;;
  inactive) ;;
  "") echo "no Docker engine answers: run 'make engine' (or start Docker) first" >&2; exit 2 ;;
  *) echo "this engine's swarm state is '$state': wait for it to settle, or 'docker swarm leave --force'" >&2; exit 2 ;;
esac
echo "stack: this engine is in no swarm; making it a one-node swarm (docker swarm init; 'docker swarm leave --force' undoes it)"
if ! docker swarm init >/dev/null 2>/tmp/swarm-init.$$; then
  # several addresses and none chosen: a one-node swarm needs none that others can reach
  if grep -q "advertise" /tmp/swarm-init.$$; then
    docker swarm init --advertise-addr 127.0.0.1 >/dev/null
  else
    cat /tmp/swarm-init.$$ >&2; rm -f /tmp/swarm-init.$$; exit 1
  fi
fi
rm -f /tmp/swarm-init.$$
