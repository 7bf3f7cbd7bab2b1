//! Statuses and other closed sets of values, stored as strings and sent with the same spelling.

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// Declares a string enum that is a SeaORM active enum, a serde enum and an OpenAPI schema at
/// once, so its database, wire and document spellings can never drift apart.
macro_rules! string_enum {
    ($(#[doc = $doc:literal])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
        #[sea_orm(rs_type = "String", db_type = "String(StringLen::N(32))")]
        pub enum $name {
            $(
                #[sea_orm(string_value = $text)]
                #[serde(rename = $text)]
                $variant,
            )+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The variant spelled `text` exactly, as on the wire.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// Every spelling, for error messages that list the valid values.
            pub fn spellings() -> String {
                [$($text),+].join(", ")
            }
        }

        // Written out rather than derived: the derive does not see the `serde(rename)` of a
        // macro's literal and would document the Rust spellings instead of the wire's.
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                let docs: &[&str] = &[$($doc),*];
                let description = docs.iter().map(|d| d.trim()).collect::<Vec<_>>().join(" ");
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .description((!description.is_empty()).then_some(description))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// Whether an employee is paid by regular runs.
    EmployeeStatus { Active = "ACTIVE", Inactive = "INACTIVE" }
);

string_enum!(EmploymentType {
    Fte = "FTE",
    Contractor = "CONTRACTOR",
    Consultant = "CONSULTANT",
});

string_enum!(
    /// The blockchain a payee is paid on.
    Network {
        Ethereum = "ETHEREUM",
        Polygon = "POLYGON",
        Base = "BASE",
        Arbitrum = "ARBITRUM",
        Optimism = "OPTIMISM",
        Solana = "SOLANA",
    }
);

impl Network {
    /// EVM networks share the `0x` + 40 hex address form.
    pub fn is_evm(self) -> bool {
        !matches!(self, Network::Solana)
    }
}

string_enum!(Stablecoin { Usdc = "USDC" });

string_enum!(
    /// Payroll run lifecycle (CONTRACT §6).
    RunStatus {
        Draft = "DRAFT",
        Confirmed = "CONFIRMED",
        Deposited = "DEPOSITED",
        PayingOut = "PAYING_OUT",
        Completed = "COMPLETED",
        Failed = "FAILED",
        Cancelled = "CANCELLED",
    }
);

string_enum!(RunType {
    Regular = "regular",
    AdHoc = "ad_hoc",
    Reimbursement = "reimbursement",
});

string_enum!(
    /// Payout lifecycle (CONTRACT §6).
    PayoutStatus {
        Pending = "PENDING",
        Processing = "PROCESSING",
        Completed = "COMPLETED",
        Failed = "FAILED",
        Cancelled = "CANCELLED",
    }
);

impl PayoutStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            PayoutStatus::Completed | PayoutStatus::Failed | PayoutStatus::Cancelled
        )
    }
}

string_enum!(
    /// Who did an audited action.
    ActorType { ApiKey = "API_KEY", AgentSession = "AGENT_SESSION", System = "SYSTEM", Admin = "ADMIN" }
);

string_enum!(
    /// An idempotency record is claimed while its request runs and completed with its answer.
    IdempotencyState { InFlight = "IN_FLIGHT", Completed = "COMPLETED" }
);

string_enum!(
    /// What an outbox email is: a payout notification, or a notice that a wallet changed.
    EmailKind { Payout = "PAYOUT", WalletChanged = "WALLET_CHANGED" }
);

string_enum!(
    /// An approval's life (CONTRACT §16): PENDING until decided or expired; APPROVED once carried
    /// out (or while being carried out, with no result yet), FAILED when the operation was refused.
    ApprovalStatus {
        Pending = "PENDING",
        Approved = "APPROVED",
        Rejected = "REJECTED",
        Expired = "EXPIRED",
        Failed = "FAILED",
    }
);

string_enum!(
    /// What a key's owner sees; derived from revocation and expiry, never stored.
    ApiKeyStatus { Active = "ACTIVE", Expired = "EXPIRED", Revoked = "REVOKED" }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(*s));
        }
        assert_eq!(RunType::parse("ad_hoc"), Some(RunType::AdHoc));
        assert_eq!(RunType::parse("AD_HOC"), None);
        assert_eq!(
            serde_json::to_string(&RunStatus::PayingOut).ok().as_deref(),
            Some("\"PAYING_OUT\"")
        );
    }
}

string_enum!(
    /// An execution job: PROCESSING until every payout it covers is terminal.
    JobStatus { Processing = "PROCESSING", Completed = "COMPLETED", Failed = "FAILED" }
);

string_enum!(
    /// A notification email in the outbox.
    EmailStatus { Pending = "PENDING", Sent = "SENT", Failed = "FAILED" }
);

string_enum!(TransferDirection {
    ToExchange = "to_exchange",
    ToTreasury = "to_treasury",
});

string_enum!(TransferStatus {
    Pending = "PENDING",
    Completed = "COMPLETED",
    Failed = "FAILED",
});

string_enum!(
    /// A withdrawal as the sandbox exchange keeps it.
    SandboxWithdrawalStatus { Pending = "PENDING", Completed = "COMPLETED", Failed = "FAILED" }
);

string_enum!(
    /// The sandbox's two balances.
    SandboxAccount { Exchange = "exchange", Treasury = "treasury" }
);

string_enum!(
    /// A webhook endpoint: DISABLED after its last retry failed, a 410 answer, or by hand.
    WebhookStatus { Active = "ACTIVE", Disabled = "DISABLED" }
);

string_enum!(
    /// One event's delivery to one endpoint.
    DeliveryStatus { Pending = "PENDING", Succeeded = "SUCCEEDED", Failed = "FAILED" }
);
