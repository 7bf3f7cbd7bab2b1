//! Failing fast while the database is away (CONTRACT §4, §13): which requests its state
//! refuses at once, and the answer of a request cut short when it goes.

use actix_web::http::{Method, StatusCode};
use payroll_entities::health::{DbHealth, Health};

use crate::{
    http::{error::ApiError, route::Access},
    routes,
    state::AppState,
};

/// A request cut short because the database went away while it ran.
#[derive(Debug)]
pub(super) struct Interrupted {
    pub(super) error: ApiError,
    pub(super) request_id: String,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl actix_web::ResponseError for Interrupted {
    fn status_code(&self) -> StatusCode {
        self.error.code.status()
    }

    /// The error body with the request id, and the headers every answer carries.
    fn error_response(&self) -> actix_web::HttpResponse {
        let mut res = self.error.response(Some(&self.request_id));
        super::envelope::answer_headers(res.headers_mut(), &self.request_id);
        res
    }
}

/// The database's state, if it refuses this request now: every API request while it is
/// unreachable, writes while it refuses them; never the documents that need no database.
pub(super) fn refused_by_health(
    state: &AppState,
    method: &Method,
    api_path: &str,
) -> Option<Health> {
    let write = matches!(*method, Method::POST | Method::PATCH | Method::DELETE);
    let down = state.db.health().refuses(write)?;
    let public = routes::match_route(method, api_path)
        .is_ok_and(|(route, _)| route.access == Access::Public);
    (!public).then_some(down)
}

/// Runs `work` until it completes, or until the database is found unreachable (at once if it
/// is now): then `None`, and `work` is dropped (a transaction it began rolls back with its
/// connection).
pub(super) async fn unless_unreachable<F: Future>(health: &DbHealth, work: F) -> Option<F::Output> {
    let work = std::pin::pin!(work);
    let down = std::pin::pin!(health.unreachable());
    match futures_util::future::select(work, down).await {
        futures_util::future::Either::Left((done, _)) => Some(done),
        futures_util::future::Either::Right(_) => None,
    }
}
