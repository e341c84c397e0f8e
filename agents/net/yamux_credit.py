"""When a yamux reader gives its sender credit back: half a window at a time, as go-yamux.

py-libp2p 0.8.1's yamux sends a WINDOW_UPDATE frame after nearly every read (its
"partial slack" rule credits whatever was read, even a hundred bytes, however full the
window still is): one more frame encrypted, sent, received and decrypted for each gossip
message. At thirty idle members that was a fifth of each member's CPU. go-yamux (and the
yamux spec's intent) sends an update only once the credit owed reaches half the window;
``credit_half_a_window`` puts that rule in place of py-libp2p's, keeping its window
auto-tuning (the target doubles within four round trips of a busy stream).

No deadlock: a sender blocks only with a whole window unacknowledged, all of it at the
reader, whose reads of it reach half a window and send the update. One cost: py-libp2p's
writer gives up after 5 s at a zero window (go-yamux waits), and a reader now holds
back up to half a window of credit, so a reader that stops reading for 5 s with a
window's worth on its way fails its sender a little sooner than before. Sync readers
read each frame as it comes (the window also grows for a busy stream).
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
    """Install the rule (idempotent; for every yamux stream of this process). A py-libp2p
    without the method it replaces is refused at once, not patched blind."""
    for needed in ("_auto_tune_and_send_window_update", "_grow_to_delta", "_apply_autotune_epoch",
                   "send_window_update"):
        if not hasattr(YamuxStream, needed):
            raise RuntimeError(f"py-libp2p's YamuxStream has no {needed}: agents/net/yamux_credit.py "
                               "was written for py-libp2p 0.8.1; check the pinned version (requirements.lock)")
    YamuxStream._auto_tune_and_send_window_update = _credit_when_half_is_owed  # type: ignore[method-assign]


__all__ = ["credit_half_a_window"]
