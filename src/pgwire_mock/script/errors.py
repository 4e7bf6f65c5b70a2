"""The one exception of the script package."""

from __future__ import annotations

__all__ = ["OptionError", "PublicationMissingError", "ScriptError"]


class ScriptError(ValueError):
    """A script that cannot be loaded or encoded, as one line naming the place.

    ``str(err)`` is ``"<source>: <where>: <problem>"`` (``script.yaml: steps[3].changes[0]
    .values.id: expected int4, got 'abc'``); :attr:`source`, :attr:`where` and
    :attr:`problem` hold the parts.
    """

    def __init__(self, problem: str, where: str = "", source: str = "") -> None:
        self.problem = problem
        self.where = where
        self.source = source
        super().__init__(self._line())

    def _line(self) -> str:
        return ": ".join(part for part in (self.source, self.where, self.problem) if part)

    def located(self, source: str) -> ScriptError:
        """The same error, naming the file it came from."""
        err = type(self)(self.problem, self.where, source)
        err.__cause__ = self.__cause__
        return err

    def __str__(self) -> str:
        return self._line()


class OptionError(ScriptError):
    """START_REPLICATION options pgoutput would refuse; carries PostgreSQL's SQLSTATE.

    The message text is PostgreSQL's own, so a server can send it as an ErrorResponse.
    """

    def __init__(self, problem: str, where: str = "", source: str = "", *, sqlstate: str) -> None:
        self.sqlstate = sqlstate
        super().__init__(problem, where, source)

    def located(self, source: str) -> ScriptError:
        return OptionError(self.problem, self.where, source, sqlstate=self.sqlstate)


class PublicationMissingError(OptionError):
    """A requested publication the script does not declare.

    PostgreSQL reports it only when the first change is decoded (after CopyBothResponse),
    so :func:`~pgwire_mock.script.encode_stream` raises it at that point of the stream.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f'publication "{name}" does not exist', sqlstate="42704")

    def located(self, source: str) -> ScriptError:
        return self
