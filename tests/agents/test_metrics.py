"""``swarm agent --metrics``: a member's Prometheus endpoint, scraped during a real run."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.cli.plan import free_port
from tests.cluster import LocalCluster

pytestmark = pytest.mark.slow


def _scrape(port: int) -> dict[str, float]:
    """Every sample as 'name{label=value,...}' -> value, parsed by the Prometheus client's own parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def test_a_members_metrics_move_while_it_works_and_parse(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, f"metrics-{tmp_path.name}")
    names = cluster.shape(1, 3, 1)
    port = free_port()
    cluster.extra_args["scorer-0"] = ("--metrics", f"127.0.0.1:{port}")
    try:
        cluster.start()
        before = _scrape(port)
        assert before["swarm_events_stored{role=scorer}"] == 0
        assert before["swarm_plan_complete{role=scorer}"] == 0
        cluster.submit("Plan a two-week trip to Japan")
        cluster.wait_for("the plan to complete", lambda: all(cluster.tree(n).complete for n in names), 90)
        cluster.wait_for("the exporter to see it",
                         lambda: _scrape(port).get("swarm_plan_complete{role=scorer}") == 1, 10)
        # the member still stores what comes late (a slower scorer's ballot, an ack), so the
        # gauge and the store are compared until they agree, not in one racy snapshot each
        cluster.wait_for("the exporter to count what the store holds",
                         lambda: _scrape(port)["swarm_events_stored{role=scorer}"]
                         == len(cluster.event_ids("scorer-0")) > 0, 10)
        after = _scrape(port)
        assert after["swarm_received_total{role=scorer}"] > 0
        assert after["swarm_published_total{role=scorer}"] > 0  # it voted, balloted, acked
        assert after["swarm_model_calls_total{role=scorer}"] > 0
        assert after["swarm_gossip_delivery_seconds_count{role=scorer}"] > 0
        assert after["swarm_reorganisations_total{role=scorer}"] == 0
        assert after["swarm_sync_bytes_in_total{role=scorer}"] > 0 and after["swarm_sync_bytes_out_total{role=scorer}"] > 0
        assert "swarm_own_stalls_total{role=scorer}" in after and "swarm_liveness_kept_total{role=scorer}" in after
        assert any(k.startswith("swarm_model_call_seconds_count{kind=") and v > 0 for k, v in after.items())
        # tokens by kind (the scripted stand-in generates none; llama and openai count theirs)
        assert any(k.startswith("swarm_model_tokens_total{kind=") for k in after), sorted(after)
    finally:
        cluster.stop()
