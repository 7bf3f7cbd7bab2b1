//! The email outbox: one row per notification, committed with the state change that causes
//! it, sent later by the mailer. A payout notification is rendered from the payout when it is
//! sent; a wallet-change notice carries what it says.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::{EmailKind, EmailStatus};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "email_outbox")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// The payout notified, or for a wallet-change notice the employee.
    pub payout_id: String,
    pub payout_attempt: i32,
    /// Fixed at creation, so a repeated send carries the same Message-ID.
    pub message_id: String,
    pub status: EmailStatus,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub kind: EmailKind,
    /// A wallet-change notice as JSON: everything its message says (CONTRACT §16).
    pub notice: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
