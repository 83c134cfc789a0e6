"""The training programs' domain error: bad input the user can fix, reported as one line."""


class TrainingError(RuntimeError):
    """A run that cannot start or continue for a reason the user can fix (one line)."""
