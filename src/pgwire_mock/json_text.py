"""``json.loads`` for text from outside (files, HTTP bodies, stream lines).

Python's parser recurses once per nesting level: ``[[[[…`` 100,000 deep raises
RecursionError, which no caller expects from malformed input (a traceback from the CLI,
an HTML 500 from the control interface). Here it is a JSONDecodeError like any other
malformed text, so every caller's existing handling covers it.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["loads"]


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; JSONDecodeError ("nested too deeply") where it recursed
    too deep."""
    try:
        return json.loads(text)
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deeply", doc, 0) from None
