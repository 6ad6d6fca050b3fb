"""The one error shape of the API, ``{"error": {"code", "message", "details"}}``,
and the handlers that give every 4xx/5xx answer that shape.

``code`` is the problem type (stable, machine-readable); ``message`` says what
to do and is written here, never copied from a library's exception (its
text can carry addresses, paths or internals: the server's log keeps it)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    500: "internal_error",
    503: "unavailable",
}


#: Problem types (``code``) of answers whose cause is the source, not the request.
SOURCE_UNAVAILABLE = "source_unavailable"
SOURCE_UNAVAILABLE_MESSAGE = (
    "the source cannot be read now (its listing or its ACL sidecar could not be read); "
    "send the notification again later"
)
SOURCE_UNUSABLE = "source_unusable"
SOURCE_UNUSABLE_MESSAGE = (
    "the source's connector cannot be used: check its options, its credentials_ref and its ACL "
    "sidecar (.ragsync-acl.json: a JSON object with default, rules and deny lists); the operator's "
    "log names the cause"
)


class ApiError(Exception):
    """An error answered in the common error shape.

    Attributes:
        status: HTTP status code.
        code: stable machine-readable code.
        message: human-readable message.
        details: extra entries (field errors).
        headers: response headers (``WWW-Authenticate`` for 401).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or STATUS_CODES.get(status, "error")
        self.message = message
        self.details = details or []
        self.headers = headers


class ErrorDetail(BaseModel):
    """Error body content."""

    code: str
    message: str
    details: list[dict[str, Any]]


class ErrorOut(BaseModel):
    """The one error shape of every 4xx/5xx answer."""

    error: ErrorDetail


#: The error answers most endpoints document in the OpenAPI description.
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": name}
    for code, name in ((401, "unauthorized"), (404, "not found"), (413, "body too large"), (422, "invalid"))
}

#: Route options of an action accepted for later work (``202``, the usual errors).
ACCEPTED: dict[str, Any] = {"status_code": 202, "responses": ERRORS}


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The one error shape: ``{"error": {"code", "message", "details"}}``."""
    return {"error": {"code": code, "message": message, "details": details or []}}


def error_response(
    status: int, code: str, message: str, details: list[dict[str, Any]] | None = None, **kw: Any
) -> JSONResponse:
    """A JSON response in the error shape (``kw`` goes to ``JSONResponse``, e.g. ``headers``)."""
    return JSONResponse(error_body(code, message, details), status_code=status, **kw)


def not_found(what: str) -> ApiError:
    """404 for ``what`` (unknown and another tenant's ids answer alike)."""
    return ApiError(404, f"{what} not found")


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    # Never echo the input: it may be a credentials reference.
    return [
        {"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", "")), "type": err.get("type")}
        for err in exc.errors()
    ]


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.details, headers=exc.headers)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = _validation_details(exc)
    first = details[0] if details else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
    return error_response(422, "validation_error", f"{where}: {first['msg']}", details)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = STATUS_CODES.get(exc.status_code, "error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return error_response(exc.status_code, code, message, headers=getattr(exc, "headers", None))


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error in the control plane", exc_info=exc)
    return error_response(500, "internal_error", "internal error")


def install_error_handlers(app: FastAPI) -> None:
    """Answer API errors, validation errors, HTTP errors and anything unexpected in the error shape."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
