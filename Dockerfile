# One image for every swarm member; the role is the container's command
# (swarm agent --role ...). `make image` builds it without the network:
#  - BASE_IMAGE: python:3.11-slim-bookworm where a registry answers; elsewhere a local
#    Debian bookworm made by chaos/docker/base-image.sh (debootstrap + docker import);
#  - dependencies arrive as wheels built on the host (make wheels), installed with --no-index.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
# libfaketime skews one member's wall clock in the lab (monotonic time untouched).
# The local base has it already; the registry base fetches it here.
RUN if [ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]; then \
      apt-get update -q && apt-get install -y -q --no-install-recommends faketime libgomp1 \
      && rm -rf /var/lib/apt/lists/*; fi
COPY wheelhouse/ /tmp/wheelhouse/
RUN python3 -m venv /opt/swarm \
 && /opt/swarm/bin/pip install -q --no-index --find-links /tmp/wheelhouse swarm-plan \
 && if ls /tmp/wheelhouse/llama_cpp_python-*.whl >/dev/null 2>&1; then \
      /opt/swarm/bin/pip install -q --no-index --find-links /tmp/wheelhouse llama_cpp_python; fi \
 && rm -rf /tmp/wheelhouse /root/.cache
ENV PATH=/opt/swarm/bin:$PATH PYTHONUNBUFFERED=1 LANG=C.UTF-8
WORKDIR /data
ENTRYPOINT ["swarm", "--log-json"]
CMD ["--help"]
