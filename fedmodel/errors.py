"""The one error type for bad input anywhere in the model: its message is the one line a user sees."""


class ModelError(ValueError):
    """Bad input: malformed view SQL, an unknown relation or column, a type mismatch, a bad file."""
