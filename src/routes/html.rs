//! HTML for the pages the service renders itself (`/status`, `/api/v1/docs`): the one escape
//! function, and the headers every such page is sent with.

use actix_web::{HttpResponse, http::header};

/// What a page may load: nothing but its own inline styles (no scripts, no frames, no forms,
/// no base URL), and it may not be framed anywhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; \
    frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// An HTML page with the browser-facing security headers: the content security policy,
/// `X-Content-Type-Options: nosniff`, no referrer, no framing, and no caching.
pub fn page(html: String) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(html)
}

/// Escapes text for HTML content and quoted attribute values: `& < > " '`.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<b a="1">Tom & 'Jerry'</b>"#),
            "&lt;b a=&quot;1&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/b&gt;"
        );
        assert_eq!(escape("plain text"), "plain text");
    }
}
