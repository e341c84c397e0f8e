"""When a yamux reader gives its sender credit back: half a window at a time, as go-yamux.

py-libp2p 0.8.1's yamux sends a WINDOW_UPDATE frame after nearly every read (its
"partial slack" rule credits whatever was read, even a hundred bytes, however full the
window still is): one more frame encrypted, sent, received and decrypted for each gossip
message. At thirty idle members that was a fifth of each member's CPU. go-yamux (and the
yamux spec's intent) sends an update only once the credit owed reaches half the window;
``credit_half_a_window`` puts that rule in place of py-libp2p's, keeping its window
auto-tuning (the target doubles within four round trips of a busy stream).

No deadlock: a sender blocks only with a whole window unacknowledged, all of it at the
reader, whose reads of it reach half a window and send the update.
"""

from __future__ import annotations

from libp2p.stream_muxer.yamux.yamux import YamuxStream


async def _credit_when_half_is_owed(self: YamuxStream, *, bytes_read: int = 0) -> None:
    """``YamuxStream._auto_tune_and_send_window_update`` with go-yamux's threshold."""
    async with self.window_lock:
        buffered = len(self.conn.stream_buffers.get(self.stream_id, b""))
        owed = self.target_recv_window - (self.recv_window + buffered)
        if owed <= 0 or owed < self.target_recv_window // 2:
            return
        increment = self._grow_to_delta(buffered) + self._apply_autotune_epoch(buffered)
    if increment > 0:
        await self.send_window_update(increment, skip_lock=True)


def credit_half_a_window() -> None:
    """Install the rule (idempotent; for every yamux stream of this process)."""
    YamuxStream._auto_tune_and_send_window_update = _credit_when_half_is_owed  # type: ignore[method-assign]


__all__ = ["credit_half_a_window"]
