"""Errors the engine raises, each meant to be shown to a user as one line."""


class NagareError(Exception):
    """Base class: str(err) is a complete one-line message for the user."""


def one_line(exc: BaseException) -> str:
    """Any exception as one line for a user: a NagareError's own message, else its type and the
    first line of its text."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, NagareError) else text


class PresetError(NagareError):
    """A preset (file, override or variant default) is invalid; nothing has been run."""

    def __init__(self, source: str, key: str | None, given: object, allowed: str):
        self.source, self.key, self.given, self.allowed = source, key, given, allowed
        where = f"{source}: {key}" if key else source
        given_txt = "" if given is _NOTHING else f": got {given!r}"
        # "file.toml: is not valid TOML (…)": with neither key nor value, what follows is said of the source
        sep = "; " if key or given is not _NOTHING else ": "
        super().__init__(f"{where}{given_txt}{sep}{allowed}")


_NOTHING = object()
PresetError.NOTHING = _NOTHING  # marker for "no value to show" (e.g. a missing file)


class BackendUnavailable(NagareError):
    """The requested backend (e.g. cupy) cannot be used on this machine."""


class VariantUnavailable(NagareError):
    """A variant choice exists but cannot run here (no GPU, too much shared memory, ...)."""


class Diverged(NagareError):
    """The state holds NaN or Inf; the run must stop rather than render garbage."""

    def __init__(self, family: str, step: int, detail: str):
        self.family, self.step, self.detail = family, step, detail
        super().__init__(f"{family} diverged at step {step}: {detail}")


class CheckpointError(NagareError):
    """A checkpoint file cannot be read or does not fit the running engine."""
