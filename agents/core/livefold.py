"""``LiveFold``: the plan kept folded as events arrive, always equal to ``fold`` of them all.

A member folded its whole set again for each batch that gossip or a pull brought: about
1.7 s at 100k events, tens of ms at a plan's few thousand, for every event gossiped.
``LiveFold.add`` takes events in (any order, duplicates ignored) and ``tree`` returns exactly
``fold`` of every event added, the digest included: ``fold`` is ``LiveFold(events).tree()``,
and ``tests/agents/test_livefold.py`` checks every batch of random delivery orders of
adversarial sets against a fold of the same events from scratch.

A batch is applied as a change:

* the events it completes (``Feeds.accepted`` grows by them, pending ones whose gap it
  fills included) go into the index (``FoldIndex.extend``);
* only the nodes they touch are settled again (``agents.core.settle``): a node reads the
  events on it, and the ones its candidates, promises and certificates cite, which
  ``settle.Watched`` notes when it lacks them, so that their arrival settles the node again;
* a newly accepted split grows its subtree, the roll-up climbs from what changed, and the
  nodes that changed are encoded again as the digest's records (the digest itself is hashed
  from them when a tree's is first read: ``PlanTree.digest``).

A new goal grows its tree the same way. An author's feed is kept as one chain
(``feeds.Chain``) while it is one: no second event at a seq, none citing another predecessor
than the one held, no broken link. From the batch that makes it anything else (a fork, a cut,
an event that cannot join the chain: ``Chain.extend`` returns None) it is kept up to date event
by event whatever its shape (``agents.core.tangle``; ``_untangle``), and the events that come
into it are applied as a change like any other's, each read along its own chain
(``FoldIndex.refeed``): an admitted key that forks, and goes on signing on every branch, costs
each member what an honest author's events cost, not a fold of its feed, still less of the
set. Past the first fold, only two things fold the whole set from scratch, as ``fold`` always
did: a split replaced (which only more equivocators than a quorum tolerates can do), and two
goals' trees sharing a node. Neither happens in an honest swarm. Either way the tree is a function of the
set alone, never of the batches it came in.
"""

from __future__ import annotations

from bisect import insort
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from itertools import chain
from typing import Any, TypeVar

from agents.core.canonical import sha256_hex
from agents.core.clock import Timestamp
from agents.core.events import Event, GoalBody, VoteBody
from agents.core.feeds import Chain, build_feeds
from agents.core.index import FoldIndex
from agents.core.settle import Settled, Watched, proposal_view, record_act, root_node, settle_node
from agents.core.tangle import Tangle, issue_key
from agents.core.tree import (
    ClaimView,
    Goal,
    Node,
    PlanTree,
    PromiseView,
    Proposal,
    ResultView,
    RoundView,
    SortedMap,
    digest_of,
    events_hash,
    node_record,
)

T = TypeVar("T")


