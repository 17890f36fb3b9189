"""Base class of every error that means "refused before writing anything" (exit code 2)."""


class RefusedError(ValueError):
    """Bad config, input, checkpoint or environment: the message tells the user what to fix."""
