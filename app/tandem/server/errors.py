"""Errors as OpenAI-compatible clients expect them: a status code and

    {"error": {"message": "...", "type": "...", "param": ..., "code": ...}}

Every failure a request can meet is turned into one of these, with a sentence that says what to
change; nothing reaches the client as a 500 with a traceback. The JSON is written in ASCII
(non-ASCII as \\u escapes), so that any text a message quotes back, even a lone surrogate that
JSON allows and UTF-8 cannot encode, makes a valid answer.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class _AsciiJSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def quoted(value: str, limit: int = 80) -> str:
    """`value` fit to quote in an error message: cut to `limit` characters, and printable
    (a lone surrogate is shown as its escape, as Python writes it)."""
    shown = value if len(value) <= limit else value[: limit - 1] + "…"
    return shown.encode("utf-8", "backslashreplace").decode("utf-8")


class ApiError(Exception):
    """A request the server refuses: its status code, and the error object's fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        headers = {"Retry-After": "1"} if self.status == 429 else None
        return _AsciiJSON(self.body(), status_code=self.status, headers=headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


async def api_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return exc.response()


# Pydantic's error types for "this should have been an object".
_NOT_AN_OBJECT = frozenset({"model_attributes_type", "model_type", "dict_type"})


async def validation_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 with a list of problems, as OpenAI's 400 naming the first one. Only that
    one is looked at: an error also holds its input (a whole list, for one that is too long),
    and encoding every error of a hostile body would hold the server for seconds."""
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if not errors:
        return bad_request("the request body is not valid").response()
    first = errors[0]
    kind = first.get("type")
    if kind == "json_invalid":
        return bad_request(
            "the request body is not valid JSON: " + str(first.get("ctx", {}).get("error", "parse error"))
        ).response()
    # loc is ("body", "messages", 0, "content"): the field's path without "body".
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = quoted(".".join(loc), 200) or None
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if kind == "missing":
        message = f"'{param}' is required" if param else "a required field is missing"
    elif kind in _NOT_AN_OBJECT:
        if not param:
            message = "the request body must be a JSON object"
        elif len(loc) == 2 and loc[0] == "messages":
            message = f'\'{param}\' must be a message, an object such as {{"role": "user", "content": "Hi"}}'
        else:
            message = f"'{param}' must be a JSON object"
    elif kind == "finite_number":
        message = f"'{param}' must be a finite number (not NaN or infinity)"
    elif param:
        message = f"'{param}': {message[0].lower()}{message[1:]}"
    return bad_request(message, param=param).response()


async def http_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (an unknown path, a wrong method) in the same shape."""
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return ApiError(exc.status_code, str(exc.detail), code=code).response()


async def unexpected_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    """A fault of ours: one line for the client (and the server's log has the traceback)."""
    return ApiError(
        500,
        f"tandem serve hit an internal error ({type(exc).__name__}); the server keeps running",
        type="server_error",
    ).response()
