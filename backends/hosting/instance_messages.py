"""What an instance process may send the server, checked before the server acts on it.

The channel decodes an instance's frames as plain values (``plain_values``); ``check`` then
holds each message to its kind's shape, so that the code that acts on it (``ProcessBackend``,
the Python backend, the BLS data plane) can index it without meeting a list where a tuple
belongs, a text that is not a string or a count that is not an integer. Tensor references are
checked where they are read (``SegmentReader.get``), a BLS request's payload by the data plane
that serves it. A message that breaks its shape is MalformedMessage: the server then treats
the instance as broken (it kills and restarts it) and the batch fails naming what was wrong.

=================  ==============================================================
``loaded``         (segment path, load result)
``load_error``     (text)
``done``           (tensors)
``done_requests``  (results, exec id); a result is ("ok", tensors) or
                   ("failed" | "error", status, text); None for a decoupled model
``failed``         (status, text[, exec id])
``response``       ((exec id, index), tensors or None, (status, text) or None, flags)
``log``            (level, text)
``metric``         (operation, ...): ``custom_metrics.apply`` checks the rest
``call``           (call id, payload, stream)
``cancel_call``    (call id)
``closed``         ()
=================  ==============================================================

where tensors are a list of (name, reference) pairs. The readiness channel carries one kind
only, ``ready`` (question number, ready, error text or None), checked by ``check_ready_answer``.
"""

from __future__ import annotations

from collections.abc import Callable

from .plain_values import MalformedMessage

#: the longest text kept of a log line or an error a model sends (the rest is cut)
MAX_TEXT = 64 * 1024


def _text(value, what: str) -> str:
    if type(value) is not str:
        raise MalformedMessage(f"{what} is not a string")
    return value


def _integer(value, what: str) -> int:
    if type(value) is not int:
        raise MalformedMessage(f"{what} is not an integer")
    return value


def _tensors(value, what: str) -> None:
    if type(value) is not list:
        raise MalformedMessage(f"{what} is not a list of tensors")
    for pair in value:
        if type(pair) is not tuple or len(pair) != 2 or type(pair[0]) is not str:
            raise MalformedMessage(f"{what} holds something else than (name, tensor) pairs")


def _arity(message: tuple, *counts: int) -> None:
    if len(message) - 1 not in counts:
        raise MalformedMessage(f"a '{message[0]}' message of {len(message) - 1} fields")


def _loaded(m: tuple) -> None:
    _arity(m, 2)
    _text(m[1], "the segment path")


def _load_error(m: tuple) -> None:
    _arity(m, 1)
    _text(m[1], "the load error")


def _done(m: tuple) -> None:
    _arity(m, 1)
    _tensors(m[1], "the outputs")


def _status_text(status, text) -> None:
    _text(status, "a status")
    _text(text, "an error text")


def _done_requests(m: tuple) -> None:
    _arity(m, 2)
    if m[1] is None:  # a decoupled model's: its responses came on their own
        _integer(m[2], "the exec id")
        return
    if type(m[1]) is not list:
        raise MalformedMessage("the results are not a list")
    for result in m[1]:
        if type(result) is not tuple or not result:
            raise MalformedMessage("a result is not a tuple")
        if result[0] == "ok" and len(result) == 2:
            _tensors(result[1], "a response's outputs")
        elif result[0] in ("failed", "error") and len(result) == 3:
            _status_text(result[1], result[2])
        else:
            raise MalformedMessage(f"a result of kind '{str(result[0])[:40]}'")
    _integer(m[2], "the exec id")


def _failed(m: tuple) -> None:
    _arity(m, 2, 3)
    _status_text(m[1], m[2])
    if len(m) == 4:
        _integer(m[3], "the exec id")


def _response(m: tuple) -> None:
    _arity(m, 4)
    index = m[1]
    if type(index) is not tuple or len(index) != 2 or any(type(i) is not int for i in index):
        raise MalformedMessage("a response's index is not (exec id, position)")
    if m[2] is not None:
        _tensors(m[2], "a response's outputs")
    if m[3] is not None:
        if type(m[3]) is not tuple or len(m[3]) != 2:
            raise MalformedMessage("a response's error is not (status, text)")
        _status_text(*m[3])
    _integer(m[4], "a response's flags")


def _log(m: tuple) -> None:
    _arity(m, 2)
    _text(m[1], "a log level")
    _text(m[2], "a log line")


def _metric(m: tuple) -> None:
    if len(m) < 2:
        raise MalformedMessage("a metric change without its operation")
    _text(m[1], "a metric operation")


def _call(m: tuple) -> None:
    _arity(m, 3)
    _integer(m[1], "a call's id")
    if type(m[3]) is not bool:
        raise MalformedMessage("a call's stream flag is not a boolean")


def _cancel_call(m: tuple) -> None:
    _arity(m, 1)
    _integer(m[1], "a call's id")


def _closed(m: tuple) -> None:
    _arity(m, 0)


_CHECKS: dict[str, Callable[[tuple], None]] = {
    "loaded": _loaded,
    "load_error": _load_error,
    "done": _done,
    "done_requests": _done_requests,
    "failed": _failed,
    "response": _response,
    "log": _log,
    "metric": _metric,
    "call": _call,
    "cancel_call": _cancel_call,
    "closed": _closed,
}


def check(message: tuple) -> tuple:
    """``message`` itself if it has its kind's shape (the module docstring), else MalformedMessage."""
    checker = _CHECKS.get(message[0])
    if checker is None:
        raise MalformedMessage(f"a message of unknown kind '{message[0][:40]}'")
    checker(message)
    return message


def check_ready_answer(message: tuple) -> tuple:
    """``message`` itself if it is a readiness answer, ``("ready", seq, ready, error)``, else
    MalformedMessage."""
    if message[0] != "ready":
        raise MalformedMessage(f"a message of kind '{message[0][:40]}' on the readiness channel")
    _arity(message, 3)
    _integer(message[1], "a readiness answer's question number")
    if type(message[2]) is not bool:
        raise MalformedMessage("a readiness answer's ready is not a boolean")
    if message[3] is not None:
        _text(message[3], "a readiness answer's error")
    return message


def bounded(text: str) -> str:
    """A model's text (log line, error) cut to ``MAX_TEXT`` characters."""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... ({len(text) - MAX_TEXT} more characters)"
