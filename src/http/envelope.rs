//! The success envelope (CONTRACT §1): `{"data", "pagination"?, "api_version", "request_id"}`.

use actix_web::{HttpResponse, http::StatusCode};
use serde::Serialize;
use utoipa::ToSchema;

use payroll_actors::views::API_VERSION;

/// `{"total", "limit", "offset", "has_more"}` of a list answer.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Pagination {
    pub total: u64,
    pub limit: u64,
    pub offset: u64,
    pub has_more: bool,
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    data: &'a T,
    #[serde(skip_serializing_if = "Option::is_none")]
    pagination: Option<Pagination>,
    api_version: &'static str,
    request_id: &'a str,
}

/// `{"data", "pagination"?, "api_version", "request_id"}` as bytes.
pub fn envelope_bytes<T: Serialize>(
    request_id: &str,
    data: &T,
    pagination: Option<Pagination>,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Envelope {
        data,
        pagination,
        api_version: API_VERSION,
        request_id,
    })
}

pub fn json_response(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/json; charset=utf-8")
        .body(body)
}
