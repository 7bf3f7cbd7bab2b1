//! Database migrations, one change per file, run at start-up and by `payroll migrate`.

pub use sea_orm_migration::prelude::*;

mod m20260301_000001_create_api_keys;
mod m20260301_000002_create_idempotency_records;
mod m20260301_000003_create_audit_entries;
mod m20260301_000004_create_employees;
mod m20260301_000005_create_payroll_runs;
mod m20260301_000006_create_payouts;
mod m20260302_000001_create_jobs;
mod m20260302_000002_create_events;
mod m20260302_000003_create_email_outbox;
mod m20260302_000004_create_sandbox;
mod m20260302_000005_create_treasury_transfers;
mod m20260302_000006_add_payout_job;
mod m20260302_000007_add_employee_name_lower;
mod m20260303_000001_create_webhooks;
mod m20260303_000002_add_delivery_claim_index;
mod m20260304_000001_create_run_leases_and_rate_limits;
mod m20261124_000001_create_exchange_holds;
mod m20261124_000002_add_payout_sends;
mod m20261125_000001_announce_run_changes;
mod m20261125_000002_outbox_claim_order;
mod m20261125_000003_payouts_room_for_updates;
mod m20261125_000004_unclaimed_payouts_index;
mod m20261125_000005_drop_payouts_employee_index;
mod m20261126_000001_claims_written_in_place;
mod m20261126_000002_holds_released_in_place;
mod m20261126_000003_drop_events_resource_index;
mod m20261127_000001_status_written_in_place;
mod m20261128_000001_drop_outbox_payout_index;
mod m20261129_000001_create_database_probes;
mod m20261129_000002_count_funding_decisions;
mod m20261129_000003_create_service_facts;
mod m20261130_000001_create_agent_sessions_and_approvals;
mod m20261130_000002_add_employee_wallet_holds;
mod m20261201_000001_add_payout_unfound_lookups;
mod postgres;
mod unused_index;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20260301_000001_create_api_keys::Migration),
            Box::new(m20260301_000002_create_idempotency_records::Migration),
            Box::new(m20260301_000003_create_audit_entries::Migration),
            Box::new(m20260301_000004_create_employees::Migration),
            Box::new(m20260301_000005_create_payroll_runs::Migration),
            Box::new(m20260301_000006_create_payouts::Migration),
            Box::new(m20260302_000001_create_jobs::Migration),
            Box::new(m20260302_000002_create_events::Migration),
            Box::new(m20260302_000003_create_email_outbox::Migration),
            Box::new(m20260302_000004_create_sandbox::Migration),
            Box::new(m20260302_000005_create_treasury_transfers::Migration),
            Box::new(m20260302_000006_add_payout_job::Migration),
            Box::new(m20260302_000007_add_employee_name_lower::Migration),
            Box::new(m20260303_000001_create_webhooks::Migration),
            Box::new(m20260303_000002_add_delivery_claim_index::Migration),
            Box::new(m20260304_000001_create_run_leases_and_rate_limits::Migration),
            Box::new(m20261124_000001_create_exchange_holds::Migration),
            Box::new(m20261124_000002_add_payout_sends::Migration),
            Box::new(m20261125_000001_announce_run_changes::Migration),
            Box::new(m20261125_000002_outbox_claim_order::Migration),
            Box::new(m20261125_000003_payouts_room_for_updates::Migration),
            Box::new(m20261125_000004_unclaimed_payouts_index::Migration),
            Box::new(m20261125_000005_drop_payouts_employee_index::MIGRATION),
            Box::new(m20261126_000001_claims_written_in_place::Migration),
            Box::new(m20261126_000002_holds_released_in_place::Migration),
            Box::new(m20261126_000003_drop_events_resource_index::MIGRATION),
            Box::new(m20261127_000001_status_written_in_place::Migration),
            Box::new(m20261128_000001_drop_outbox_payout_index::MIGRATION),
            Box::new(m20261129_000001_create_database_probes::Migration),
            Box::new(m20261129_000002_count_funding_decisions::Migration),
            Box::new(m20261129_000003_create_service_facts::Migration),
            Box::new(m20261130_000001_create_agent_sessions_and_approvals::Migration),
            Box::new(m20261130_000002_add_employee_wallet_holds::Migration),
            Box::new(m20261201_000001_add_payout_unfound_lookups::Migration),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A migration's name is what `seaql_migrations` records: each is its module's name, once.
    #[test]
    fn every_migration_is_named_after_its_module_once() {
        let names: Vec<String> = Migrator::migrations()
            .iter()
            .map(|m| m.name().to_owned())
            .collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        let modules: Vec<&str> = include_str!("lib.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("mod m")?.strip_suffix(';'))
            .collect();
        assert_eq!(modules.len(), names.len());
        for (module, name) in modules.iter().zip(&names) {
            assert_eq!(format!("m{module}"), *name);
        }
    }
}
