//! The `Mailer` drains the email outbox (CONTRACT §11): rows committed with the state change
//! that causes them, rendered from their payout when sent, retried with a doubling backoff up
//! to `email.max_attempts`. A mail failure never touches a payout. Each row has a fixed
//! Message-ID, so the only repeat possible (an ambiguous SMTP failure) carries the same one.

pub mod notices;
mod render;

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    time::Duration,
};

use actix::prelude::*;

use crate::runtime::{ArbiterGuard, DroppedInRuntime, InRuntime};
use chrono::{DateTime, Utc};
use lettre::{
    AsyncFileTransport, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
    message::{Mailbox, header::ContentType},
    transport::smtp::authentication::Credentials,
};
use payroll_entities::{EmailStatus, db::Db, email_outbox, ids, payout, payroll_run, time};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Select,
    sea_query::{Expr, LockBehavior, LockType, Query},
};

pub use render::{render_payout_email, shorten_address};

use crate::{
    outage::Outage,
    settings::EmailSettings,
    telemetry::{self, ActorKind, Handling, Observed},
};

/// Rows taken from the outbox per round.
const BATCH: u64 = 100;

/// How long a message whose send found the mail server away waits before it is tried again
/// (others are tried before it meanwhile).
const TRANSPORT_RETRY: chrono::Duration = chrono::Duration::seconds(5);

/// A round claims its rows for this long (their `next_attempt_at` moves out by it), so other
/// instances leave them alone; rows of a round that stopped (a crash) are due again after it.
/// A round gives back what it has not sent by half this time.
const CLAIM: chrono::Duration = chrono::Duration::seconds(30);

/// Queues one notification per payout of `job_id` (its payouts hold the job already), in the
/// caller's transaction, as one `INSERT … SELECT`: nothing of the payouts travels to the
/// server and back. The job's payouts are read among its run's (`run_id`), through the
/// run's index: no index names the job, and every payout ever written is not to be read. A
/// message's outbox id and `Message-ID` are its payout's id and attempt, so a (payout,
/// attempt) can never be queued twice: `eml_<payout ulid>-<attempt>`.
pub async fn enqueue_job<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    job_id: &str,
) -> Result<(), DbErr> {
    use email_outbox::Column as O;
    let now = time::now();
    // `eml_` and the payout id after its prefix (SQL's `substr` counts from 1): constants of
    // the id kinds, never input.
    let outbox_id = format!(
        r#"'{}' || substr("id", {}) || '-' || "attempt""#,
        ids::IdKind::Email.prefix(),
        ids::IdKind::Payout.prefix().len() + 1
    );
    let mut rows = Query::select();
    rows.expr(Expr::cust(outbox_id))
        .column(payout::Column::Id)
        .column(payout::Column::Attempt)
        .expr(Expr::cust(
            r#"'<' || "id" || '.' || "attempt" || '@payroll.local>'"#,
        ))
        .expr(Expr::value(EmailStatus::Pending.as_str()))
        .expr(Expr::value(0i32))
        .expr(Expr::value(now))
        .expr(Expr::value(Option::<String>::None))
        .expr(Expr::value(now))
        .expr(Expr::value(Option::<DateTime<Utc>>::None))
        .from(payout::Entity)
        .and_where(payout::Column::PayrollRunId.eq(run_id))
        .and_where(payout::Column::JobId.eq(job_id));
    let mut insert = Query::insert();
    insert
        .into_table(email_outbox::Entity)
        .columns([
            O::Id,
            O::PayoutId,
            O::PayoutAttempt,
            O::MessageId,
            O::Status,
            O::Attempts,
            O::NextAttemptAt,
            O::LastError,
            O::CreatedAt,
            O::SentAt,
        ])
        .select_from(rows)
        .map_err(|err| DbErr::Custom(err.to_string()))?;
    conn.execute(&insert).await?;
    Ok(())
}

enum Transport {
    File(AsyncFileTransport<Tokio1Executor>),
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
}

/// Why a transport could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MailerConfigError(String);

