//! Employees (payees).

use chrono::{DateTime, NaiveDate, Utc};
use sea_orm::entity::prelude::*;

use crate::{EmployeeStatus, EmploymentType, Network, Stablecoin};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "employees")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub name: String,
    /// Lower-cased name (Unicode rules), for case-insensitive search on every database.
    pub name_lower: String,
    pub email: String,
    /// Lower-cased email: uniqueness is case-insensitive.
    #[sea_orm(unique)]
    pub email_lower: String,
    pub status: EmployeeStatus,
    pub employment_type: EmploymentType,
    pub salary_usd_cents: i64,
    pub stablecoin: Stablecoin,
    pub network: Network,
    pub wallet_address: String,
    pub contract_start_date: Option<NaiveDate>,
    pub contract_end_date: Option<NaiveDate>,
    /// Completed test payouts not yet taken off a regular run (CONTRACT §9).
    pub test_deduction_balance_usd_cents: i64,
    /// When the wallet or network last changed (CONTRACT §16).
    pub wallet_changed_at: Option<DateTime<Utc>>,
    /// Until when the employee's payouts are held from confirm after that change.
    pub wallet_hold_until: Option<DateTime<Utc>>,
    /// The key lineage that made the change: another lineage may lift the hold.
    pub wallet_changed_by_lineage_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
