//! What every client command ends with: the outcome committed together with the request's
//! acknowledgement (idempotency record and audit entry), and the answer the caller gets.

use payroll_entities::{db::WriteTx, job, payroll_run};
use serde_json::Value;

use super::{
    messages::{RunCommand, RunError, RunReply},
    store::Snapshot,
    transitions,
};
use crate::{
    acknowledgement::{Acknowledgement, Outcome},
    audit::AuditRecord,
};

/// The result of a client's command.
pub struct Done {
    pub reply: RunReply,
    pub snapshot: Snapshot,
    /// New rows in the email outbox.
    pub mail: bool,
}

pub(super) fn refused(run: &payroll_run::Model, command: &RunCommand) -> RunError {
    RunError::Refused {
        refused: transitions::refusal(run.status),
        operation: command.name(),
        hint: None,
    }
}

pub(super) fn run_action(
    action: &'static str,
    run: &payroll_run::Model,
    details: Value,
) -> AuditRecord {
    AuditRecord {
        action,
        resource_type: "payroll_run",
        resource_id: run.id.clone(),
        details,
    }
}

/// Commits `ack` with the outcome and answers.
pub(super) async fn finish_request(
    tx: WriteTx,
    ack: Acknowledgement,
    outcome: Outcome,
    action: AuditRecord,
    snapshot: Snapshot,
    mail: bool,
) -> Result<Done, RunError> {
    let body = ack.commit_in(&*tx, &outcome, action).await?;
    tx.commit().await?;
    Ok(Done {
        reply: RunReply {
            body,
            run: snapshot.run.clone(),
            job: snapshot.job.clone(),
        },
        snapshot,
        mail,
    })
}

/// Commits `ack` and answers with the run as it now stands.
pub(super) async fn answer_run(
    tx: WriteTx,
    ack: Acknowledgement,
    run: payroll_run::Model,
    job: Option<job::Model>,
    action: AuditRecord,
    mail: bool,
) -> Result<Done, RunError> {
    let snapshot = Snapshot {
        run: run.clone(),
        job: job.clone(),
    };
    finish_request(tx, ack, Outcome::Run { run, job }, action, snapshot, mail).await
}
