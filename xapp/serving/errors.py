"""Why a forecast is not answered as asked, in the serving core's own terms: the HTTP layer maps
each to its status code (``http.errors``), KServe's route to its error type."""

from __future__ import annotations


class RequestError(Exception):
    """A request the client must change to be answered."""


class InvalidRequest(RequestError):
    """A request the model cannot answer as asked: a step other than its grid's, a horizon past
    its own, quantiles it does not forecast, a series with no observed value."""


class UnknownModel(RequestError, LookupError):
    """A model name the xApp does not serve; the message names those it does."""


class NotHeld(RequestError, LookupError):
    """A cell whose history the xApp does not hold."""


class TooLittleHistory(RequestError):
    """A held cell with less history than one forecast reads."""


class Excluded(RequestError):
    """A cell an A1 policy instance excludes from forecasting."""


class DecisionConflict(RequestError):
    """A model decision the deployment's state does not allow now: no candidate to promote,
    nothing to roll back to, or another decision made meanwhile."""


class Shed(Exception):
    """Refused to protect the latency budget, or while no model is loaded: the client may try
    again after ``retry_after_s``."""

    def __init__(self, reason: str, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s
