//! An employee as clients send and see it: the resource, create and update bodies, and their
//! validation.

use chrono::{DateTime, NaiveDate, Utc};
use payroll_actors::views::Timestamp;
use payroll_entities::{
    EmployeeStatus, EmploymentType, MAX_MONEY_CENTS, Network, Stablecoin, employee, ids,
};

use serde::{Deserialize, Deserializer, Serialize};

use utoipa::ToSchema;

use crate::{
    http::{
        body::money_over_limit,
        dates::Day,
        error::{ApiError, ErrorCode, FieldError},
    },
    wallet,
};

/// An employee as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EmployeeResource {
    pub id: String,
    pub name: String,
    pub email: String,
    pub status: EmployeeStatus,
    pub employment_type: EmploymentType,
    pub salary_usd_cents: i64,
    pub stablecoin: Stablecoin,
    pub network: Network,
    pub wallet_address: String,
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_start_date: Option<NaiveDate>,
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_end_date: Option<NaiveDate>,
    /// When the wallet or network last changed (CONTRACT §16).
    pub wallet_changed_at: Option<Timestamp>,
    /// Until when this employee's payouts are held from confirm after that change; null when
    /// no hold applies (none, ended, or lifted).
    pub wallet_hold_until: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&employee::Model> for EmployeeResource {
    fn from(m: &employee::Model) -> EmployeeResource {
        EmployeeResource {
            id: m.id.clone(),
            name: m.name.clone(),
            email: m.email.clone(),
            status: m.status,
            employment_type: m.employment_type,
            salary_usd_cents: m.salary_usd_cents,
            stablecoin: m.stablecoin,
            network: m.network,
            wallet_address: m.wallet_address.clone(),
            contract_start_date: m.contract_start_date,
            contract_end_date: m.contract_end_date,
            wallet_changed_at: m.wallet_changed_at.map(Timestamp::from),
            wallet_hold_until: m
                .wallet_hold_until
                .filter(|until| *until > payroll_entities::time::now())
                .map(Timestamp::from),
            created_at: m.created_at.into(),
            updated_at: m.updated_at.into(),
        }
    }
}

/// Deserializes a field that distinguishes "absent" (`None`) from `null` (`Some(None)`).
pub fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The fields of an employee a client sends: the body of create, and one row of an import.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmployeeInput {
    #[schema(value_type = String)]
    pub name: Option<String>,
    /// Unique, compared case-insensitively.
    #[schema(value_type = String)]
    pub email: Option<String>,
    /// ACTIVE (default) or INACTIVE.
    pub status: Option<EmployeeStatus>,
    /// FTE (default), CONTRACTOR or CONSULTANT.
    pub employment_type: Option<EmploymentType>,
    /// Paid per regular run, in USDC cents (0 to 100,000,000,000).
    #[schema(value_type = i64, minimum = 0, maximum = 100_000_000_000_i64)]
    pub salary_usd_cents: Option<i64>,
    /// USDC, the default and only value.
    pub stablecoin: Option<Stablecoin>,
    #[schema(value_type = Network)]
    pub network: Option<Network>,
    /// EVM: 0x + 40 hex (EIP-55 checksum if mixed-case); SOLANA: base58 of 32 bytes.
    #[schema(value_type = String)]
    pub wallet_address: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_start_date: Option<Option<Day>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_end_date: Option<Option<Day>>,
}

/// The body of PATCH: any field but `id`, `email` and the timestamps.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmployeeUpdate {
    pub name: Option<String>,
    pub status: Option<EmployeeStatus>,
    pub employment_type: Option<EmploymentType>,
    /// USDC cents, 0 to 100,000,000,000.
    #[schema(minimum = 0, maximum = 100_000_000_000_i64)]
    pub salary_usd_cents: Option<i64>,
    pub stablecoin: Option<Stablecoin>,
    pub network: Option<Network>,
    pub wallet_address: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_start_date: Option<Option<Day>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_end_date: Option<Option<Day>>,
}

/// The answer of an import.
#[derive(Debug, Serialize, ToSchema)]
pub struct ImportResult {
    pub created: u64,
    pub updated: u64,
    pub total: u64,
}

/// Most characters in an employee's name.
pub const NAME_MAX: usize = 200;
/// A name: something besides white space, and no control character, bidi control or line
/// separator (it goes into email headers, CSV and terminals; [`crate::http::body::TEXT_PATTERN`]).
pub const NAME_PATTERN: &str = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]*[^\s\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c][^\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]*$";
/// Most characters in an email address.
pub const EMAIL_MAX: usize = 254;
/// What [`is_plausible_email`] takes: a local part, `@`, a domain with a dot inside it, no
/// white space, control character, bidi control or line separator.
pub const EMAIL_PATTERN: &str = r"^\s*[^@\s\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]+@[^@\s.\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c][^@\s\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]*\.[^@\s\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]*[^@\s.\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]\s*$";

pub fn is_plausible_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !email.contains(char::is_whitespace)
        && !email.contains(crate::http::body::is_refused_in_text)
        && !domain.contains('@')
        && email.chars().count() <= EMAIL_MAX
}