impl Transport {
    fn new(
        settings: &EmailSettings,
        data_dir: &std::path::Path,
    ) -> Result<Transport, MailerConfigError> {
        match settings.transport.as_str() {
            "file" => {
                let dir: PathBuf = data_dir.join("outbox");
                std::fs::create_dir_all(&dir).map_err(|e| {
                    MailerConfigError(format!("cannot create {}: {e}", dir.display()))
                })?;
                Ok(Transport::File(AsyncFileTransport::new(dir)))
            }
            "smtp" => {
                let smtp = &settings.smtp;
                let builder = match smtp.tls.as_str() {
                    "none" => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host),
                    "starttls" => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&smtp.host)
                        .map_err(|e| MailerConfigError(format!("email.smtp: {e}")))?,
                    "tls" => AsyncSmtpTransport::<Tokio1Executor>::relay(&smtp.host)
                        .map_err(|e| MailerConfigError(format!("email.smtp: {e}")))?,
                    other => {
                        return Err(MailerConfigError(format!(
                            "email.smtp.tls: `{other}` is not none, starttls or tls"
                        )));
                    }
                };
                let mut builder = builder
                    .port(smtp.port)
                    .timeout(Some(Duration::from_secs(20)));
                if let (Some(user), Some(password)) = (&smtp.username, &smtp.password) {
                    builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
                }
                Ok(Transport::Smtp(builder.build()))
            }
            other => Err(MailerConfigError(format!(
                "email.transport: `{other}` is not file or smtp"
            ))),
        }
    }

    async fn send(&self, message: Message) -> Result<(), SendFailure> {
        match self {
            // The folder cannot be written (out of space, say): nothing about this message.
            Transport::File(t) => t
                .send(message)
                .await
                .map(|_| ())
                .map_err(|e| SendFailure::TransportDown(e.to_string())),
            Transport::Smtp(t) => t.send(message).await.map(|_| ()).map_err(|e| {
                let closing = e.status().is_some_and(|code| code.to_string() == "421");
                if closing {
                    // 421: the server is closing, not refusing this message.
                    SendFailure::TransportDown(e.to_string())
                } else if e.is_response() || e.is_client() {
                    // The server answered with a refusal of this message (4xx or 5xx), or
                    // the message cannot be sent as it is (an address the server cannot take).
                    SendFailure::Refused(e.to_string())
                } else {
                    // No answer: refused or reset connection, timeout, TLS. The server is
                    // away; perhaps it took the message before it went (the only repeat the
                    // contract allows, under the same Message-ID).
                    SendFailure::TransportDown(e.to_string())
                }
            }),
        }
    }
}

/// Why a message was not sent.
#[derive(Debug)]
enum SendFailure {
    /// The mail server (or the outbox folder) cannot be reached: the message is not at fault,
    /// and the attempt is not counted; the mailer waits for it to come back.
    TransportDown(String),
    /// The server refused the message, or it cannot be built: counted, up to
    /// `email.max_attempts`.
    Refused(String),
}

/// Whether the mail transport works, as the mailer last found it; shown by `/status` and
/// `/metrics`.
#[derive(Debug, Default)]
pub struct TransportHealth {
    down: std::sync::Mutex<Option<(DateTime<Utc>, String)>>,
}

impl TransportHealth {
    /// Since when, and why, the transport fails; `None` while it works.
    pub fn down_since(&self) -> Option<(DateTime<Utc>, String)> {
        self.down.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, down: Option<String>) {
        let mut state = self.down.lock().unwrap_or_else(|p| p.into_inner());
        match (down, state.is_some()) {
            (Some(why), false) => *state = Some((time::now(), why)),
            (None, true) => *state = None,
            _ => {}
        }
        metrics::gauge!("payroll_email_transport_up").set(if state.is_some() { 0.0 } else { 1.0 });
    }
}

pub struct Mailer {
    db: Db,
    settings: EmailSettings,
    from: Sender,
    /// Dropped inside the mailer's runtime: its SMTP pool needs one to let connections go.
    transport: DroppedInRuntime<std::sync::Arc<Transport>>,
    draining: bool,
    /// A nudge arrived while draining: go again right after.
    again: bool,
    /// The mail server away: no round before this.
    resume_at: Option<std::time::Instant>,
    /// The mail server away: logged once an outage.
    transport_outage: Outage,
    /// Rounds that failed on the database: logged once an outage.
    database_outage: Outage,
    health: std::sync::Arc<TransportHealth>,
}

/// How a round ended.
enum Round {
    /// Every due message was tried; whether a full batch was due (so go again at once).
    Done { full: bool },
    /// The mail server is away: the round stopped at its first message, counted no attempt,
    /// and gave the rest back.
    TransportDown(String),
}

impl Mailer {
    pub fn new(
        db: Db,
        settings: EmailSettings,
        data_dir: &std::path::Path,
        health: std::sync::Arc<TransportHealth>,
    ) -> Result<Mailer, MailerConfigError> {
        let from: Mailbox = settings
            .from
            .parse()
            .map_err(|e| MailerConfigError(format!("email.from: {e}")))?;
        let transport = Transport::new(&settings, data_dir)?;
        let company = settings.company_name.clone();
        Ok(Mailer {
            db,
            settings,
            from: Sender {
                mailbox: from,
                company,
            },
            transport: DroppedInRuntime::new(std::sync::Arc::new(transport)),
            draining: false,
            again: false,
            resume_at: None,
            transport_outage: Outage::new("emails cannot be sent: the mail transport fails"),
            database_outage: Outage::new("email outbox round failed"),
            health,
        })
    }

