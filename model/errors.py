"""The one error type for a user's mistake: a file, a column, an option, a model directory or a
config that cannot be used. The CLI prints its message as one line and exits non-zero; every
layer raises a subclass, so the entry point needs to know no other type."""


class UserError(Exception):
    """A mistake in what the user gave; its message is one readable line naming it."""
