"""OpenAI-style errors: one exception type, one envelope, the status codes of DESIGN §8.

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

Messages never echo more than a short slice of the offending input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import JSONResponse

MAX_ECHO = 80


def clip(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_ECHO else text[:MAX_ECHO] + "…"


@dataclass
class APIError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def unauthorized(message: str) -> APIError:
    return APIError(401, message, "authentication_error", None, "invalid_api_key")


def model_not_found(model: str) -> APIError:
    return APIError(
        404,
        f"The model '{clip(model)}' does not exist",
        "invalid_request_error",
        "model",
        "model_not_found",
    )


def too_large(limit: int) -> APIError:
    return APIError(
        413,
        f"Request body exceeds {limit} bytes",
        "invalid_request_error",
        None,
        "request_too_large",
    )


def rate_limited(message: str, retry_after: float, headers: dict[str, str]) -> APIError:
    headers = {"Retry-After": str(max(1, round(retry_after))), **headers}
    return APIError(429, message, "rate_limit_error", None, "rate_limit_exceeded", headers)


def overloaded(message: str, retry_after: float = 1.0) -> APIError:
    return APIError(
        503,
        message,
        "overloaded_error",
        None,
        "overloaded",
        {"Retry-After": str(max(1, round(retry_after)))},
    )


def upstream(message: str) -> APIError:
    return APIError(502, message, "api_error", None, "upstream_error")


async def api_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)
