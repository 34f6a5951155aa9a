//! Errors become `{"status": {"error", "code"}, "time"}` with the status their code implies.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_api::{ErrorBody, ErrorCode, ErrorStatus};

use crate::error::ServerError;

/// HTTP status of an error code: the one place this mapping lives.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidRequest
        | ErrorCode::WrongDimension
        | ErrorCode::InvalidVector
        | ErrorCode::LimitExceeded => StatusCode::BAD_REQUEST,
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::AlreadyExists => StatusCode::CONFLICT,
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::Timeout => StatusCode::REQUEST_TIMEOUT,
        ErrorCode::Unavailable | ErrorCode::UnderReplicated => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A response body for an error code and message.
pub fn error_response(code: ErrorCode, message: String) -> Response {
    let body = ErrorBody {
        status: ErrorStatus {
            error: message,
            code,
        },
        time: 0.0,
    };
    let mut response = (status_of(code), super::json::Body(body)).into_response();
    if code == ErrorCode::RateLimited {
        // Every 429 is a moment's overload: a second is long enough for it to drain.
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    response
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let code = self.code();
        if code == ErrorCode::Internal {
            tracing::error!(error = %self, "request failed");
        }
        error_response(code, self.to_string())
    }
}
