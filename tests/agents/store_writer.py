"""A writer process for the durability test: stores events one by one, acknowledging each.

Usage: python -m tests.agents.store_writer DATA_DIR EVENTS.jsonl [unsynced]
It prints "ack <id>" on stdout after each ``add_many`` has returned (committed; with
``unsynced``, committed without waiting for the disk, as a member stores others' events).
"""

import sys

from agents.core.decode import decode_event
from agents.store import EventStore

store = EventStore.open(sys.argv[1])
durable = sys.argv[3:] != ["unsynced"]
with open(sys.argv[2], "rb") as lines:
    for line in lines:
        event = decode_event(line.strip())
        store.add_many([event], durable=durable)
        sys.stdout.write(f"ack {event.id}\n")
        sys.stdout.flush()
