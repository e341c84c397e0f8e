"""The two ways a ``swarm`` command fails, and their exit codes (see ``agents.cli.main``)."""


class UsageError(Exception):
    """Bad arguments or input (exit 2); the message says what is wrong and what to do."""


class CommandError(Exception):
    """A command that could not do its job (exit 1); the message says why."""
