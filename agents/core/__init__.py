"""The pure core: events, hybrid logical clock, per-author feeds and the tree fold.

Nothing in this package touches the network, the disk, the wall clock or a
language model. Every function here is a function of its arguments, which is
what lets every member of the swarm compute the same plan from the same events.
"""
