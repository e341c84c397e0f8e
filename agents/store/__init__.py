"""Persistence adapters. ``EventStore`` keeps a member's events in SQLite."""

from agents.store.sqlite import EventStore, StoreError

__all__ = ["EventStore", "StoreError"]
