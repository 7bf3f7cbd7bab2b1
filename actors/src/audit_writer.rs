//! The `AuditWriter` batches the audit entries of reads and refused requests (CONTRACT §12):
//! they are written every `audit.flush_interval_ms`, or sooner when a batch fills. Entries of
//! successful writes never pass through here; they commit with the write.
//!
//! On PostgreSQL up to four batches are written at once (`POSTGRES_WRITES`), so one held up
//! does not hold up the rest.
//!
//! Handlers leave entries in a shared buffer ([`AuditSink::record`]) rather than send a
//! message each: the writer takes the whole buffer at each write, and is sent a message only
//! when a batch fills. Entries waiting count as the writer's mailbox depth, so the request gate
//! refuses work when the writer falls that far behind.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use actix::prelude::*;

use crate::runtime::InRuntime;
use payroll_entities::{audit_entry, bulk, db::Db};
use sea_orm::IntoActiveModel;

use crate::outage::Outage;
use crate::telemetry::{self, ActorKind, CountedSend, Handling, Observed};

/// A batch is written at once when it reaches this size.
const MAX_BATCH: usize = 500;

/// Batches written at once on PostgreSQL, each by a `COPY` on a connection of its own: a batch
/// held up (a slow flush of the log) does not hold up the entries behind it. SQLite has one
/// writer, so one batch at a time there.
const POSTGRES_WRITES: u32 = 4;

/// Entries waiting for the writer.
#[derive(Default)]
struct AuditBuffer {
    entries: Mutex<Vec<audit_entry::Model>>,
    /// Entries of batches whose write failed on the database: perhaps written already (a
    /// commit whose outcome is unknown), so written again skipping the ids stored.
    again: Mutex<Vec<audit_entry::Model>>,
}

impl AuditBuffer {
    /// Adds an entry; true when this one filled a batch.
    fn push(&self, entry: audit_entry::Model) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.push(entry);
        telemetry::enqueued(ActorKind::AuditWriter);
        entries.len() == MAX_BATCH
    }

    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
            + self.again.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn take(&self) -> Vec<audit_entry::Model> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let taken = std::mem::take(&mut *entries);
        telemetry::dequeued(ActorKind::AuditWriter, taken.len());
        taken
    }

    /// Keeps a batch that could not be written, to be written again.
    fn put_back(&self, batch: Vec<audit_entry::Model>) {
        let mut again = self.again.lock().unwrap_or_else(|p| p.into_inner());
        telemetry::requeued(ActorKind::AuditWriter, batch.len());
        again.extend(batch);
    }

    /// The entries to write again ([`AuditBuffer::put_back`]).
    fn take_again(&self) -> Vec<audit_entry::Model> {
        let mut again = self.again.lock().unwrap_or_else(|p| p.into_inner());
        let taken = std::mem::take(&mut *again);
        telemetry::dequeued(ActorKind::AuditWriter, taken.len());
        taken
    }
}

/// Where the API's handlers leave audit entries for the writer.
#[derive(Clone)]
pub struct AuditSink {
    buffer: Arc<AuditBuffer>,
    writer: Addr<AuditWriter>,
}

impl AuditSink {
    /// Starts the writer on the current arbiter.
    pub fn start(db: Db, flush_interval: Duration) -> AuditSink {
        let buffer = Arc::new(AuditBuffer::default());
        let max_writes = if db.backend() == sea_orm::DatabaseBackend::Postgres {
            POSTGRES_WRITES
        } else {
            1
        };
        let writer = AuditWriter {
            db,
            flush_interval,
            buffer: buffer.clone(),
            writes: Arc::new(tokio::sync::Semaphore::new(max_writes as usize)),
            max_writes,
            outage: Arc::new(Mutex::new(Outage::new(
                "audit entries could not be written",
            ))),
        }
        .start();
        AuditSink { buffer, writer }
    }

