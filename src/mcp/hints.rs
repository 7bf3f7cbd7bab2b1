//! The MCP annotations of each tool: `readOnlyHint` for every GET, and for every write a
//! decision written down here by operationId, so a new operation cannot slip in unjudged (a
//! test in `catalog` holds the table to the document).

/// What a write does to the world, as MCP's hints describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    pub read_only: bool,
    /// Moves money or cannot be undone.
    pub destructive: bool,
    /// Sending the same call again changes nothing more.
    pub idempotent: bool,
}

const READ: Hints = Hints {
    read_only: true,
    destructive: false,
    idempotent: true,
};
const ADDS: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: false,
};
const SETTLES: Hints = Hints {
    read_only: false,
    destructive: false,
    idempotent: true,
};
const DESTROYS: Hints = Hints {
    read_only: false,
    destructive: true,
    idempotent: false,
};
const DESTROYS_ONCE: Hints = Hints {
    read_only: false,
    destructive: true,
    idempotent: true,
};

/// Every write operation of the API and its hints. Money movements and what cannot be undone
/// are destructive; an operation that, sent again, finds its work done (a second confirm or
/// cancel only answers 409) is idempotent.
pub const WRITES: &[(&str, Hints)] = &[
    ("createApiKey", ADDS),
    // The old key stops working after the grace period: not undoable.
    ("rotateApiKey", DESTROYS),
    ("revokeApiKey", DESTROYS_ONCE),
    ("createEmployee", ADDS),
    // Upserts by email: the same rows again leave the same employees.
    ("importEmployees", SETTLES),
    ("updateEmployee", SETTLES),
    ("deactivateEmployee", DESTROYS_ONCE),
    ("createPayrollRun", ADDS),
    ("confirmPayrollRun", SETTLES),
    ("checkPayrollRunBalance", SETTLES),
    ("executePayrollRun", DESTROYS),
    ("syncPayrollRun", SETTLES),
    ("cancelPayrollRun", DESTROYS_ONCE),
    ("retryFailedPayouts", DESTROYS),
    ("archivePayrollRun", SETTLES),
    ("retryPayout", DESTROYS),
    ("cancelPayout", DESTROYS_ONCE),
    ("resolvePayout", DESTROYS),
    ("createTreasuryTransfer", DESTROYS),
    ("createWebhook", ADDS),
    ("deleteWebhook", DESTROYS_ONCE),
    ("enableWebhook", SETTLES),
    // The old secret stops signing after the grace period: not undoable.
    ("rotateWebhookSecret", DESTROYS),
    ("testWebhook", ADDS),
    ("retryWebhookDelivery", ADDS),
    ("createAgentSession", ADDS),
    ("revokeAgentSession", DESTROYS_ONCE),
    // Approving carries the money-moving operation out: destructive; deciding again only
    // answers 409.
    ("approveApproval", DESTROYS_ONCE),
    ("rejectApproval", DESTROYS_ONCE),
    // Lifting a wallet hold lets payouts go to a new wallet: not undoable.
    ("approveEmployeeWallet", DESTROYS_ONCE),
];

/// The hints of an operation: every GET reads; a write not in the table gets MCP's cautious
/// defaults (destructive, not idempotent).
pub fn hints(operation_id: &str, method: &str) -> Hints {
    if method.eq_ignore_ascii_case("get") {
        return READ;
    }
    WRITES
        .iter()
        .find(|(id, _)| *id == operation_id)
        .map(|(_, hints)| *hints)
        .unwrap_or(DESTROYS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gets_read_and_money_movements_are_destructive() {
        assert_eq!(hints("listPayrollRuns", "get"), READ);
        for id in [
            "executePayrollRun",
            "retryFailedPayouts",
            "retryPayout",
            "resolvePayout",
            "createTreasuryTransfer",
            "cancelPayrollRun",
            "cancelPayout",
            "deleteWebhook",
            "deactivateEmployee",
            "revokeApiKey",
        ] {
            assert!(hints(id, "post").destructive, "{id}");
        }
        for id in [
            "syncPayrollRun",
            "archivePayrollRun",
            "checkPayrollRunBalance",
        ] {
            let h = hints(id, "post");
            assert!(h.idempotent && !h.destructive && !h.read_only, "{id}");
        }
        assert_eq!(hints("someNewWrite", "post"), DESTROYS);
    }
}
