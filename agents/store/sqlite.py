"""A member's event set on disk: SQLite in WAL mode, one row per event, inserts idempotent.

Durability contract: when ``add_many`` returns, its events are committed; a
process killed with SIGKILL at any moment afterwards restarts with them
(``tests/agents/test_store_durability.py`` proves it by killing a real writer).
A commit waits for the disk (``synchronous=FULL``: the log is fsynced, and with it
every commit before) only when asked, ``durable=True``, and ``sync`` makes what
was committed before it durable: a power cut can take the tail of the log that
no fsync covered, never more. The member asks for it where something depends on
the disk (its own events before it sends them; the goals it holds before it serves
a client a summary, which the client reads as held and leaves on; what it is about to
show, before it shows it: ``agents.member``); everything else
it holds came from peers, who give it again. An fsync per delivered event was the
longest stall of a member's event loop: fifty members fsyncing each probe on one
disk (see ``agents.member``).
The store's own fsync of the log fsyncs the directory too the first time it meets a
log SQLite created (a new file's name is on the disk only then: ``agents.durable``);
SQLite does the same for the commits it fsyncs.
Events are stored as their canonical wire bytes and were verified before they
were written; reading them back re-checks the ids.

One connection, shared by the member's event loop and its store thread (a catch-up's
commits run there while the loop parses the next frames: ``agents.syncing``); a lock
keeps them to one statement sequence at a time.

Schema changes are numbered migrations applied in order and recorded in
``PRAGMA user_version``; a store newer than this code is refused, not touched.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from agents.core.decode import decode_event
from agents.core.events import Event, EventRefused
from agents.durable import sync_directory
from agents.heap import settled

DB_NAME = "events.sqlite3"

_MIGRATIONS: tuple[str, ...] = (
    # 1: the event set, and local counters kept beside it (never part of the digest)
    """
    CREATE TABLE events (
        id TEXT PRIMARY KEY,
        author TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        hlc_ms INTEGER NOT NULL,
        hlc_counter INTEGER NOT NULL,
        raw BLOB NOT NULL
    );
    CREATE INDEX events_by_author ON events (author, seq);
    CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
    """,
)


class StoreError(RuntimeError):
    """The store cannot be opened or used; the message says why and what to do."""


class DiskFailed(RuntimeError):
    """The disk failed a write or an fsync (an I/O error, not a full disk). Whether the commit
    under way is on it nobody can say (SQLite may find it in the log at the next open), and
    an fsync that failed once may report success the next time, the kernel having dropped
    what it could not write. So nothing may rest on this store any more: the member stops,
    shows nothing more, and never signs again at the seq the failed commit held. Not a
    ``StoreError``: every caller that takes a refused write as worth retrying (a full disk)
    lets this one through, and the member ends."""


# rows per INSERT statement: one statement is one step of SQLite's engine, taken without the
# GIL, where ``executemany`` took it back for every row (a thread storing beside a busy event
# loop waited up to the switch interval per row); under SQLite's 32766 bound on parameters
ROWS_PER_INSERT = 4096
NORMAL, FULL = 1, 2  # SQLite's ``synchronous`` levels: a WAL commit written, or written and fsynced
BUSY_TIMEOUT_S = 5.0  # how long a connection waits on another's lock
CACHE_KIB = 32 * 1024  # SQLite's page cache per connection, filled only as pages are read


def _write_ahead(db: sqlite3.Connection) -> None:
    """Turn WAL on. SQLite answers "database is locked" at once, without waiting on the busy
    timeout, to a connection switching a new file to WAL while another switches it too (a
    member and a reader of its data directory opening it together); the mode is kept in the
    file, so the loser finds it on when it asks again. Bounded by the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def _disk_error(exc: sqlite3.OperationalError) -> bool:
    """SQLite's I/O error (a write or an fsync the disk failed), as against a full disk, a busy
    database and the like."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_IOERR


def _insert_statement(rows: int) -> str:
    return ("INSERT OR IGNORE INTO events (id, author, seq, kind, hlc_ms, hlc_counter, raw) VALUES "
            + ",".join(("(?,?,?,?,?,?,?)",) * rows))


class EventStore:
    """The events one member holds. Open with ``EventStore.open(data_dir)``."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._db = connection
        self.path = path
        self._lock = threading.RLock()  # the event loop and the store thread share ``_db``
        # held from an fsync to recording what it found (taken before ``_lock``): a commit does not
        # wait for it, but another fsync does (see ``failed``)
        self._fsync_lock = threading.RLock()
        self._rows_per_insert = min(ROWS_PER_INSERT, connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // 7)
        self._level = NORMAL  # the connection's ``synchronous`` level now
        # a commit since the last fsync of the log, which a power cut may take; at first, an
        # earlier process's commits may be in the page cache only (it was killed): a member
        # syncs before its first fold shows them (a reader of the store need not)
        self.unsynced = True
        self._commits = 0  # commits so far: a sync clears ``unsynced`` only when none came while it ran
        self._wal_entry: int | None = None  # the log (inode) whose directory entry was fsynced
        # the disk's first failure: every write and sync after it is refused with it, or a later
        # fsync (a new descriptor, which never hears of an error reported on another) would
        # pass for the disk holding what it may have dropped
        self.failed: DiskFailed | None = None

    @classmethod
    def open(cls, data_dir: str | Path) -> EventStore:
        directory = Path(data_dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create data directory {directory}: {exc.strerror}") from None
        path = directory / DB_NAME
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            _write_ahead(db)
            db.execute("PRAGMA synchronous=NORMAL")  # in WAL mode: a commit is written, not fsynced
            # pages kept in memory, at most: the index on ``id`` takes inserts at random places,
            # and with SQLite's 2 MB default a catch-up of 100k events (a 10 MB index) read
            # its pages back again and again: storing them cost 15% more CPU
            db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            store = cls(db, path)
            store._migrate()
            (verdict,) = db.execute("PRAGMA quick_check").fetchone()
            if verdict != "ok":
                raise sqlite3.DatabaseError(f"integrity check: {verdict}")
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"{path} is not a usable event store ({exc}); move it aside to start afresh, "
                "the swarm will sync the events back from its peers"
            ) from None
        return store

    def _migrate(self) -> None:
        """Apply the migrations this store lacks. The version is read again inside the write
        transaction: two processes opening a new store at once (a member and a reader of its
        data directory) both saw version 0, and the second failed on ``table events already
        exists``."""
        version = self._version()
        self._refuse_newer(version)
        if version == len(_MIGRATIONS):
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            version = self._version()
            self._refuse_newer(version)
            for number in range(version, len(_MIGRATIONS)):
                for statement in _MIGRATIONS[number].split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version={number + 1}")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _version(self) -> int:
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        return int(version)

    def _refuse_newer(self, version: int) -> None:
        if version > len(_MIGRATIONS):
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this program knows "
                f"({len(_MIGRATIONS)}); upgrade swarm-plan to open it"
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, event: Event) -> bool:
        """Store one event; True if it was new. Durable when this returns."""
        return self.add_many([event]) == 1

    def add_many(self, events: Iterable[Event], durable: bool = True) -> int:
        """Store events in one transaction; returns how many were new. ``durable``: on the disk
        when this returns, with every commit before it; otherwise committed (a killed process
        keeps them) but not fsynced until a later durable commit or ``sync``. Safe to call
        from another thread than the one that opened the store."""
        rows = [
            (e.id, e.author, e.seq, e.kind, e.hlc[0], e.hlc[1], e.to_wire()) for e in events
        ]
        if not rows:
            return 0
        # a failure is recorded before another thread may sync
        with self._fsync_lock if durable else contextlib.nullcontext(), self._lock:
            self._refuse_if_failed()
            try:
                self._set_level(FULL if durable else NORMAL)
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    before = self._db.total_changes
                    for start in range(0, len(rows), self._rows_per_insert):
                        chunk = rows[start:start + self._rows_per_insert]
                        self._db.execute(_insert_statement(len(chunk)), [value for row in chunk for value in row])
                    added = self._db.total_changes - before
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
                if durable and added:
                    self._synced()  # the log was fsynced at this commit, with every commit before it
                elif durable and self.unsynced:
                    self._fsync_log()  # nothing new written: SQLite had nothing to fsync
                elif added:
                    self.unsynced = True
                    self._commits += 1
            except sqlite3.OperationalError as exc:
                if _disk_error(exc):
                    raise self._write_failed(exc) from None
                raise StoreError(
                    f"cannot write to {self.path}: {exc}; free space on its disk: nothing already stored is "
                    "lost, and events not stored are fetched again by sync"
                ) from None
        return added

    def sync(self) -> None:
        """Make every commit so far durable (an fsync of the write-ahead log, which holds every
        commit not yet copied into the database, whose copies are fsynced by SQLite itself).
        Nothing to do when no commit came since the last. The fsync runs outside the store's
        lock: a commit on another thread (the event loop's, while this runs on a thread) does not
        wait for the disk; what it wrote may or may not be covered, so ``unsynced`` stays set.
        Another fsync waits (``_fsync_lock``): one that failed is recorded before the next
        starts, which would not hear of it."""
        with self._fsync_lock:
            with self._lock:
                self._refuse_if_failed()
                if not self.unsynced:
                    return
                commits = self._commits
            self._fsync_log(commits)

    def _refuse_if_failed(self) -> None:
        if self.failed is not None:
            raise DiskFailed(str(self.failed))

    def _failing(self, message: str) -> DiskFailed:
        """The disk failed: remember it (``failed``), and the error to raise."""
        self.failed = DiskFailed(message)
        return self.failed

    def _write_failed(self, exc: sqlite3.OperationalError) -> DiskFailed:
        return self._failing(f"the disk under {self.path} failed a write ({exc}); the member stops rather than "
                             "sign or show anything resting on it: check the disk, then restart the member (what "
                             "reached the disk is kept; sync fetches the rest again)")

    def _fsync_log(self, commits: int | None = None) -> None:
        """Fsync the log, holding ``_fsync_lock``. ``commits``: the commit count when the caller
        let go of ``_lock`` (all those are covered; ``unsynced`` is cleared only if no other came
        meanwhile); ``None``: called under ``_lock``, where none can come."""
        self._refuse_if_failed()
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            descriptor = os.open(wal, os.O_RDONLY)
        except FileNotFoundError:  # checkpointed and removed: everything is in the database
            self._covered(commits)
            return
        try:
            os.fsync(descriptor)
            entry = os.fstat(descriptor).st_ino
            if entry != self._wal_entry:  # a log SQLite created since: its name is on the disk only
                sync_directory(self.path.parent)  # once the directory is (``agents.durable``)
                self._wal_entry = entry
        except OSError as exc:
            with self._lock:
                raise self._failing(f"cannot flush {wal} to its disk: {exc.strerror}; the member stops rather "
                                    "than show what may not be on the disk (an fsync that failed once may not be "
                                    "retried): restart it once the disk works; what it committed is kept, and "
                                    "events a failing disk lost are fetched again by sync") from None
        finally:
            os.close(descriptor)
        self._covered(commits)

    def _covered(self, commits: int | None) -> None:
        with self._lock:
            self._refuse_if_failed()  # another thread's fsync failed meanwhile: this one proves nothing
            if commits is None or commits == self._commits:
                self._synced()

    def _synced(self) -> None:
        """Every commit so far is on the disk (a subclass may record what the disk holds)."""
        self.unsynced = False

    def _set_level(self, level: int) -> None:
        if level != self._level:
            self._db.execute(f"PRAGMA synchronous={level}")
            self._level = level

    def has(self, event_id: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM events WHERE id = ?", (event_id,)).fetchone() is not None

    def count(self) -> int:
        with self._lock:
            (n,) = self._db.execute("SELECT COUNT(*) FROM events").fetchone()
        return int(n)

    def _decode(self, rows: Iterable[tuple[bytes]]) -> Iterator[Event]:
        for (raw,) in rows:
            try:
                yield decode_event(bytes(raw), verify_signature=False)
            except EventRefused as exc:
                raise StoreError(
                    f"{self.path} holds a damaged event ({exc}); move the file aside and "
                    "let the member sync its events back from its peers"
                ) from None

    def events(self) -> list[Event]:
        """Every stored event (in storage order, which means nothing: fold is order-free)."""
        with self._lock, settled():  # read as decoded, not fetched whole: a million rows' bytes at once is 700 MB
            return list(self._decode(self._db.execute("SELECT raw FROM events ORDER BY rowid")))

    def events_by(self, author: str, after_seq: int = 0) -> list[Event]:
        with self._lock, settled():
            rows = self._db.execute(
                "SELECT raw FROM events WHERE author = ? AND seq > ? ORDER BY seq", (author, after_seq)
            )
            return list(self._decode(rows))

    def bump(self, counter: str, by: int = 1) -> None:
        """Add to a local counter (refused events and the like): facts about this member only,
        committed without an fsync. A full disk skips the count rather than fail the member:
        it is not worth a crash; a failing disk stops it, as any write would."""
        with self._lock:
            self._refuse_if_failed()
            self._set_level(NORMAL)
            try:
                self._db.execute(
                    "INSERT INTO counters (name, value) VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                    (counter, by),
                )
            except sqlite3.OperationalError as exc:
                if _disk_error(exc):
                    raise self._write_failed(exc) from None

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {name: value for name, value in self._db.execute("SELECT name, value FROM counters")}
