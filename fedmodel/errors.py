"""The one error type for bad input anywhere in the model: its message is the one line a user sees."""


class ModelError(ValueError):
    """Bad input: malformed view SQL, an unknown relation or column, a type mismatch, a bad file."""


def first_line(err: Exception) -> str:
    """The first line of an error's message (a driver's often runs to several), or its type's name."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