    /// Leaves an entry to be written with the next batch.
    pub fn record(&self, entry: audit_entry::Model) {
        if self.buffer.push(entry) {
            self.writer.counted_do_send(WriteNow);
        }
    }

    /// Writes what waits; answers once it is stored.
    pub fn flush(&self) -> actix::dev::Request<AuditWriter, Flush> {
        self.writer.counted_send(Flush)
    }

    /// [`AuditSink::flush`], unless `limit` entries and messages already wait for the writer.
    pub fn bounded_flush(
        &self,
        limit: i64,
    ) -> Result<actix::dev::Request<AuditWriter, Flush>, telemetry::Overloaded> {
        self.writer.bounded_send(Flush, limit)
    }

    /// Whether the writer is running.
    pub fn connected(&self) -> bool {
        self.writer.connected()
    }
}

pub struct AuditWriter {
    db: Db,
    flush_interval: Duration,
    buffer: Arc<AuditBuffer>,
    /// One permit per batch being written.
    writes: Arc<tokio::sync::Semaphore>,
    max_writes: u32,
    /// Batches that failed on the database: logged once an outage.
    outage: Arc<Mutex<Outage>>,
}

impl AuditWriter {
    /// Writes what waits, beside the batches already being written, while a permit is free.
    /// When none is, the entries stay in the buffer (where the request gate counts them) and
    /// the write that ends next takes them. Each write is a task of its own, so it goes on
    /// while the actor waits for anything, and ends even as the actor stops.
    fn write_buffer(&mut self, ctx: &mut Context<Self>) {
        // While the database is unreachable the entries wait in the buffer (the request gate
        // refuses requests meanwhile, so it does not grow); they are written once it answers.
        if self.db.health().unreachable_since().is_some() {
            return;
        }
        let Ok(permit) = self.writes.clone().try_acquire_owned() else {
            return;
        };
        let again = self.buffer.take_again();
        let batch = self.buffer.take();
        if batch.is_empty() && again.is_empty() {
            return;
        }
        let db = self.db.clone();
        let writer = ctx.address();
        let buffer = self.buffer.clone();
        let outage = self.outage.clone();
        actix::spawn(async move {
            write_batch(db.clone(), again, true, &buffer, &outage).await;
            write_batch(db, batch, false, &buffer, &outage).await;
            drop(permit);
            // A full batch that came in meanwhile may have found no permit free: it goes now
            // (a stopped writer has written it as it stopped). Less waits for the next tick.
            if buffer.len() >= MAX_BATCH && writer.connected() {
                writer.counted_do_send(WriteNow);
            }
        });
    }

    /// Completes once every batch being written now is stored.
    fn writes_done(&self) -> impl std::future::Future<Output = ()> + use<> {
        let writes = self.writes.clone();
        let all = self.max_writes;
        async move {
            drop(writes.acquire_many_owned(all).await);
        }
    }
}

/// Writes a batch. One that fails on the database (unreachable, out of space) goes back to
/// the buffer and is written once the database answers again, so an outage loses none; one
/// that fails otherwise (a bug) is logged and dropped, never retried forever.
async fn write_batch(
    db: Db,
    batch: Vec<audit_entry::Model>,
    again: bool,
    buffer: &AuditBuffer,
    outage: &Mutex<Outage>,
) {
    if batch.is_empty() {
        return;
    }
    let count = batch.len();
    match insert_batch(&db, &batch, again).await {
        Ok(()) => outage.lock().unwrap_or_else(|p| p.into_inner()).succeeded(),
        Err(err) if db.health().report(&err).is_some() => {
            outage
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .failed(&format!("{count} entries kept for later: {err}"));
            buffer.put_back(batch);
        }
        Err(err) => tracing::error!(error = %err, count, "audit entries could not be written"),
    }
}

