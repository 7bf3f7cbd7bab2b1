//! What the `RunManager` and every `RunActor` share: the database, the exchange actor, the
//! mailer, settings and this instance's lease.

use actix::prelude::*;
use payroll_entities::db::Db;

use super::lease::LeaseSettings;
use crate::{
    exchange::{actor::ExchangeActor, desk::FundsDesk},
    mailer::OutboxChanged,
    settings::{ExchangeSettings, RunsSettings, TestRunSettings},
    telemetry,
};

/// What every run actor needs.
pub struct RunDeps {
    pub db: Db,
    /// Where funding decisions are taken (one at a time, at the exchange's consistent point).
    pub funds: FundsDesk,
    pub exchange: Addr<ExchangeActor>,
    pub mailer: Option<Recipient<OutboxChanged>>,
    pub runs: RunsSettings,
    pub exchange_settings: ExchangeSettings,
    /// The provider's [`ExchangeProvider::lookups_read_history`](crate::exchange::ExchangeProvider::lookups_read_history).
    pub lookups_read_history: bool,
    /// The provider's [`ExchangeProvider::refuses_repeated_client_id`](crate::exchange::ExchangeProvider::refuses_repeated_client_id):
    /// which resend rule applies (CONTRACT §7).
    pub client_ids_deduped: bool,
    pub test_run: TestRunSettings,
    /// This instance's id and lease duration.
    pub lease: LeaseSettings,
}

impl RunDeps {
    /// Puts the mailer to work after new outbox rows were committed.
    pub fn nudge_mailer(&self) {
        if let Some(mailer) = &self.mailer {
            if mailer.connected() {
                telemetry::enqueued(telemetry::ActorKind::Mailer);
            }
            mailer.do_send(OutboxChanged);
        }
    }
}
