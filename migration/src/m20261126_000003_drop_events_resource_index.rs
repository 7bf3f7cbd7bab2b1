use crate::unused_index::DropUnusedIndex;

/// No query reads events by resource (the events API filters by type and time, webhook
/// deliveries read events by id), so `idx_events_resource` only cost writes: an entry for each
/// of the two events every payout of a run writes.
pub const MIGRATION: DropUnusedIndex = DropUnusedIndex {
    name: "m20261126_000003_drop_events_resource_index",
    index: "idx_events_resource",
    table: "events",
    column: "resource_id",
};
