//! `/openapi.json` and `/docs`: the API described for tools and for people.

use actix_web::HttpResponse;

use super::html::{escape, page};
use crate::http::{
    error::{ApiError, ErrorCode},
    request::ApiRequest,
};

/// The OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", operation_id = "getOpenApiDocument", tag = "meta",
    responses((status = 200, description = "This OpenAPI 3.1 document", content_type = "application/json")))]
#[tracing::instrument(skip_all)]
pub async fn openapi_document(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok()
        .content_type("application/json; charset=utf-8")
        .body(req.state().openapi_json))
}

/// Every error code with its meaning and recovery; `docs_url` anchors point here.
#[utoipa::path(get, path = "/docs", operation_id = "getApiDocs", tag = "meta",
    responses((status = 200, description = "HTML: every error code with its meaning and recovery", content_type = "text/html")))]
#[tracing::instrument(skip_all)]
pub async fn docs_page(_req: ApiRequest) -> HttpResponse {
    let mut rows = String::new();
    for code in ErrorCode::ALL {
        rows.push_str(&format!(
            "<tr id=\"{c}\"><td><a href=\"#{c}\"><code>{c}</code></a></td><td>{s}</td><td>{m}</td><td>{h}</td></tr>\n",
            c = code.as_str(),
            s = code.status().as_u16(),
            m = escape(code.meaning()),
            h = escape(code.default_hint()),
        ));
    }
    let html = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Payroll API: errors</title>
<style>body{{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.4rem;vertical-align:top;text-align:left}}
tr:target{{background:#fff6d5}}</style></head>
<body><h1>Payroll disbursement API</h1>
<p>The full description of every operation is the <a href="/api/v1/openapi.json">OpenAPI document</a>.
Every error answers <code>{{"error": {{"code", "message", "details", "recovery_hint", "docs_url"}}, "api_version", "request_id"}}</code>.</p>
<h2>Error codes</h2>
<table><thead><tr><th>Code</th><th>HTTP</th><th>When</th><th>What to do</th></tr></thead><tbody>
{rows}</tbody></table></body></html>"#
    );
    page(html)
}
