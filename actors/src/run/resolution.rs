//! An operator's word on a stuck payout (CONTRACT §7): after checking the exchange, an operator
//! resolves it as completed (paid, with the transaction hash where known) or failed (no money
//! left), and the run goes on to its end. Only a stuck payout can be resolved.

use payroll_entities::{PayoutStatus, time};
use serde_json::json;

use super::{
    answer::{Done, finish_request},
    deps::RunDeps,
    messages::{Resolution, RunError},
    store::{self, Snapshot},
    transitions::{self, recount},
};
use crate::{
    acknowledgement::{Acknowledgement, Outcome},
    audit::AuditRecord,
    events::{insert_events, payout_event},
    exchange::holds,
};

pub(super) async fn resolve_payout(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
    payout_id: String,
    resolution: Resolution,
) -> Result<Done, RunError> {
    let Snapshot { run, mut job } = snapshot;
    let tx = deps.db.begin_write().await?;
    let mut p = store::payout_by_id(&*tx, &run.id, &payout_id).await?;
    if p.stuck_since.is_none() || p.status.is_terminal() {
        return Err(RunError::PayoutRefused {
            payout_id,
            refused: transitions::payout_refusal(p.status),
            operation: "resolved",
            hint: "Only a stuck payout (stuck_since set) is resolved by hand; the others are followed at the exchange: sync the run.".into(),
        });
    }
    let before = p.status;
    let now = time::now();
    let mut events = Vec::new();
    let (release, note) = match &resolution {
        Resolution::Completed {
            on_chain_tx_hash,
            note,
        } => {
            if before == PayoutStatus::Pending {
                p.status = PayoutStatus::Processing;
                events.push(payout_event("payout.processing", &p));
            }
            p.status = PayoutStatus::Completed;
            if let Some(hash) = on_chain_tx_hash {
                p.on_chain_tx_hash = Some(hash.clone());
                p.block_explorer_url = crate::exchange::explorer_link(p.network, hash);
            }
            p.completed_at = Some(now);
            events.push(payout_event("payout.completed", &p));
            (holds::Release::Accepted, note)
        }
        Resolution::Failed { note } => {
            p.status = PayoutStatus::Failed;
            p.failed_reason = Some(format!(
                "resolved_failed: {}",
                note.as_deref()
                    .unwrap_or("an operator found no withdrawal at the exchange")
            ));
            events.push(payout_event("payout.failed", &p));
            (holds::Release::Failed, note)
        }
    };
    p.stuck_since = None;
    p.updated_at = now;
    let mut after = run.clone();
    let in_job = p.job_id.is_some() && p.job_id == job.as_ref().map(|j| j.id.clone());
    recount(
        &mut after,
        if in_job { job.as_mut() } else { None },
        before,
        p.status,
    );
    store::save_payouts(&*tx, std::slice::from_ref(&p)).await?;
    holds::release(&*tx, &[(p.id.clone(), p.attempt)], release).await?;
    store::save_run(&*tx, run.version, &mut after).await?;
    if let (true, Some(job)) = (in_job, job.as_mut()) {
        store::save_job(&*tx, job).await?;
    }
    insert_events(&tx, events).await?;
    let action = AuditRecord {
        action: "PAYOUT_RESOLVED",
        resource_type: "payout",
        resource_id: p.id.clone(),
        details: json!({
            "status": {"before": before, "after": p.status},
            "payroll_run_id": run.id,
            "client_withdrawal_id": p.client_withdrawal_id,
            "on_chain_tx_hash": p.on_chain_tx_hash,
            "note": note,
        }),
    };
    let snapshot = Snapshot { run: after, job };
    finish_request(tx, ack, Outcome::Payout(p), action, snapshot, false).await
}
