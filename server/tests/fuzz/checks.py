"""Schemathesis checks of Cairn's own (loaded with SCHEMATHESIS_HOOKS=checks).

Besides schemathesis' `not_a_server_error`: every refusal carries Cairn's JSON error body,
`{"status": {"error": "<message>", "code": "<code>"}, "time": <seconds>}`, so a client can
always tell what was wrong and why.
"""

import schemathesis


@schemathesis.check
def error_body_is_json(ctx, response, case):
    if response.status_code < 400:
        return None
    try:
        body = response.json()
    except Exception as e:  # noqa: BLE001 - any decode failure is the finding
        raise AssertionError(
            f"{response.status_code} answer is not JSON: {response.text[:200]!r} ({e})"
        )
    status = body.get("status") if isinstance(body, dict) else None
    if not (
        isinstance(status, dict)
        and isinstance(status.get("error"), str)
        and status["error"]
        and isinstance(status.get("code"), str)
    ):
        raise AssertionError(
            f"{response.status_code} answer lacks status.error and status.code: {body!r}"[:400]
        )
    return None
