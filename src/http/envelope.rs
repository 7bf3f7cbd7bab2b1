//! The success envelope (CONTRACT §1): `{"data", "pagination"?, "api_version", "request_id"}`,
//! and the headers every answer carries.

use actix_web::{
    HttpResponse,
    http::{
        StatusCode,
        header::{self, HeaderMap, HeaderName, HeaderValue},
    },
};
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

/// [`envelope_bytes`] around `data` already serialized as JSON (a view kept between reads),
/// copied in as it is.
pub fn envelope_around(request_id: &str, data_json: &[u8]) -> serde_json::Result<Vec<u8>> {
    #[derive(Serialize)]
    struct Rest<'a> {
        api_version: &'static str,
        request_id: &'a str,
    }
    let rest = serde_json::to_vec(&Rest {
        api_version: API_VERSION,
        request_id,
    })?;
    // `{"data":` + data + `,` + the rest without its opening brace.
    let mut out = Vec::with_capacity(data_json.len() + rest.len() + 10);
    out.extend_from_slice(b"{\"data\":");
    out.extend_from_slice(data_json);
    out.push(b',');
    out.extend_from_slice(rest.get(1..).unwrap_or_default());
    Ok(out)
}

pub fn json_response(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/json; charset=utf-8")
        .body(body)
}

/// The headers every answer carries: its request id, the API version, and `nosniff`.
pub fn answer_headers(headers: &mut HeaderMap, request_id: &str) {
    if let Ok(value) = HeaderValue::from_str(request_id) {
        headers.insert(HeaderName::from_static("x-request-id"), value);
    }
    headers.insert(
        HeaderName::from_static("api-version"),
        HeaderValue::from_static(API_VERSION),
    );
    // A browser never reads a JSON answer (or anything else) as another type.
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_around_serialized_data_is_the_envelope_of_the_data() {
        let data = serde_json::json!({"id": "run_1", "note": "a \"quoted\" word"});
        let around =
            envelope_around("req_\"1", &serde_json::to_vec(&data).expect("data")).expect("around");
        let plain = envelope_bytes("req_\"1", &data, None).expect("plain");
        assert_eq!(around, plain);
    }
}