    /// Starts the mailer on an arbiter (thread) of its own: rendering messages and recording
    /// each send never wait behind a run's steps on the main thread, nor hold them up. Its
    /// priority stays the process's: a pooled PostgreSQL connection it opened is driven by its
    /// runtime for whoever uses it, so a thread made to yield would slow the runs' statements.
    pub fn start_on_own_arbiter(self) -> (Addr<Mailer>, ArbiterGuard) {
        ArbiterGuard::start_actor(move || self)
    }

    fn drain(&mut self, ctx: &mut Context<Self>) {
        if self.draining {
            self.again = true;
            return;
        }
        // The mail server (or the database) is away: the next round waits its turn, however
        // many nudges come meanwhile.
        if self
            .resume_at
            .is_some_and(|at| at > std::time::Instant::now())
        {
            return;
        }
        if self.db.health().unreachable_since().is_some() {
            return;
        }
        let Some(transport) = self.transport.get().cloned() else {
            return;
        };
        self.draining = true;
        self.again = false;
        let db = self.db.clone();
        let from = self.from.clone();
        let max_attempts = self.settings.max_attempts.max(1) as i32;
        ctx.spawn(
            async move { send_due(&db, &transport, &from, max_attempts).await }
                .in_runtime()
                .into_actor(self)
                .map(|result, act, ctx| {
                    act.draining = false;
                    match result {
                        Ok(Round::Done { full }) => {
                            act.database_outage.succeeded();
                            act.transport_outage.succeeded();
                            act.health.set(None);
                            act.resume_at = None;
                            if full || act.again {
                                act.drain(ctx);
                            }
                        }
                        Ok(Round::TransportDown(why)) => {
                            act.database_outage.succeeded();
                            let wait = act.transport_outage.failed(&why);
                            act.health.set(Some(why));
                            act.resume_at = Some(std::time::Instant::now() + wait);
                        }
                        Err(err) => {
                            act.db.health().report(&err);
                            let wait = act.database_outage.failed(&err);
                            act.resume_at = Some(std::time::Instant::now() + wait);
                        }
                    }
                }),
        );
    }
}

/// On PostgreSQL, in the claim's transaction before its query: the batch is read in order
/// from the claim index, and reading stops there. A planner that takes due messages for rare
/// (no statistics yet, or statistics from before a large run queued its messages) reads every
/// due message and sorts them instead: a sort of 100,000 rows spilled to disk, for each batch
/// of 100.
pub const CLAIM_IN_INDEX_ORDER: &str = "SET LOCAL enable_sort = off";

/// The next batch of due messages, oldest first, locked on PostgreSQL (skipping rows another
/// instance holds).
pub fn due_batch(backend: DatabaseBackend, now: DateTime<Utc>) -> Select<email_outbox::Entity> {
    let select = email_outbox::Entity::find()
        .filter(email_outbox::Column::Status.eq(EmailStatus::Pending))
        .filter(email_outbox::Column::NextAttemptAt.lte(now))
        .order_by_asc(email_outbox::Column::NextAttemptAt)
        .order_by_asc(email_outbox::Column::Id)
        .limit(BATCH);
    if backend == DatabaseBackend::Postgres {
        select.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
    } else {
        select
    }
}

/// Claims up to a batch of due rows: with several instances on one PostgreSQL database,
/// `FOR UPDATE SKIP LOCKED` gives each row to one of them, and the claim keeps it theirs.
/// Returns the rows and the claim's `next_attempt_at`, which is also its token: a later
/// write to a row applies only while the row still carries it.
async fn claim_due(db: &Db) -> Result<(Vec<email_outbox::Model>, DateTime<Utc>), DbErr> {
    let now = time::now();
    let claim = now + CLAIM;
    let tx = db.begin_background_write().await?;
    if db.backend() == DatabaseBackend::Postgres {
        tx.execute_unprepared(CLAIM_IN_INDEX_ORDER).await?;
    }
    let due = due_batch(db.backend(), now).all(&*tx).await?;
    if !due.is_empty() {
        email_outbox::Entity::update_many()
            .col_expr(email_outbox::Column::NextAttemptAt, Expr::value(claim))
            .filter(email_outbox::Column::Id.is_in(due.iter().map(|r| r.id.clone())))
            .exec(&*tx)
            .await?;
    }
    tx.commit().await?;
    Ok((due, claim))
}

