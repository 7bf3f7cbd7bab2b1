use crate::unused_index::DropUnusedIndex;

/// No query reads the email outbox by payout (the mailer claims by status, due time and id,
/// and writes by id; an outbox id names its payout and attempt), so `idx_email_outbox_payout`
/// only cost writes: an entry for each of the messages an execute queues, a fifth of the
/// time PostgreSQL took to insert a run's 100,000 of them.
pub const MIGRATION: DropUnusedIndex = DropUnusedIndex {
    name: "m20261128_000001_drop_outbox_payout_index",
    index: "idx_email_outbox_payout",
    table: "email_outbox",
    column: "payout_id",
};