/// Written `again` (a batch whose earlier write may have committed after all), each entry is
/// written unless its id is stored already, so none is lost and none doubled.
async fn insert_batch(
    db: &Db,
    batch: &[audit_entry::Model],
    again: bool,
) -> Result<(), sea_orm::DbErr> {
    let count = batch.len();
    let rows = || {
        batch
            .iter()
            .cloned()
            .map(IntoActiveModel::into_active_model)
    };
    if again {
        let tx = db.begin_write().await?;
        bulk::insert_models_skipping_conflicts(&*tx, rows(), audit_entry::Column::Id).await?;
        tx.commit().await?;
    } else if db.backend() == sea_orm::DatabaseBackend::Postgres {
        copy_batch(db, batch).await?;
    } else {
        let tx = db.begin_write().await?;
        bulk::insert_models(&*tx, rows()).await?;
        tx.commit().await?;
    }
    tracing::trace!(count, "audit entries written");
    Ok(())
}

/// PostgreSQL: the batch in one `COPY … FROM STDIN` (CSV), a small part of the server's work
/// for a multi-row `INSERT` of as many rows (no parameters bound, nothing planned), and as
/// atomic: every entry of the batch is written, or none.
async fn copy_batch(db: &Db, batch: &[audit_entry::Model]) -> Result<u64, sea_orm::DbErr> {
    use sea_orm::{Iden as _, Iterable as _, sqlx::postgres::PgPoolCopyExt as _};
    // Kept as the driver's error, so a lost connection is told from a bug.
    let failed = |err: sea_orm::sqlx::Error| {
        sea_orm::DbErr::Exec(sea_orm::RuntimeErr::SqlxError(Arc::new(err)))
    };
    let columns: Vec<String> = audit_entry::Column::iter()
        .map(|c| format!("\"{}\"", c.to_string()))
        .collect();
    let mut data = String::with_capacity(batch.len() * 256);
    for entry in batch {
        csv_row(&mut data, entry);
    }
    let mut copy = db
        .conn
        .get_postgres_connection_pool()
        .copy_in_raw(&format!(
            "COPY audit_entries ({}) FROM STDIN WITH (FORMAT csv)",
            columns.join(", ")
        ))
        .await
        .map_err(failed)?;
    if let Err(err) = copy.send(data.as_bytes()).await {
        // Ended here, so the connection goes back to the pool out of the copy.
        if let Err(abort) = copy.abort("the audit batch could not be sent").await {
            tracing::warn!(error = %abort, "an audit copy could not be ended");
        }
        return Err(failed(err));
    }
    copy.finish().await.map_err(failed)
}

/// One audit entry as a CSV line, its fields in the entity's column order: an absent value is
/// an empty unquoted field (NULL), text is always quoted (so an empty string stays one).
fn csv_row(out: &mut String, e: &audit_entry::Model) {
    use std::fmt::Write as _;
    fn text(out: &mut String, value: Option<&str>) {
        if let Some(value) = value {
            out.push('"');
            // A quote is written twice; a value without one (nearly all) is copied whole.
            let mut parts = value.split('"');
            out.push_str(parts.next().unwrap_or_default());
            for part in parts {
                out.push_str("\"\"");
                out.push_str(part);
            }
            out.push('"');
        }
    }
    text(out, Some(&e.id));
    out.push(',');
    out.push_str(
        &e.occurred_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    );
    for value in [
        e.request_id.as_deref(),
        Some(e.actor_type.as_str()),
        e.api_key_id.as_deref(),
        e.agent_session_id.as_deref(),
        e.method.as_deref(),
        e.path.as_deref(),
        e.operation.as_deref(),
        e.action.as_deref(),
        e.resource_type.as_deref(),
        e.resource_id.as_deref(),
    ] {
        out.push(',');
        text(out, value);
    }
    out.push(',');
    if let Some(code) = e.status_code {
        let _ = write!(out, "{code}");
    }
    out.push(',');
    text(out, e.idempotency_key.as_deref());
    out.push(',');
    text(out, Some(&e.details.to_string()));
    out.push('\n');
}

