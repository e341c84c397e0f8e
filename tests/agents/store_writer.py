"""A writer process for the durability test: stores events one by one, acknowledging each.

Usage: python -m tests.agents.store_writer DATA_DIR EVENTS.jsonl
It prints "ack <id>" on stdout after each ``add`` has returned (committed).
"""

import sys

from agents.core.decode import decode_event
from agents.store import EventStore

store = EventStore.open(sys.argv[1])
with open(sys.argv[2], "rb") as lines:
    for line in lines:
        event = decode_event(line.strip())
        store.add(event)
        sys.stdout.write(f"ack {event.id}\n")
        sys.stdout.flush()
