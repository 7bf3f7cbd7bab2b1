//! The `AuditWriter` batches the audit entries of reads and refused requests (CONTRACT §12):
//! they are written every `audit.flush_interval_ms`, or sooner when a batch fills. Entries of
//! successful writes never pass through here; they commit with the write.

use std::time::Duration;

use actix::prelude::*;
use payroll_entities::{audit_entry, bulk, db::Db};
use sea_orm::IntoActiveModel;

use crate::telemetry::{self, ActorKind, Handling, Observed};

/// A batch is written at once when it reaches this size.
const MAX_BATCH: usize = 500;

pub struct AuditWriter {
    db: Db,
    flush_interval: Duration,
    buffer: Vec<audit_entry::Model>,
}

impl AuditWriter {
    pub fn new(db: Db, flush_interval: Duration) -> AuditWriter {
        AuditWriter {
            db,
            flush_interval,
            buffer: Vec::new(),
        }
    }

    /// Writes the buffer; the actor handles no other message until it is done, so a `Flush`
    /// answers only after every earlier entry is stored.
    fn write_buffer(&mut self, ctx: &mut Context<Self>) {
        if self.buffer.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.buffer);
        let db = self.db.clone();
        ctx.wait(write_batch(db, batch).into_actor(self));
    }
}

/// Writes a batch; a failure is logged (these entries may be lost, CONTRACT §12).
async fn write_batch(db: Db, batch: Vec<audit_entry::Model>) {
    if batch.is_empty() {
        return;
    }
    if let Err(err) = insert_batch(&db, batch).await {
        tracing::error!(error = %err, "audit entries could not be written");
    }
}

async fn insert_batch(db: &Db, batch: Vec<audit_entry::Model>) -> Result<(), sea_orm::DbErr> {
    let count = batch.len();
    let tx = db.begin_write().await?;
    bulk::insert_chunked(
        &*tx,
        batch.into_iter().map(IntoActiveModel::into_active_model),
        None,
    )
    .await?;
    tx.commit().await?;
    tracing::trace!(count, "audit entries written");
    Ok(())
}

impl Actor for AuditWriter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        telemetry::actor_started(Self::KIND);
        ctx.run_interval(self.flush_interval, |this, ctx| this.write_buffer(ctx));
    }

    fn stopping(&mut self, ctx: &mut Context<Self>) -> Running {
        // Write what is buffered before the actor goes away.
        self.write_buffer(ctx);
        Running::Stop
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        telemetry::actor_stopped(Self::KIND);
    }
}

impl Observed for AuditWriter {
    const KIND: ActorKind = ActorKind::AuditWriter;
}

/// Record one entry (batched).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RecordAudit(pub audit_entry::Model);

impl Handler<RecordAudit> for AuditWriter {
    type Result = ();

    fn handle(&mut self, msg: RecordAudit, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "RecordAudit");
        self.buffer.push(msg.0);
        if self.buffer.len() >= MAX_BATCH {
            self.write_buffer(ctx);
        }
    }
}

/// Write everything recorded so far; answers once it is stored.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Flush;

impl Handler<Flush> for AuditWriter {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Flush, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "Flush");
        let batch = std::mem::take(&mut self.buffer);
        let db = self.db.clone();
        Box::pin(
            async move {
                let _handling = handling;
                write_batch(db, batch).await;
            }
            .into_actor(self),
        )
    }
}
