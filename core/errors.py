"""The one error type for bad user input: the command line prints its message and exits 2."""


class RlhlsError(ValueError):
    """Bad input: a malformed format, an unknown design, a bad parameter.

    The message is one line naming what was wrong, where, and what was expected.
    """