/// Makes claimed rows that were not tried due again at once.
async fn release(db: &Db, ids: Vec<String>, claim: DateTime<Utc>) -> Result<(), DbErr> {
    if ids.is_empty() {
        return Ok(());
    }
    let tx = db.begin_background_write().await?;
    email_outbox::Entity::update_many()
        .col_expr(
            email_outbox::Column::NextAttemptAt,
            Expr::value(time::now()),
        )
        .filter(email_outbox::Column::Id.is_in(ids))
        .filter(email_outbox::Column::Status.eq(EmailStatus::Pending))
        .filter(email_outbox::Column::NextAttemptAt.eq(claim))
        .exec(&*tx)
        .await?;
    tx.commit().await
}

/// Notes why the message could not be sent on its row (still claimed), counting no attempt,
/// and makes it due again a little later (it keeps its claim until then).
async fn note_error(db: &Db, id: &str, claim: DateTime<Utc>, why: &str) -> Result<(), DbErr> {
    let tx = db.begin_background_write().await?;
    email_outbox::Entity::update_many()
        .col_expr(
            email_outbox::Column::LastError,
            Expr::value(Some(why.to_owned())),
        )
        .col_expr(
            email_outbox::Column::NextAttemptAt,
            Expr::value(time::now() + TRANSPORT_RETRY),
        )
        .filter(email_outbox::Column::Id.eq(id))
        .filter(email_outbox::Column::NextAttemptAt.eq(claim))
        .exec(&*tx)
        .await?;
    tx.commit().await
}

/// One round: claims up to a batch of due messages and sends them, recording each outcome
/// right after its send, so a crash can repeat at most the one message in flight. A round
/// that runs past half its claim gives the rest back. Returns whether to go again at once.
async fn send_due(
    db: &Db,
    transport: &Transport,
    from: &Sender,
    max_attempts: i32,
) -> Result<Round, DbErr> {
    let started = std::time::Instant::now();
    let (due, claim) = claim_due(db).await?;
    let full = due.len() as u64 == BATCH;
    let sources = Sources::load(db, &due).await?;
    let (mut sent, mut failed) = (0u64, 0u64);
    let mut due = due.into_iter();
    while let Some(row) = due.next() {
        if started.elapsed() > (CLAIM / 2).to_std().unwrap_or_default() {
            let mut rest = vec![row.id];
            rest.extend(due.map(|r| r.id));
            release(db, rest, claim).await?;
            telemetry::emails("sent", sent);
            telemetry::emails("failed", failed);
            return Ok(Round::Done { full: true });
        }
        // Each message starts in a gap between payout writes (on SQLite), not ahead of them.
        db.stand_aside().await;
        let result = match build_message(&row, &sources, from) {
            Some(message) => transport.send(message).await,
            None => Err(SendFailure::Refused(
                "the payout no longer exists".to_owned(),
            )),
        };
        let result = match result {
            Ok(()) => Ok(()),
            Err(SendFailure::Refused(why)) => Err(why),
            // The server is away: this message and the rest are given back as they were (no
            // attempt counted), due again when the mailer tries the server next.
            Err(SendFailure::TransportDown(why)) => {
                // This message goes behind the others, so that one a server keeps dropping the
                // connection over holds none of them up; the others are due again at once.
                note_error(db, &row.id, claim, &why).await?;
                release(db, due.map(|r| r.id).collect(), claim).await?;
                telemetry::emails("sent", sent);
                telemetry::emails("failed", failed);
                telemetry::emails("transport_down", 1);
                return Ok(Round::TransportDown(why));
            }
        };
        let attempts = row.attempts + 1;
        let update = email_outbox::Entity::update_many()
            .col_expr(email_outbox::Column::Attempts, Expr::value(attempts))
            .filter(email_outbox::Column::Id.eq(row.id.as_str()))
            // Still ours: a claim that lapsed mid-send (another instance claimed the row since)
            // records nothing over the other instance's outcome.
            .filter(email_outbox::Column::NextAttemptAt.eq(claim));
        match &result {
            Ok(()) => sent += 1,
            Err(_) => failed += 1,
        }
        let update = match result {
            Ok(()) => update
                .col_expr(
                    email_outbox::Column::Status,
                    Expr::value(EmailStatus::Sent.as_str()),
                )
                .col_expr(email_outbox::Column::SentAt, Expr::value(time::now()))
                .col_expr(
                    email_outbox::Column::LastError,
                    Expr::value(Option::<String>::None),
                ),
            Err(err) => {
                tracing::warn!(email = %row.id, attempts, error = %err, "email not sent");
                let status = if attempts >= max_attempts {
                    EmailStatus::Failed
                } else {
                    EmailStatus::Pending
                };
                let backoff =
                    chrono::Duration::milliseconds(1000i64 << (attempts - 1).clamp(0, 16));
                update
                    .col_expr(email_outbox::Column::Status, Expr::value(status.as_str()))
                    .col_expr(
                        email_outbox::Column::NextAttemptAt,
                        Expr::value(Utc::now() + backoff),
                    )
                    .col_expr(email_outbox::Column::LastError, Expr::value(Some(err)))
            }
        };
        // Recorded at once after the send, so a crash can repeat at most this message.
        let tx = db.begin_write().await?;
        update.exec(&*tx).await?;
        tx.commit().await?;
    }
    telemetry::emails("sent", sent);
    telemetry::emails("failed", failed);
    Ok(Round::Done { full })
}

