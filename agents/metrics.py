"""Prometheus metrics of one member: ``swarm agent --metrics HOST:PORT`` serves ``/metrics``.

Counters come from the member's own statistics, copied by the member's trio task
once a second into a snapshot that the exporter's thread only reads (nothing in
the member is touched from another thread). Latencies and sizes are histograms
observed where they happen. Each member has its own registry, so several members
in one process (tests, the simulation) never mix their figures.

Gossip delivery latency is the receiver's clock minus the author's hybrid
timestamp: it includes the two clocks' skew, which is what an operator wants to
see anyway (a member whose clock runs ahead shows up as negative latencies: 0 here).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

_COUNTERS = {
    "received": "events received and admitted, by gossip or sync",
    "published": "events this member signed and published",
    "synced_in": "events that arrived by sync",
    "sync_refused": "sync conversations refused: the peer holds no valid ticket",
    "sync_timeouts": "sync conversations dropped at their deadline",
    "sync_violations": "sync conversations a peer broke (oversized frame, malformed message, too many streams)",
    "sync_rounds": "rounds of the sync loop (each pulls from the connected peers with no pull running)",
    "sync_open_failed": "pulls that could not open a stream to a connected peer",
    "pulls_whole": "pulls that ran to their end (all the peer offered was asked for)",
    "sync_skipped": "wanted events a pull left to other pulls (or gossip) of this member that brought them meanwhile",
    "sync_bytes_in": "frame bytes received in sync conversations (pulls and serves)",
    "sync_bytes_out": "frame bytes sent in sync conversations (pulls and serves)",
    "reorganisations": "times a decision this member showed changed (must stay 0)",
    "model_calls": "model calls started",
    "model_calls_dropped": "model calls given up under way because the tree no longer wanted their answer "
                           "(the node was decided, the claim lost)",
    "store_errors": "writes the store refused",
    "own_stalls": "stalls of this process noticed (a tick woke over a second late): liveness probes across them do not count",
    "liveness_kept": "peers that left two liveness probes unanswered but were heard from between them, so kept",
    "peers_learned": "peers first learned from a peer's listing (peer exchange)",
    "peers_refused": "peer-exchange conversations refused: no valid ticket, or a listing that breaks the rules",
    "peers_forgotten": "learned peers forgotten after failing their dials",
    "peer_asks_too_soon": "peer-exchange asks closed unanswered: the same peer had been answered under 10 s before",
    "gossip_half_open": "peers whose connections were dropped (to be redialled) because we held a gossip stream to "
                        "them for 10 s without knowing their subscriptions (py-libp2p forgets them when a stream with "
                        "the peer fails)",
}


@dataclass(frozen=True)
class Snapshot:
    stats: Mapping[str, int] = field(default_factory=dict)
    refused: Mapping[str, int] = field(default_factory=dict)
    held: int = 0
    stored: int = 0
    pending: int = 0
    complete: bool = False


class _SnapshotCollector:
    def __init__(self, metrics: MemberMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        snap = self._metrics.snapshot
        role = self._metrics.role
        for name, doc in _COUNTERS.items():
            family = CounterMetricFamily(f"swarm_{name}", doc, labels=["role"])
            family.add_metric([role], snap.stats.get(name, 0))
            yield family
        refused = CounterMetricFamily("swarm_refused", "events refused, each once, by the rule they broke",
                                      labels=["role", "rule"])
        for rule, count in sorted(snap.refused.items()):
            refused.add_metric([role, rule], count)
        yield refused
        for name, doc, value in (("held", "events held for being ahead of this member's clock", snap.held),
                                 ("events_stored", "events in this member's store", snap.stored),
                                 ("events_pending", "events waiting for a gap in their feed", snap.pending),
                                 ("plan_complete", "1 when this member sees every goal done", int(snap.complete))):
            gauge = GaugeMetricFamily(f"swarm_{name}", doc, labels=["role"])
            gauge.add_metric([role], value)
            yield gauge


class MemberMetrics:
    def __init__(self, role: str) -> None:
        self.role = role
        self.registry = CollectorRegistry()
        self.snapshot = Snapshot()
        self.delivery = Histogram(
            "swarm_gossip_delivery_seconds", "receiver's clock minus the author's timestamp, for events by gossip",
            ["role"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.pulls = Histogram("swarm_sync_pull_events", "events a sync pull brought, per pull", ["role"],
                               registry=self.registry, buckets=(0, 1, 10, 100, 1000, 10_000, 100_000))
        self.model_seconds = Histogram("swarm_model_call_seconds", "seconds per model call, by kind",
                                       ["role", "kind"], registry=self.registry,
                                       buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
        self.tokens = Counter("swarm_model_tokens", "tokens the model generated, by kind", ["role", "kind"],
                              registry=self.registry)
        self.unreachable = Counter("swarm_model_unreachable", "model calls that could not reach the model at all",
                                   ["role"], registry=self.registry)
        self.registry.register(_SnapshotCollector(self))  # type: ignore[arg-type]

    def delivered(self, latency_ms: int) -> None:
        self.delivery.labels(self.role).observe(max(0, latency_ms) / 1000)

    def pulled(self, events: int) -> None:
        self.pulls.labels(self.role).observe(events)

    def thought(self, kind: str, seconds: float, tokens: int = 0) -> None:
        self.model_seconds.labels(self.role, kind).observe(seconds)
        self.tokens.labels(self.role, kind).inc(max(0, tokens))

    def model_unreachable(self) -> None:
        self.unreachable.labels(self.role).inc()

    def serve(self, host: str, port: int) -> threading.Thread:
        """Serve ``/metrics`` on HOST:PORT from a daemon thread; raises OSError if it cannot listen."""
        _server, thread = start_http_server(port, addr=host, registry=self.registry)
        return thread


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` for every interface) -> (host, port); ValueError names the problem."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"wants HOST:PORT (for example 0.0.0.0:9100), not {text!r}")
    return host or "0.0.0.0", int(port)
