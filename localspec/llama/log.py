"""llama.cpp's log, and its backend initialised once with that log installed (``init_backend``).

llama.cpp logs through one callback for the whole process. Ours prints its lines only when
verbose, and keeps the error-level ones of the call in progress on this thread
(``llama_errors``), so that the message of a call that failed gives llama.cpp's own reason
(``llama_reason``) instead of a guess.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import sys
import threading
from collections.abc import Iterator, Sequence

import llama_cpp as L

# ggml's log levels (ggml.h, enum ggml_log_level). llama-cpp-python's _logger.py lists an older
# numbering, in which 3 was the error level; here 3 is a warning.
_LOG_ERROR = 4
_LOG_CONT = 5  # a continuation of the previous line, at that line's level
_MAX_ERROR_LINES = 16  # a damaged file can make llama.cpp log an error per tensor


class _Process:
    """What every thread shares: whether llama.cpp's lines are printed, and whether its
    backend is initialised (once per process)."""

    verbose = False
    backend_ready = False


class _ThisThread(threading.local):
    """What llama.cpp logged on this thread: it calls the log callback on the thread that
    called into it, so a load on a worker thread keeps its own lines."""

    errors: list[str] | None = None  # the error-level lines, while ``llama_errors`` is on
    level = 0  # the level of the last line, which a continuation line takes


_process = _Process()
_this_thread = _ThisThread()


def init_backend(verbose: bool | None = None) -> None:
    """Install the log (``verbose``: print llama.cpp's lines to stderr; None keeps the current
    setting) and initialise llama.cpp's backend if it is not yet."""
    if verbose is not None:
        _process.verbose = verbose
    L.llama_log_set(_log, ctypes.c_void_p(0))
    if not _process.backend_ready:
        L.llama_backend_init()
        _process.backend_ready = True


@L.llama_log_callback
def _log(level: int, text: bytes, user_data) -> None:
    """llama.cpp logs to stderr by default; we print its lines only with verbose on, and keep
    its error-level ones for the message of the call that failed (``llama_errors``)."""
    try:
        line = (text or b"").decode("utf-8", "replace")
        here = _this_thread
        if level != _LOG_CONT:
            here.level = level
        errors = here.errors
        if here.level == _LOG_ERROR and errors is not None:
            if level == _LOG_CONT and errors:
                errors[-1] += line
            elif len(errors) < _MAX_ERROR_LINES:
                errors.append(line)
        if _process.verbose:
            print(line, end="", file=sys.stderr)
    except Exception:  # nothing may raise into C (at shutdown this module's globals may be gone)
        pass


# llama.cpp keeps a bare pointer to the callback: one more reference that is never dropped
# keeps the ctypes thunk alive even while the interpreter shuts down, when models left open
# are freed (and llama.cpp logs) after this module's globals are gone
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_log))


@contextlib.contextmanager
def llama_errors() -> Iterator[list[str]]:
    """The error-level lines llama.cpp logs on this thread inside the block, for a message
    that gives llama.cpp's own reason. Blocks nest: an outer one gets the inner one's lines."""
    here = _this_thread
    lines: list[str] = []
    outer, here.errors = here.errors, lines
    try:
        yield lines
    finally:
        here.errors = outer
        if outer is not None:
            outer.extend(lines[: _MAX_ERROR_LINES - len(outer)])


# what llama.cpp logs after a specific reason, which says nothing more
_GENERIC = {"failed to load model"}
_FUNCTION_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_:]*: ")


def llama_reason(lines: Sequence[str], fallback: str) -> str:
    """llama.cpp's own reason from its error lines ("error loading model: check_tensor_dims:
    tensor 'blk.4.attn_norm.weight' not found"), each once, without the function name it starts
    with or the generic lines that follow a specific one; ``fallback`` when it logged none."""
    said = list(dict.fromkeys(_FUNCTION_PREFIX.sub("", s.strip(), count=1) for s in lines if s.strip()))
    specific = [s for s in said if s not in _GENERIC]
    return "; ".join(specific or said) or fallback