impl Actor for AuditWriter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        telemetry::actor_started(Self::KIND);
        ctx.run_interval(self.flush_interval, |this, ctx| this.write_buffer(ctx));
    }

    fn stopping(&mut self, ctx: &mut Context<Self>) -> Running {
        // Write what is buffered before the actor goes away, after the batches on their way.
        let again = self.buffer.take_again();
        let batch = self.buffer.take();
        let db = self.db.clone();
        let done = self.writes_done();
        let buffer = self.buffer.clone();
        let outage = self.outage.clone();
        ctx.wait(
            async move {
                done.await;
                write_batch(db.clone(), again, true, &buffer, &outage).await;
                write_batch(db, batch, false, &buffer, &outage).await;
                let left = buffer.len();
                if left > 0 {
                    tracing::error!(entries = left, "audit entries of reads and refusals could not be written before stopping (the database is away)");
                }
            }
            .in_runtime()
            .into_actor(self),
        );
        Running::Stop
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        telemetry::actor_stopped(Self::KIND);
    }
}

impl Observed for AuditWriter {
    const KIND: ActorKind = ActorKind::AuditWriter;
}

/// A batch has filled: write what waits now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WriteNow;

impl Handler<WriteNow> for AuditWriter {
    type Result = ();

    fn handle(&mut self, _: WriteNow, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "WriteNow");
        self.write_buffer(ctx);
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
        let again = self.buffer.take_again();
        let batch = self.buffer.take();
        let db = self.db.clone();
        // Every batch taken before this one is stored too before the answer.
        let done = self.writes_done();
        let buffer = self.buffer.clone();
        let outage = self.outage.clone();
        Box::pin(
            async move {
                let _handling = handling;
                write_batch(db.clone(), again, true, &buffer, &outage).await;
                write_batch(db, batch, false, &buffer, &outage).await;
                done.await;
            }
            .in_runtime()
            .into_actor(self),
        )
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone as _, Utc};
    use payroll_entities::ActorType;
    use sea_orm::{Iden as _, Iterable as _};

    use super::*;

    #[test]
    fn a_csv_row_has_every_column_in_order_nulls_unquoted_and_text_quoted() {
        let names: Vec<String> = audit_entry::Column::iter().map(|c| c.to_string()).collect();
        assert_eq!(
            names,
            [
                "id",
                "occurred_at",
                "request_id",
                "actor_type",
                "api_key_id",
                "agent_session_id",
                "method",
                "path",
                "operation",
                "action",
                "resource_type",
                "resource_id",
                "status_code",
                "idempotency_key",
                "details"
            ]
        );
        let entry = audit_entry::Model {
            id: "aud_1".into(),
            occurred_at: Utc
                .with_ymd_and_hms(2026, 11, 25, 1, 2, 3)
                .single()
                .expect("time")
                + chrono::Duration::nanoseconds(5_678),
            request_id: None,
            actor_type: ActorType::ApiKey,
            api_key_id: Some("key_1".into()),
            agent_session_id: None,
            method: Some("GET".into()),
            path: Some("/a,\"b\"\nc".into()),
            operation: Some("getPayrollRun".into()),
            action: None,
            resource_type: Some(String::new()),
            resource_id: None,
            status_code: Some(200),
            idempotency_key: None,
            details: serde_json::json!({"why": "x,\"y\""}),
        };
        let mut line = String::new();
        csv_row(&mut line, &entry);
        assert_eq!(
            line,
            "\"aud_1\",2026-11-25T01:02:03.000005Z,,\"API_KEY\",\"key_1\",,\"GET\",\
             \"/a,\"\"b\"\"\nc\",\"getPayrollRun\",,\"\",,200,,\"{\"\"why\"\":\"\"x,\\\"\"y\\\"\"\"\"}\"\n"
        );
    }
}