/// A complete, valid set of employee fields.
#[derive(Debug, Clone)]
pub struct ValidEmployee {
    pub name: String,
    pub email: String,
    pub status: EmployeeStatus,
    pub employment_type: EmploymentType,
    pub salary_usd_cents: i64,
    pub stablecoin: Stablecoin,
    pub network: Network,
    pub wallet_address: String,
    pub contract_start_date: Option<NaiveDate>,
    pub contract_end_date: Option<NaiveDate>,
}

/// Checks a full set of fields; `prefix` is `rows[3].` for an import row.
pub fn validate(
    input: &EmployeeInput,
    prefix: &str,
    errors: &mut Vec<FieldError>,
) -> Option<ValidEmployee> {
    let before = errors.len();
    let field = |name: &str| format!("{prefix}{name}");
    let raw_name = input.name.as_deref().unwrap_or_default();
    let name = raw_name.trim();
    if name.is_empty() {
        errors.push(FieldError::new(
            field("name"),
            "required: the employee's name",
        ));
    } else if raw_name.chars().count() > NAME_MAX {
        errors.push(FieldError::new(
            field("name"),
            format!("at most {NAME_MAX} characters"),
        ));
    } else if let Some(problem) = crate::http::body::text_problem(raw_name) {
        // A name goes into the payee's email headers, CSV files and terminals: no line break
        // may smuggle a header in, no ESC drive a terminal, no bidi control hide what it says.
        errors.push(FieldError::new(field("name"), problem));
    }
    let raw_email = input.email.as_deref().unwrap_or_default();
    let email = raw_email.trim();
    if email.is_empty() {
        errors.push(FieldError::new(
            field("email"),
            "required: the employee's email address",
        ));
    } else if !is_plausible_email(email) || raw_email.chars().count() > EMAIL_MAX {
        errors.push(FieldError::new(field("email"), "not an email address"));
    }
    match input.salary_usd_cents {
        None => errors.push(FieldError::new(
            field("salary_usd_cents"),
            "required: the salary per regular run in USDC cents (0 or more)",
        )),
        Some(s) if s < 0 => errors.push(FieldError::new(
            field("salary_usd_cents"),
            "must be 0 or more",
        )),
        Some(s) if s > MAX_MONEY_CENTS => errors.push(money_over_limit(field("salary_usd_cents"))),
        Some(_) => {}
    }
    let wallet = input
        .wallet_address
        .as_deref()
        .map(str::trim)
        .unwrap_or_default();
    match (input.network, wallet.is_empty()) {
        (None, _) => errors.push(FieldError::new(
            field("network"),
            format!("required: one of {}", Network::spellings()),
        )),
        (Some(_), true) => errors.push(FieldError::new(field("wallet_address"), "required")),
        (Some(network), false) => {
            if let Err(why) = wallet::validate(network, wallet) {
                errors.push(FieldError::new(
                    field("wallet_address"),
                    format!("{why} (network {network})"),
                ));
            }
        }
    }
    let start = input.contract_start_date.flatten().map(|d| d.0);
    let end = input.contract_end_date.flatten().map(|d| d.0);
    if let (Some(s), Some(e)) = (start, end)
        && e < s
    {
        errors.push(FieldError::new(
            field("contract_end_date"),
            "must not be before contract_start_date",
        ));
    }
    if errors.len() > before {
        return None;
    }
    Some(ValidEmployee {
        name: name.to_owned(),
        email: email.to_owned(),
        status: input.status.unwrap_or(EmployeeStatus::Active),
        employment_type: input.employment_type.unwrap_or(EmploymentType::Fte),
        salary_usd_cents: input.salary_usd_cents.unwrap_or_default(),
        stablecoin: input.stablecoin.unwrap_or(Stablecoin::Usdc),
        network: input.network.unwrap_or(Network::Ethereum),
        wallet_address: wallet.to_owned(),
        contract_start_date: start,
        contract_end_date: end,
    })
}

pub fn new_model(valid: ValidEmployee, now: DateTime<Utc>) -> employee::Model {
    employee::Model {
        id: ids::new_id(ids::IdKind::Employee),
        email_lower: valid.email.to_lowercase(),
        name_lower: valid.name.to_lowercase(),
        name: valid.name,
        email: valid.email,
        status: valid.status,
        employment_type: valid.employment_type,
        salary_usd_cents: valid.salary_usd_cents,
        stablecoin: valid.stablecoin,
        network: valid.network,
        wallet_address: valid.wallet_address,
        contract_start_date: valid.contract_start_date,
        contract_end_date: valid.contract_end_date,
        test_deduction_balance_usd_cents: 0,
        wallet_changed_at: None,
        wallet_hold_until: None,
        wallet_changed_by_lineage_id: None,
        created_at: now,
        updated_at: now,
    }
}

pub fn email_taken(existing_id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::EmployeeEmailTaken,
        "Another employee already has this email address.",
    )
    .detail("existing_employee_id", existing_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_checked_loosely() {
        assert!(is_plausible_email("ada@example.com"));
        assert!(!is_plausible_email("ada@example"));
        assert!(!is_plausible_email("ada example@x.com"));
        assert!(!is_plausible_email("@x.com"));
    }

    #[test]
    fn validation_lists_every_missing_field() {
        let mut errors = Vec::new();
        assert!(validate(&EmployeeInput::default(), "rows[2].", &mut errors).is_none());
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "rows[2].name",
                "rows[2].email",
                "rows[2].salary_usd_cents",
                "rows[2].network"
            ]
        );
    }
}