class LiveFold:
    """An event set and its plan tree, kept folded as events arrive: see the module's doc.

    The state below ``_ready`` is made by ``_from_scratch`` and kept by ``_change``."""

    _index: FoldIndex
    _chains: dict[str, Chain]  # authors whose feed is one chain
    _tangled: dict[str, Tangle]  # authors whose feed is not one chain -> their feed, kept up to date
    _goals: list[Goal]
    _goal_by_id: dict[str, Goal]
    _rostered: frozenset[str]  # every goal's scorers
    _fresh: dict[str, Node]  # node -> as its parent made it, before settling
    _settled: dict[str, Settled]
    _shown: dict[str, Node]  # node -> as the tree shows it, in the order ``fold`` walks them
    _records: dict[str, bytes]  # node -> its digest record, encoded, in the order of ids
    _awaited: dict[str, set[str]]  # an id not held -> the nodes that looked it up

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._events: dict[str, Event] = {}
        self._new: list[Event] = []  # added since the last tree
        self._tree: PlanTree | None = None  # made from the state by the first ``tree`` after a change
        self._ready = False  # whether the state below is a fold of the events but ``_new``
        self.scratch_folds = 0  # folds of the whole set (the first one included)
        self.changes = 0  # batches applied as a change
        self.add(events)

    def __len__(self) -> int:
        return len(self._events)

    def add(self, events: Iterable[Event]) -> int:
        """Take events in (duplicates ignored); returns how many were new. Nothing is folded
        until ``tree``."""
        added = 0
        for event in events:
            if event.id not in self._events:
                self._events[event.id] = event
                self._new.append(event)
                added += 1
        return added

    def tree(self) -> PlanTree:
        """The plan: exactly ``fold`` of every event added so far."""
        if self._new or not self._ready:
            self._fold_new()
        if self._tree is None:
            self._tree = self._publish()
        return self._tree

    def _fold_new(self) -> None:
        """Fold ``_new`` in. Until that succeeds the state counts as unusable: an exception
        half-way (a bug, a full heap) leaves the next ``tree`` to fold the whole set again,
        never to show a half-changed state as a tree."""
        new, self._new = self._new, []
        ready, self._ready, self._tree = self._ready, False, None
        if ready and self._change(new):
            self.changes += 1
        else:
            self._from_scratch()
        self._ready = True

    # --- the whole set ------------------------------------------------------------------

    def _from_scratch(self) -> None:
        self.scratch_folds += 1
        feeds = build_feeds(self._events.values())
        forked_or_cut = feeds.forked_or_cut
        self._chains = defaultdict(Chain)
        for event in chain(feeds.accepted, feeds.pending):
            if event.author not in forked_or_cut:
                self._chains[event.author].hold(event)
        for author, (seq, _) in feeds.heads.items():
            if author not in forked_or_cut:
                self._chains[author].accepted = seq
        tangled: dict[str, list[Event]] = {a: [] for a in sorted(forked_or_cut)}
        for event in chain(feeds.accepted, feeds.pending, feeds.cut):
            if event.author in tangled:
                tangled[event.author].append(event)
        self._tangled = {author: Tangle(author, mine) for author, mine in tangled.items()}
        index = self._index = FoldIndex(feeds)
        self._feed_issues, self._equivocators = list(feeds.issues), set(feeds.equivocators)
        self._heads = dict(feeds.heads)
        self._counted, self._pending = len(feeds.accepted), len(feeds.pending)
        self._ids = sorted(e.id for e in feeds.accepted)

        self._goals = [self._goal(e) for e in index.goals]
        self._goal_by_id = {g.id: g for g in self._goals}
        self._rostered = frozenset(scorer for goal in self._goals for scorer in goal.scorers)
        self._scorer_events: dict[str, int] = defaultdict(int)  # scorer -> its events in the feeds
        self._acts: dict[tuple[str, str], dict[tuple[str, int], Timestamp]] = {}
        self._roles: dict[str, str] = {}
        self._models: dict[str, set[str]] = defaultdict(set)
        for event in feeds.accepted:
            self._count(event, copy=False)
        self._voters = {p: frozenset(v) for p, v in index.voters.items()}

        self._fresh = {}
        self._settled = {}
        self._shown = {}
        self._records = {}
        self._awaited = defaultdict(set)
        self._walk: list[str] | None = None  # the nodes in the order ``fold`` walks them
        self._proposals: dict[str, Proposal] = {}
        self._rounds: dict[tuple[str, int], RoundView] = {}
        self._entered: dict[str, dict[str, int]] = {}
        self._promises: dict[tuple[str, int], tuple[PromiseView, ...]] = {}
        self._certificates: dict[tuple[str, int, str], tuple[tuple[str, str], ...]] = {}
        self._claims: dict[str, ClaimView] = {}
        self._results: dict[str, ResultView] = {}
        self._acked: dict[tuple[str, str], int] = {}
        self._duplicates = 0
        self._breaching: set[str] = set()
        for goal in self._goals:
            self._grow(goal, root_node(goal))
        for node_id in index.proposals:
            if node_id not in self._fresh:
                self._wait(node_id)
        self._roll_up(self._fresh)

    @staticmethod
    def _goal(event: Event) -> Goal:
        body = event.body
        assert isinstance(body, GoalBody)
        return Goal(event.id, event.author, body.text, body.scorers, body.quorum, body.max_depth,
                    body.claim_lease_ms, body.hold_limit_ms, body.round_ms, event.ts)

    def _count(self, event: Event, copy: bool) -> None:
        """What the tree counts per event beside the index: acts, members, ignored scorers."""
        record_act(self._acts, event, copy)
        self._roles[event.author] = event.role
        model = event.body.__dict__.get("model", "")  # no getattr default: see ``record_act``
        if model:
            self._models[event.author].add(model)
        if event.role == "scorer":
            self._scorer_events[event.author] += 1

    # --- a change -----------------------------------------------------------------------

    def _change(self, new: list[Event]) -> bool:
        """Apply a batch as a change; False when only a fold from scratch can take it (the
        state is then left to that fold, which rebuilds it all from the set)."""
        by_author: dict[str, list[Event]] = defaultdict(list)
        for event in new:
            by_author[event.author].append(event)
        grown: list[Event] = []
        refed: dict[str, list[Event]] = {}  # tangled author -> its events new in its feed
        for author, mine in by_author.items():
            if author not in self._tangled:
                held = self._chains[author]
                accepted = held.accepted
                more = held.extend(mine)
                if more is not None:
                    grown.extend(more)
                    self._pending += len(mine) - len(more)
                    if more:
                        self._heads[author] = (more[-1].seq, more[-1].id)
                    continue
                if not self._untangle(author, held, accepted, mine):  # then taken in as a tangled author's
                    return False
            refed[author] = self._refeed(author, mine)
            grown.extend(refed[author])
        # the whole batch is indexed before ``touched`` reads the index: a vote's proposal may
        # come in the same batch
        self._index.extend(e for e in grown if e.author not in refed)
        for more in refed.values():
            self._index.refeed(more)
        self._counted += len(grown)
        dirty: set[str] = set()
        for event in grown:
            self._count(event, copy=True)
            if isinstance(event.body, VoteBody):
                self._voters[event.body.proposal] = frozenset(self._index.voters[event.body.proposal])
            touched = self._index.touched(event)
            if touched is not None:
                dirty.add(touched)
            dirty.update(self._awaited.pop(event.id, ()))
        for author, more in refed.items():
            if more:  # the role of its last event in its feed, as ``fold`` counts them (two tickets, two roots)
                self._roles[author] = self._tangled[author].head.role  # type: ignore[union-attr]
        if grown:
            _merge(self._ids, sorted(e.id for e in grown))
        goals = [self._goal(e) for e in grown if isinstance(e.body, GoalBody)]
        if goals:
            self._goal_by_id.update((g.id, g) for g in goals)
            self._goals = [self._goal_by_id[e.id] for e in self._index.goals]  # in the index's order
            self._rostered = frozenset(scorer for goal in self._goals for scorer in goal.scorers)
        changed: set[str] = set()
        for node_id in sorted((n for n in dirty if n in self._fresh), key=lambda n: self._fresh[n].depth):
            old = self._take_out(node_id)
            fresh = self._fresh[node_id]
            settled = self._put_in(self._goal_by_id[fresh.goal], fresh)
            if settled.node.split != old.node.split:
                if old.node.split is not None:
                    return False  # a split replaced: a breach, which the fold from scratch reports
                if not self._grow(self._goal_by_id[fresh.goal], *settled.children, changed=changed):
                    return False
            changed.add(node_id)
        for goal in goals:
            if not self._grow(goal, root_node(goal), changed=changed):
                return False
        for node_id in dirty:
            if node_id not in self._fresh:
                self._wait(node_id)
        self._roll_up(changed)
        return True

    def _untangle(self, author: str, held: Chain, accepted: int, mine: list[Event]) -> bool:
        """``mine`` stops ``author``'s feed from being one chain (a fork, a broken link, one
        citing an event nobody holds next to its head: ``Chain.extend`` returned None, leaving
        ``held`` half-grown): from now on its feed is kept as any shape, a ``Tangle`` of what it
        held before ``mine`` (seqs 1 to ``accepted`` in the feed, the rest waiting), and each
        of its events in the index is read as a tangled author's are, from its predecessor's
        chain. Its batch, and every later one, is then a change like any other's: a key that
        forks costs a member its own events, not a fold of the whole set. False (a fold from
        scratch, right whatever happened) should what it held not place as the chain did."""
        del self._chains[author]
        new = {event.id for event in mine}
        before = [event for event in held.at.values() if event.id not in new]
        tangle = self._tangled[author] = Tangle(author, before)
        if tangle.counts != {"in": accepted, "cut": 0, "pending": len(before) - accepted}:
            return False
        return self._index.untangle_reads(held.at[seq] for seq in range(1, accepted + 1))

    def _refeed(self, author: str, mine: list[Event]) -> list[Event]:
        """Take new events of an author whose feed is not one chain (its ``Tangle``); returns
        those that came into its feed. Its issues, head, pending count and fork are noted here.
        Only the nodes those events are on settle again, as for any author: how a node reads
        an author's events there, along each of its chains, depends on the events before them
        on the same chain alone, and a new event is never before one held (``_walk_chains``
        reads each event with what is before it on its own chain, ``branches.Branches``: what
        it finds is keyed by event id, ``entered`` is a maximum and acks a union, so what a new
        branch adds never changes what was read before). A batch costs its own events, and
        settling the nodes they are on, as any author's does."""
        tangle = self._tangled[author]
        pending, fork = tangle.counts["pending"], tangle.fork_issue
        more = tangle.add(mine)
        self._pending += tangle.counts["pending"] - pending
        if tangle.head is not None:
            self._heads[author] = (tangle.head.seq, tangle.head.id)
        if tangle.forked:
            self._equivocators.add(author)
        if tangle.fork_issue != fork:  # a fork at a lower seq than the one listed (or the first)
            if fork is not None:
                self._feed_issues.remove(fork)
            insort(self._feed_issues, tangle.fork_issue, key=issue_key)
        _merge(self._feed_issues, tangle.new_links, key=issue_key)
        return more

    # --- nodes --------------------------------------------------------------------------

    def _grow(self, goal: Goal, *nodes: Node, changed: set[str] | None = None) -> bool:
        """Settle new nodes and the subtrees their accepted splits grow (depth first, as
        ``fold`` walks), noting them in ``changed`` when a change grows them. A node already
        in the tree (a set that gives two goals one node) is skipped, as ``fold`` skips the
        second it walks to; in a change that returns False instead: which one ``fold`` walks
        first depends on the whole tree, so only a fold from scratch can tell."""
        stack = list(reversed(nodes))
        while stack:
            node = stack.pop()
            if node.id in self._fresh:
                if changed is not None:
                    return False
                continue
            self._fresh[node.id] = node
            for proposal in self._index.proposals.get(node.id, ()):
                self._proposals.pop(proposal.id, None)  # waiting no more: the node settles it
            self._walk = None
            settled = self._put_in(goal, node)
            if changed is not None:
                changed.add(node.id)
            stack.extend(reversed(settled.children))
        return True

    def _put_in(self, goal: Goal, node: Node) -> Settled:
        missed: set[str] = set()
        settled = self._settled[node.id] = settle_node(goal, node, self._index, Watched(self._index.by_id, missed))
        for event_id in missed:
            self._awaited[event_id].add(node.id)
        self._proposals.update(settled.proposals)
        self._rounds.update(settled.rounds)
        self._entered[node.id] = settled.entered
        self._promises.update(settled.promises)
        self._certificates.update(settled.certificates)
        self._claims.update(settled.claims)
        self._results.update(settled.results)
        self._acked.update(settled.acked)
        self._duplicates += settled.duplicates
        if settled.breaches:
            self._breaching.add(node.id)
        return settled

    def _take_out(self, node_id: str) -> Settled:
        settled = self._settled.pop(node_id)
        for mapping, keys in ((self._proposals, settled.proposals), (self._rounds, settled.rounds),
                              (self._promises, settled.promises), (self._certificates, settled.certificates),
                              (self._claims, settled.claims), (self._results, settled.results),
                              (self._acked, settled.acked)):
            for key in keys:
                del mapping[key]  # type: ignore[attr-defined]
        del self._entered[node_id]
        self._duplicates -= settled.duplicates
        self._breaching.discard(node_id)
        return settled

    def _wait(self, node_id: str) -> None:
        """Proposals on a node that does not exist (yet): they wait, visible."""
        for event in self._index.proposals.get(node_id, ()):
            self._proposals[event.id] = proposal_view(self._index, event, "waiting", frozenset())

    def _roll_up(self, changed: Iterable[str]) -> None:
        """Mark a split node done when all its children are, from ``changed`` up to the roots."""
        todo: set[str] = set()
        for node_id in changed:
            at: str | None = node_id
            while at is not None and at not in todo:
                todo.add(at)
                at = self._fresh[at].parent
        for node_id in sorted(todo, key=lambda n: -self._fresh[n].depth):
            node = self._settled[node_id].node
            if node.split is not None and all(self._shown[c].status == "done" for c in node.children):
                node = replace(node, status="done")
            if self._shown.get(node_id) != node:
                self._shown[node_id] = node  # a new node goes last: ``_order_by_walk`` puts it in place
                self._records[node_id] = node_record(node)

    # --- the tree -----------------------------------------------------------------------

    def _order_by_walk(self) -> list[str]:
        """The nodes in the order ``fold`` walks them (each goal's tree depth first, children
        in their split's order), and, when the tree has grown since the last call, ``_shown``
        put in that order and ``_records`` in the order of ids (the digest's), whatever order
        the events came in."""
        if self._walk is None:  # the tree grew: the orders are made again
            walk: list[str] = []
            seen: set[str] = set()
            for goal in self._goals:
                stack = [goal.id]
                while stack:
                    node_id = stack.pop()
                    if node_id not in seen:
                        seen.add(node_id)
                        walk.append(node_id)
                        stack.extend(reversed(self._settled[node_id].node.children))
            self._shown = {n: self._shown[n] for n in walk}
            self._records = {n: self._records[n] for n in sorted(self._records)}
            self._walk = walk  # last: a walk cut short by an exception is made again next time
        return self._walk

    def _publish(self) -> PlanTree:
        """The tree as of now, in copies that later changes leave alone. The nodes list in the
        order ``fold`` walks them, the other maps in their keys' order: a set's, never the
        order its events came in."""
        walk = self._order_by_walk()
        issues = list(self._feed_issues)
        if self._breaching:
            issues.extend(b for n in walk for b in self._settled[n].breaches)
        # what the digest hashes, as it is now: ``_ids`` is merged into in place, ``_records`` too
        snapshot = (list(self._ids), tuple(g.id for g in self._goals), tuple(self._records.values()))
        return PlanTree(
            goals=tuple(self._goals),
            nodes=dict(self._shown),
            proposals=SortedMap(dict(self._proposals)),
            rounds=SortedMap(dict(self._rounds)),
            entered=SortedMap(dict(self._entered)),
            claims=SortedMap(dict(self._claims)),
            results=SortedMap(dict(self._results)),
            voters=SortedMap(dict(self._voters)),
            acked=SortedMap(dict(self._acked)),
            events=self._counted,
            pending=self._pending,
            duplicate_results=self._duplicates,
            equivocators=frozenset(self._equivocators),
            issues=tuple(issues),
            heads=SortedMap(dict(self._heads)),
            members={a: (self._roles[a], tuple(sorted(self._models[a]))) for a in sorted(self._roles)},
            promises=SortedMap(dict(self._promises)),
            certificates=SortedMap(dict(self._certificates)),
            acts=SortedMap(dict(self._acts)),
            ignored=sum(n for a, n in self._scorer_events.items() if a not in self._rostered),
            hash_digest=partial(_hashed, *snapshot),
        )


def _hashed(ids: list[str], goal_ids: tuple[str, ...], records: tuple[bytes, ...]) -> str:
    """A tree's digest from what ``_publish`` kept of the fold (a function, not a closure: a
    tree can be pickled)."""
    return sha256_hex(digest_of(events_hash(ids, presorted=True), goal_ids, records))


def _merge(ordered: list[T], more: list[T], key: Callable[[T], Any] | None = None) -> None:
    """Put ``more`` into ``ordered``, sorted by ``key``: a few one by one, many in one pass
    (timsort merges the two runs when ``more`` is sorted too)."""
    if len(more) < 16:
        for item in more:
            insort(ordered, item, key=key)
    else:
        ordered.extend(more)
        ordered.sort(key=key)