/// The payouts and runs a round's messages are rendered from, read in two queries a round.
struct Sources {
    payouts: HashMap<String, payout::Model>,
    runs: HashMap<String, payroll_run::Model>,
}

impl Sources {
    async fn load(db: &Db, rows: &[email_outbox::Model]) -> Result<Sources, DbErr> {
        let ids: HashSet<String> = rows.iter().map(|r| r.payout_id.clone()).collect();
        let payouts: HashMap<String, payout::Model> = if ids.is_empty() {
            HashMap::new()
        } else {
            payout::Entity::find()
                .filter(payroll_entities::bulk::one_of(
                    db.backend(),
                    payout::Column::Id,
                    ids,
                ))
                .all(&db.conn)
                .await?
                .into_iter()
                .map(|p| (p.id.clone(), p))
                .collect()
        };
        let run_ids: HashSet<String> = payouts.values().map(|p| p.payroll_run_id.clone()).collect();
        let runs = if run_ids.is_empty() {
            HashMap::new()
        } else {
            payroll_run::Entity::find()
                .filter(payroll_run::Column::Id.is_in(run_ids))
                .all(&db.conn)
                .await?
                .into_iter()
                .map(|r| (r.id.clone(), r))
                .collect()
        };
        Ok(Sources { payouts, runs })
    }
}

/// Who payee emails come from: the sender's mailbox and the company's name.
#[derive(Clone)]
struct Sender {
    mailbox: Mailbox,
    company: String,
}

fn build_message(row: &email_outbox::Model, sources: &Sources, from: &Sender) -> Option<Message> {
    let (subject, body, email, name) = match row.kind {
        payroll_entities::EmailKind::WalletChanged => {
            let notice: notices::WalletNotice =
                serde_json::from_str(row.notice.as_deref()?).ok()?;
            let (subject, body) = notices::render_wallet_notice(&notice, &from.company);
            (subject, body, notice.email, notice.name)
        }
        payroll_entities::EmailKind::Payout => {
            let payout = sources.payouts.get(&row.payout_id)?;
            let run = sources.runs.get(&payout.payroll_run_id);
            let (subject, body) = render_payout_email(payout, run, &from.company);
            (
                subject,
                body,
                payout.employee_email.clone(),
                payout.employee_name.clone(),
            )
        }
    };
    // Built by lettre, never parsed from text: the name is encoded as a display name, and
    // control characters (refused at input anyway) are dropped.
    let address = email.parse::<lettre::Address>().ok()?;
    let name: String = name.chars().filter(|c| !c.is_control()).collect();
    let to = Mailbox::new(Some(name), address);
    Message::builder()
        .from(from.mailbox.clone())
        .to(to)
        .subject(subject)
        .message_id(Some(row.message_id.clone()))
        .header(ContentType::TEXT_PLAIN)
        .body(body)
        .ok()
}

impl Actor for Mailer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        telemetry::actor_started(Self::KIND);
        self.transport.bind();
        self.health.set(None);
        ctx.run_interval(Duration::from_secs(1), |act, ctx| act.drain(ctx));
        self.drain(ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        telemetry::actor_stopped(Self::KIND);
    }
}

impl Observed for Mailer {
    const KIND: ActorKind = ActorKind::Mailer;
}

/// New rows were committed: send them now rather than at the next tick.
#[derive(Message)]
#[rtype(result = "()")]
pub struct OutboxChanged;

impl Handler<OutboxChanged> for Mailer {
    type Result = ();

    fn handle(&mut self, _: OutboxChanged, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "OutboxChanged");
        self.drain(ctx);
    }
}
