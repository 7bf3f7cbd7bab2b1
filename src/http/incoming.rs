//! Reading a request's body: within its size limit, within `api.body_read_timeout_ms` of its
//! head (slower → 408, the connection closed), and whole (a body that ends before its
//! `Content-Length` or its last chunk is no body → 400 `reason: "incomplete body"`).

use std::time::{Duration, Instant};

use actix_web::{HttpMessage as _, dev::ServiceRequest, http::header, web};
use futures_util::StreamExt;

use crate::http::error::{ApiError, ErrorCode};

/// Why a body was not read.
#[derive(Debug)]
pub(super) enum BodyFault {
    /// Larger than this limit, in bytes.
    TooLarge(usize),
    /// The connection ended (or broke) before the body did.
    Incomplete,
    /// The whole body did not arrive within this many milliseconds of the request's head.
    TimedOut(u64),
}

impl BodyFault {
    pub(super) fn error(&self) -> ApiError {
        match self {
            BodyFault::TooLarge(limit) => ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("The request body is larger than {limit} bytes."),
            )
            .detail("limit_bytes", *limit as u64),
            BodyFault::Incomplete => {
                let mut err = ApiError::new(
                    ErrorCode::InvalidRequestBody,
                    "The request body ended before its Content-Length (or its last chunk): \
                     nothing was done.",
                )
                .detail("reason", "incomplete body")
                .hint("Send the whole body again, with the same Idempotency-Key.");
                err.close_connection = true;
                err
            }
            BodyFault::TimedOut(limit_ms) => {
                let mut err = ApiError::new(
                    ErrorCode::RequestTimeout,
                    format!(
                        "The request body did not arrive within {limit_ms} ms of its head; \
                         nothing was done."
                    ),
                )
                .detail("limit_ms", *limit_ms);
                err.close_connection = true;
                err
            }
        }
    }
}

/// Reads the body whole within `timeout` of `head_at` (when its head came), within `limit`
/// bytes.
pub(super) async fn read_body(
    req: &mut ServiceRequest,
    limit: usize,
    head_at: Instant,
    timeout: Duration,
) -> Result<web::Bytes, BodyFault> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyFault::TooLarge(limit));
    }
    let mut payload = req.take_payload();
    let read = async {
        // Sized by its declared length (within the limit): a large body is not copied as the
        // buffer doubles.
        let mut body = web::BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
        while let Some(chunk) = payload.next().await {
            // A payload error is the connection ending (or breaking) inside the body: what
            // arrived is a part, never taken for the whole.
            let chunk = chunk.map_err(|_| BodyFault::Incomplete)?;
            if body.len() + chunk.len() > limit {
                return Err(BodyFault::TooLarge(limit));
            }
            body.extend_from_slice(&chunk);
        }
        if declared.is_some_and(|n| n != body.len()) {
            return Err(BodyFault::Incomplete);
        }
        Ok(body.freeze())
    };
    match tokio::time::timeout_at((head_at + timeout).into(), read).await {
        Ok(read) => read,
        Err(_) => Err(BodyFault::TimedOut(timeout.as_millis() as u64)),
    }
}
