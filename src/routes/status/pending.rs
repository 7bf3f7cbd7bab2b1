//! The status page's pending approvals (CONTRACT §16): money-moving requests waiting for a
//! human with `payroll:approve`, oldest first, with what each asks and who asked.

use std::fmt::Write as _;

use payroll_entities::{ApprovalStatus, approval, time};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::{routes::html::escape, state::AppState};

/// Approvals shown at most.
const SHOWN: u64 = 50;

pub async fn render(html: &mut String, state: &AppState) {
    let pending = approval::Entity::find()
        .filter(approval::Column::Status.eq(ApprovalStatus::Pending))
        .filter(approval::Column::ExpiresAt.gt(time::now()))
        .order_by_asc(approval::Column::Id)
        .limit(SHOWN)
        .all(&state.db.conn)
        .await;
    let pending = match pending {
        Ok(pending) => pending,
        Err(err) => {
            tracing::warn!(error = %err, "status page: approvals not read");
            html.push_str(
                "<p class=\"error\">The pending approvals could not be read from the database.</p>",
            );
            return;
        }
    };
    if pending.is_empty() {
        html.push_str("<p class=\"muted\">No approvals pending.</p>");
        return;
    }
    html.push_str(concat!(
        "<p>Approve with <code>payroll approvals approve apr_…</code> or reject with ",
        "<code>payroll approvals reject apr_… --reason …</code> (a key holding ",
        "<code>payroll:approve</code>, of another lineage than the requester's).</p>",
        "<table id=\"approvals\"><tr><th>Approval</th><th>Operation</th><th>Resource</th>",
        "<th>Requested by</th><th>Requested</th><th>Expires</th></tr>"
    ));
    for a in &pending {
        let by = match &a.requester_session_id {
            Some(session) => format!("{session} (for {})", a.requester_key_id),
            None => a.requester_key_id.clone(),
        };
        let _ = write!(
            html,
            concat!(
                "<tr class=\"approval\" data-approval-id=\"{id}\"><td><code>{id}</code></td>",
                "<td>{operation}</td><td><code>{resource}</code></td><td>{by}</td>",
                "<td>{created}</td><td>{expires}</td></tr>"
            ),
            id = escape(&a.id),
            operation = escape(&a.operation),
            resource = escape(a.resource_id.as_deref().unwrap_or("")),
            by = escape(&by),
            created = escape(&time::format(&a.created_at)),
            expires = escape(&time::format(&a.expires_at)),
        );
    }
    html.push_str("</table>");
}
