"""Network adapters. The member and the sync protocol speak only to ``Network``
(``base.py``); ``p2p.py`` implements it over libp2p, and a simulated one can
implement it in memory."""

from agents.net.base import Network, PeerStream

__all__ = ["Network", "PeerStream"]
