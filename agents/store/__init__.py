"""Persistence adapters. ``EventStore`` keeps a member's events in SQLite."""

from agents.store.sqlite import DiskFailed, EventStore, StoreError

__all__ = ["DiskFailed", "EventStore", "StoreError"]
