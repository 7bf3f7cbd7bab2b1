//! `/treasury`: the exchange account and treasury wallet balances, and transfers between them.

use actix_web::{HttpResponse, http::StatusCode};
use payroll_actors::exchange::{
    ExchangeError,
    actor::{ListTransfers, Transfer},
    desk::DeskError,
    holds,
};
use payroll_actors::telemetry::{CountedSend, MAILBOX_LIMIT};
use payroll_actors::views::Timestamp;
use payroll_entities::{
    Cents, MAX_MONEY_CENTS, Network, Stablecoin, TransferDirection, TransferStatus, db::Db,
    health::Fault, time, treasury_transfer,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::{
    http::{
        audit::AuditRecord,
        body::{merge_errors, money_over_limit},
        error::{ApiError, ErrorCode, FieldError},
        request::ApiRequest,
    },
    routes::runs::exchange_failed,
};

/// Most characters in a transfer's note.
pub const NOTE_MAX: usize = 1000;

#[derive(Debug, Serialize, ToSchema)]
pub struct ExchangeAccount {
    /// `sandbox`, `okx` or `binance`.
    pub provider: &'static str,
    pub connected: bool,
    pub stablecoin: Stablecoin,
    pub available_usd_cents: i64,
    /// Held for DEPOSITED and PAYING_OUT runs.
    pub reserved_usd_cents: i64,
    /// available − reserved; negative when money left the exchange from outside.
    pub unreserved_usd_cents: i64,
    /// Send USDC here to fund payroll.
    pub deposit_address: String,
    pub network: Network,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TreasuryWalletResource {
    pub address: String,
    pub network: Network,
    pub balance_usd_cents: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TreasuryBalance {
    pub exchange: ExchangeAccount,
    /// Null where the provider has no treasury wallet (okx, binance).
    pub treasury_wallet: Option<TreasuryWalletResource>,
    pub fetched_at: Timestamp,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TransferResource {
    pub id: String,
    pub direction: TransferDirection,
    pub amount_usd_cents: i64,
    pub status: TransferStatus,
    pub note: Option<String>,
    pub created_at: Timestamp,
    pub completed_at: Option<Timestamp>,
}

impl From<&treasury_transfer::Model> for TransferResource {
    fn from(t: &treasury_transfer::Model) -> TransferResource {
        TransferResource {
            id: t.id.clone(),
            direction: t.direction,
            amount_usd_cents: t.amount_usd_cents,
            status: t.status,
            note: t.note.clone(),
            created_at: t.created_at.into(),
            completed_at: t.completed_at.map(Timestamp::from),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTransferRequest {
    /// At least 1 cent, at most 100,000,000,000 cents.
    #[schema(value_type = i64, minimum = 1, maximum = 100_000_000_000_i64, required)]
    pub amount_usd_cents: Option<i64>,
    /// to_exchange (default) or to_treasury.
    pub direction: Option<TransferDirection>,
    pub note: Option<String>,
}

/// Get the exchange account's USDC balance, what runs hold of it, and the treasury wallet.
#[utoipa::path(get, path = "/treasury/balance", operation_id = "getTreasuryBalance", tag = "treasury",
    responses((status = 200, description = "The exchange account (read live) and the treasury wallet", body = TreasuryBalance)))]
#[tracing::instrument(skip_all)]
pub async fn balance(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let state = req.state();
    // Read at the exchange actor's consistent point: no withdrawal accepted at the exchange
    // is still counted as held.
    let point = state.funds.read().await.map_err(|e| desk_failed(&req, e))?;
    let balances = point.balances.clone();
    req.ok(&TreasuryBalance {
        exchange: ExchangeAccount {
            provider: state.exchange_provider,
            connected: true,
            stablecoin: Stablecoin::Usdc,
            available_usd_cents: point.available(),
            reserved_usd_cents: point.reserved,
            unreserved_usd_cents: point.unreserved(),
            deposit_address: balances.deposit_address,
            network: balances.network,
        },
        treasury_wallet: balances.treasury.map(|t| TreasuryWalletResource {
            address: t.address,
            network: t.network,
            balance_usd_cents: t.balance.0,
        }),
        fetched_at: time::now().into(),
    })
}

fn desk_failed(req: &ApiRequest, err: DeskError) -> ApiError {
    match err {
        DeskError::Db(e) => e.into(),
        DeskError::Mailbox(e) => e.into(),
        DeskError::Exchange(ExchangeError::Database(fault, cause)) => {
            tracing::warn!(fault = fault.as_str(), error = %cause, "database fault");
            ApiError::database(fault)
        }
        DeskError::Exchange(e) => exchange_failed(req, &e.to_string()),
        DeskError::Contended => ApiError::database(Fault::Conflict),
    }
}

/// A transfer's id, derived from the Idempotency-Key: a retry after a crash finds the same
/// transfer at the provider instead of moving the money twice.
fn transfer_id(req: &ApiRequest) -> String {
    let seed = match &req.claim {
        Some(claim) => format!("{}:{}", claim.lineage_id, claim.key),
        None => req.request_id.clone(),
    };
    let digest = Sha256::digest(seed.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    format!("trf_{}", ulid::Ulid::from_bytes(bytes))
}

/// Move USDC between the treasury wallet and the exchange account.
///
/// Moves money: to_exchange (default) funds runs; to_treasury takes unreserved funds back.
#[utoipa::path(post, path = "/treasury/transfers", operation_id = "createTreasuryTransfer", tag = "treasury",
    request_body = CreateTransferRequest,
    responses((status = 201, description = "The transfer (COMPLETED at once on the sandbox unless exchange.sandbox.transfer_delay_ms). A provider that cannot move treasury funds (okx, binance) answers 409 TREASURY_TRANSFER_UNSUPPORTED with `deposit_address` and `network` in the error details", body = TransferResource)))]
#[tracing::instrument(skip_all)]
pub async fn create_transfer(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let (body, mut errors) = req.json_partial::<CreateTransferRequest>()?;
    let mut checks = Vec::new();
    match body.amount_usd_cents {
        None => checks.push(FieldError::new(
            "amount_usd_cents",
            "required: at least 1 cent",
        )),
        Some(a) if a < 1 => checks.push(FieldError::new(
            "amount_usd_cents",
            "must be at least 1 cent",
        )),
        Some(a) if a > MAX_MONEY_CENTS => checks.push(money_over_limit("amount_usd_cents")),
        Some(_) => {}
    }
    crate::http::body::check_text(&mut checks, "note", body.note.as_deref(), NOTE_MAX);
    merge_errors(&mut errors, checks);
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    if let Some(held) = crate::http::approvals::hold(&req, None).await? {
        return Ok(held);
    }
    let amount = Cents(body.amount_usd_cents.unwrap_or_default());
    let direction = body.direction.unwrap_or(TransferDirection::ToExchange);
    let state = req.state();
    let transfer_id = transfer_id(&req);
    // Money leaving the exchange never takes what runs hold: the decision is taken at the
    // exchange actor's consistent point and commits a hold of the amount, which keeps every
    // decision taken meanwhile off that money while the exchange makes the transfer (no lock
    // is held across that call); the hold goes once the exchange has answered.
    let held = match direction {
        TransferDirection::ToTreasury => {
            let decision = state
                .funds
                .open(None)
                .await
                .map_err(|e| desk_failed(&req, e))?;
            let unreserved = decision.point.unreserved();
            if amount.0 > unreserved {
                let available = unreserved.max(0);
                return Err(ApiError::new(
                    ErrorCode::TreasuryInsufficientBalance,
                    format!(
                        "The exchange account has {available} cents not held for funded runs; {} were requested.",
                        amount.0
                    ),
                )
                .detail("requested_usd_cents", amount.0)
                .detail("available_usd_cents", available));
            }
            let (tx, guard) = decision.begin();
            let hold =
                holds::hold_transfer(&*tx, &transfer_id, amount.0, state.db.clock_now()).await?;
            tx.commit().await?;
            drop(guard);
            Some(hold)
        }
        TransferDirection::ToExchange => None,
    };
    let sent = state.exchange.bounded_send(
        Transfer {
            transfer_id: transfer_id.clone(),
            direction,
            amount,
            note: body.note,
        },
        MAILBOX_LIMIT,
    );
    let answer = match sent {
        Ok(request) => request.await.map_err(ApiError::from),
        Err(overloaded) => Err(ApiError::from(overloaded)),
    };
    if let Some(hold) = held {
        release_transfer_hold(&state.db, hold, matches!(answer, Ok(Ok(_)))).await;
    }
    let transfer = answer?
        .map_err(|err| match err {
            ExchangeError::InsufficientFunds {
                requested,
                available,
            } => ApiError::new(
                ErrorCode::TreasuryInsufficientBalance,
                format!("The source holds {available} cents; {requested} were requested."),
            )
            .detail("requested_usd_cents", requested.0)
            .detail("available_usd_cents", available.0),
            ExchangeError::TransferUnsupported {
                deposit_address,
                network,
            } => ApiError::new(
                ErrorCode::TreasuryTransferUnsupported,
                "This exchange cannot pull funds from the treasury wallet.",
            )
            .detail("deposit_address", deposit_address)
            .detail("network", network.as_str()),
            ExchangeError::Unavailable(reason) | ExchangeError::Paused(reason) => {
                exchange_failed(&req, &reason)
            }
            ExchangeError::Database(fault, cause) => {
                tracing::warn!(fault = fault.as_str(), error = %cause, "transfer not carried out: database fault");
                ApiError::database(fault)
            }
        })?;
    let shown = TransferResource::from(&transfer);
    let tx = state.db.begin_write().await?;
    let record = AuditRecord::new(
        "TREASURY_TRANSFER_CREATED",
        "treasury_transfer",
        &transfer.id,
    )
    .details(
        json!({"direction": direction, "amount_usd_cents": amount.0, "status": transfer.status}),
    );
    req.commit::<_, TransferResource>(tx, StatusCode::CREATED, &shown, None, record)
        .await
}

/// Releases the hold of an outgoing transfer once the exchange has answered: it took the
/// money (its balance is lower now), or it did not. One left by a failure here, or a crash, is
/// released by the retention janitor later.
async fn release_transfer_hold(db: &Db, hold: (String, i32), made: bool) {
    let why = if made {
        holds::Release::Accepted
    } else {
        holds::Release::Cancelled
    };
    let released = async {
        let tx = db.begin_write().await?;
        holds::release(&*tx, std::slice::from_ref(&hold), why).await?;
        tx.commit().await
    }
    .await;
    if let Err(err) = released {
        tracing::warn!(hold = %hold.0, error = %err, "the transfer's hold was not released now; the retention janitor releases it");
    }
}

/// List treasury transfers, newest first.
#[utoipa::path(get, path = "/treasury/transfers", operation_id = "listTreasuryTransfers", tag = "treasury",
    params(("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Transfers, newest first", body = Vec<TransferResource>)))]
#[tracing::instrument(skip_all)]
pub async fn list_transfers(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let page = query.page();
    query.finish(&["limit", "offset"])?;
    let (items, total) = req
        .state()
        .exchange
        .bounded_send(
            ListTransfers {
                limit: page.limit,
                offset: page.offset,
            },
            MAILBOX_LIMIT,
        )?
        .await?
        .map_err(|e| match e {
            ExchangeError::Database(fault, _) => ApiError::database(fault),
            other => exchange_failed(&req, &other.to_string()),
        })?;
    let shown: Vec<TransferResource> = items.iter().map(TransferResource::from).collect();
    req.list(&shown, page, total)
}
