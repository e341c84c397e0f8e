"""The cyclic garbage collector and a member's event set.

A member holds every event it stores for as long as it runs, each as some twenty small
objects (the event, its body, their dicts, strings and tuples). The collector walks every
object it tracks on each full collection, and a full collection comes each time the heap
has grown by a quarter since the last: a catch-up of 100k events spent 2.8 of its 15.5 s
collecting (14 full collections), and one of a million spent far more. Events hold no
reference cycles, so the collector could never free them anyway.

``Settler.held`` counts the events a member has come to hold and, every ``SETTLE_EVERY``
of them, runs a full collection (of what is not settled yet: no cyclic garbage is kept)
and moves everything the collector tracks into its permanent generation (``gc.freeze``),
which later collections skip. A member loading a store of ``SETTLE_EVERY`` events or more
settles once, after its first fold, so that the events and the tree it starts with are
walked once, not by every collection the load and the fold set off (a start on 100k events:
1.3 s of collections before). The price: an object alive at a settle that later dies in a
reference cycle (a task, a connection) is never freed; settles are rare (a member at a
plan's usual size, a few thousand events, never settles after its start), so that stays
small. The freeze is the whole process's: in one that runs many members (the simulated
world) the first to reach ``SETTLE_EVERY`` settles them all.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SETTLE_EVERY = 10_000  # events held since the last settle that make the next


class Settler:
    def __init__(self) -> None:
        self._since = 0

    def held(self, events: int) -> bool:
        """``events`` more are held for good; True when that settled the heap."""
        self._since += events
        if self._since < SETTLE_EVERY:
            return False
        self._since = 0
        gc.collect()
        gc.freeze()
        return True


@contextmanager
def settled() -> Iterator[None]:
    """No automatic collection inside (a ``Settler``'s still runs): for a fold, which makes a
    tree's worth of objects and no cycles, for decoding many events, and for a whole command
    that builds its state once, reports it and exits (``swarm inspect``, ``replay``, a
    one-shot ``observe``: ``agents.cli.main.run_command``). Each collection they set off walked what they made and freed nothing: a
    store of 100k events read back took 2.9 s with them, 2.0 s without, and a 100k-event
    catch-up's main thread spent 1.4 of its CPU seconds collecting. Cyclic garbage made inside
    (a network's tasks and streams, in a one-shot ``observe``) is freed only at a settle, or
    once the block ends: a catch-up of fewer than ``SETTLE_EVERY`` events keeps its own (a few
    hundred objects) until it exits.

    The collector's switch is the process's, and threads use this at once (the lab's recorder
    reads stores beside its main thread): the first to come in turns it off and the last to
    leave turns it back on, if it was on. Each restoring what it found turned it back on while
    another was still inside, and could leave it off for good: a second that found it off (the
    first inside) and turned it off just after the first had turned it on again."""
    global _inside, _was_on
    with _switch:
        if _inside == 0:
            _was_on = gc.isenabled()
            gc.disable()
        _inside += 1
    try:
        yield
    finally:
        with _switch:
            _inside -= 1
            if _inside == 0 and _was_on:
                gc.enable()


_switch = threading.Lock()
_inside = 0  # ``settled`` blocks running now, in every thread
_was_on = False  # whether the collector was on when the first of them came in


__all__ = ["SETTLE_EVERY", "Settler", "settled"]
