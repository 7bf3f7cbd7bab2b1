//! What the route table says of a route: method, path, operationId, who may call it and what
//! body it reads; and matching a path against a route's pattern.

use actix_web::{Route, http::Method};

use crate::http::auth::Scope;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Public,
    /// A key holding any one of these scopes.
    AnyOf(&'static [Scope]),
    /// Any valid key, whatever its scopes.
    AnyKey,
}

/// What body a route reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Json,
    /// JSON or CSV, up to `api.max_import_bytes`.
    Import,
}

pub struct RouteSpec {
    pub method: Method,
    /// Relative to `/api/v1`, with `{name}` parameters.
    pub path: &'static str,
    pub operation: &'static str,
    pub access: Access,
    pub body: BodyKind,
    pub handler: fn(Route) -> Route,
}

impl std::fmt::Debug for RouteSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.method, self.path, self.operation)
    }
}

impl RouteSpec {
    /// The `/runs` alias of a `/payroll-runs` path.
    pub fn alias(&self) -> Option<String> {
        self.path
            .strip_prefix("/payroll-runs")
            .map(|rest| format!("/runs{rest}"))
    }

    pub fn is_write(&self) -> bool {
        matches!(self.method, Method::POST | Method::PATCH | Method::DELETE)
    }

    /// Whether this call is one a key may make on itself whatever its scopes (revoking it:
    /// CONTRACT §2, "any key may revoke itself"), `{key_id}` being the caller's own.
    pub fn on_own_key(&self, params: &[(&'static str, String)], caller_key_id: &str) -> bool {
        SELF_SERVICE.contains(&self.operation)
            && params
                .iter()
                .any(|(name, value)| *name == "key_id" && value == caller_key_id)
    }

    /// The scope names this route requires (any one of them).
    pub fn scope_names(&self) -> Vec<&'static str> {
        match self.access {
            Access::Public | Access::AnyKey => Vec::new(),
            Access::AnyOf(scopes) => scopes.iter().map(|s| s.as_str()).collect(),
        }
    }
}

/// Operations any key may call on its own `{key_id}`, whatever its scopes.
pub const SELF_SERVICE: &[&str] = &["revokeApiKey"];

pub const fn any(scopes: &'static [Scope]) -> Access {
    Access::AnyOf(scopes)
}

/// Path parameters of a matched route: name and value.
pub type PathParams = Vec<(&'static str, String)>;

/// Matches a method and a path (relative to `/api/v1`) against the route table.
pub type Matcher =
    fn(&Method, &str) -> Result<(&'static RouteSpec, PathParams), crate::http::error::ApiError>;

static MATCHER: std::sync::OnceLock<Matcher> = std::sync::OnceLock::new();

/// Makes the route table's matcher known to what runs a stored request again (an approved
/// one) without naming the table; installed when the routes are configured.
pub fn install_matcher(matcher: Matcher) {
    let _ = MATCHER.set(matcher);
}

/// The route of a stored request, by the installed matcher.
pub fn match_stored(
    method: &Method,
    path: &str,
) -> Result<(&'static RouteSpec, PathParams), crate::http::error::ApiError> {
    match MATCHER.get() {
        Some(matcher) => matcher(method, path),
        None => Err(crate::http::error::ApiError::internal(
            "the route table is not configured",
        )),
    }
}

/// A route pattern split at `/` (`/payroll-runs/{run_id}` → `["", "payroll-runs", "{run_id}"]`).
pub type Segments = Vec<&'static str>;

pub fn segments(pattern: &'static str) -> Segments {
    pattern.split('/').collect()
}

/// Matches a path split at `/` (relative to `/api/v1`) against a pattern's segments; returns
/// the path parameters. Literal segments are compared before any parameter is copied.
pub fn match_segments(pattern: &[&'static str], path: &[&str]) -> Option<PathParams> {
    if pattern.len() != path.len() {
        return None;
    }
    let param = |p: &'static str| p.strip_prefix('{').and_then(|p| p.strip_suffix('}'));
    let fits = pattern.iter().zip(path).all(|(p, s)| match param(p) {
        Some(_) => !s.is_empty(),
        None => p == s,
    });
    fits.then(|| {
        pattern
            .iter()
            .zip(path)
            .filter_map(|(p, s)| param(p).map(|name| (name, (*s).to_owned())))
            .collect()
    })
}
