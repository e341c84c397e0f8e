#!/usr/bin/env bash
# Make sure a Docker engine answers, starting one where none runs.
#
# Elsewhere (a laptop, a CI runner with Docker) the engine that is already there
# is used and nothing is installed. On a machine like ours, with the docker
# client but no engine, it installs Debian's docker.io (as root, via apt) and
# starts dockerd in the background, logging to /var/log/swarm-dockerd.log.
set -euo pipefail

answers() { timeout 10 docker info >/dev/null 2>&1; }

if answers; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "no Docker engine answers and none is installed here: install and start Docker" \
         "(https://docs.docker.com/engine/install/), then run this again" >&2
    exit 2
  fi
  echo "engine: installing Debian's docker.io (no Docker engine on this machine)"
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
fi
if [ "$(id -u)" != 0 ]; then
  echo "no Docker engine answers: start it (e.g. 'sudo systemctl start docker'), or run as root" \
       "to let this script start dockerd" >&2
  exit 2
fi
echo "engine: starting dockerd in the background (log: /var/log/swarm-dockerd.log)"
nohup dockerd --host unix:///var/run/docker.sock >/var/log/swarm-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if answers; then
    echo "engine: docker answers"
    exit 0
  fi
  sleep 1
done
echo "dockerd started but does not answer after 60 s; see /var/log/swarm-dockerd.log" >&2
tail -20 /var/log/swarm-dockerd.log >&2 || true
exit 1
