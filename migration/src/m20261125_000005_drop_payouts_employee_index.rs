use crate::unused_index::DropUnusedIndex;

/// No query reads payouts by employee, and employees are never deleted (only made INACTIVE),
/// so `idx_payouts_employee` only cost writes: an entry for every payout inserted, and on
/// PostgreSQL one more for every payout update that is not heap-only (a run's execution
/// makes three per payout).
pub const MIGRATION: DropUnusedIndex = DropUnusedIndex {
    name: "m20261125_000005_drop_payouts_employee_index",
    index: "idx_payouts_employee",
    table: "payouts",
    column: "employee_id",
};
