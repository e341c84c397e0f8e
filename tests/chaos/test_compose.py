"""The compose file for any shape: the committed one is the default shape's, every member
gets its own service, data directory and ticket-bearing volume, and Prometheus finds each."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from chaos.docker.compose import ROOT, Shape, render_compose, render_prometheus


def test_the_committed_compose_files_are_the_default_shape() -> None:
    assert (ROOT / "docker-compose.yml").read_text() == render_compose(Shape()), \
        "docker-compose.yml drifted from chaos/docker/compose.py: python -m chaos.docker.compose --write-default"
    assert (ROOT / "chaos" / "docker" / "prometheus.yml").read_text() == render_prometheus(Shape())


def test_any_shape_gets_one_service_per_member_and_prometheus_finds_each(tmp_path) -> None:
    shape = Shape.parse("5/7/9/2")
    done = subprocess.run([sys.executable, "-m", "chaos.docker.compose", "--shape", "5/7/9/2", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    compose = yaml.safe_load((tmp_path / "docker-compose.yml").read_text())
    services = compose["services"]
    members = shape.members()
    assert len(members) == 23 and set(services) == {name for name, _ in members} | {"client", "prometheus", "model"}
    for name, role in members:
        service = services[name]
        assert service["volumes"][0].endswith(f"/members/{name}:/data"), service
        if role == "observer":
            assert service["command"].startswith("observe --web"), service
            assert ("ports" in service) == (name == "observer"), "only the first observer takes the host's port"
        else:
            assert f"agent --role {role} " in service["command"], service
            # every member thinks with the host's one model service, or the server LLM_URL names
            assert "--llm ${MEMBER_LLM:-openai} --llm-url ${LLM_URL:-http://model:8090/v1}" in service["command"]
            assert len(service["volumes"]) == 1, "members need no model file of their own"
    assert services["model"]["command"].startswith("model-service --listen 0.0.0.0:8090")
    assert services["model"]["profiles"] == ["model"]
    assert services["model"]["volumes"] == ["${SWARM_MODEL_FILE:-/dev/null}:/models/model.gguf:ro"]
    strategies = [services[f"decomposer-{i}"]["command"].rsplit(" ", 1)[1] for i in range(1, 6)]
    assert strategies == ["geography", "activity", "day", "geography", "activity"]
    assert services["prometheus"]["volumes"][-1].startswith("./prometheus.yml:")
    scraped = yaml.safe_load((tmp_path / "prometheus.yml").read_text())["scrape_configs"][0]["dns_sd_configs"][0]
    assert scraped["names"] == [name for name, role in members if role != "observer"]


@pytest.mark.parametrize(("shape", "says"), [("3/3/3", "is not a shape"), ("3/0/3/1", "is not a shape"),
                                             ("20/20/10/1", "at most 50"), ("a/b/c/d", "is not a shape")])
def test_a_shape_that_is_not_one_is_refused_naming_it(shape: str, says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "chaos.docker.compose", "--shape", shape, "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and says in done.stderr and shape in done.stderr, done.stderr
