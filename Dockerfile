# One image for every role; the role is the container's command (swarm agent --role ...,
# from the "living swarm" issue on). With a registry, the default base works as is;
# without one, build a local Debian base (debootstrap + docker import) and pass
# --build-arg BASE_IMAGE=that-image.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
# Dependencies arrive as wheels built on the host (make wheels): the build never needs the network.
COPY wheelhouse/ /tmp/wheelhouse/
RUN python3 -m venv /opt/swarm \
 && /opt/swarm/bin/pip install --no-index --find-links /tmp/wheelhouse swarm-plan \
 && rm -rf /tmp/wheelhouse
ENV PATH=/opt/swarm/bin:$PATH PYTHONUNBUFFERED=1
WORKDIR /data
ENTRYPOINT ["swarm", "--log-json"]
CMD ["--help"]
