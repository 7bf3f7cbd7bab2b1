//! Which instance works a run: the holder of its lease row until `expires_at`.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "run_leases")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub run_id: String,
    /// The instance id of the holder.
    pub owner: String,
    pub acquired_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// A subquery of the runs whose lease `owner` holds at `at`.
pub fn runs_held_by(owner: &str, at: DateTime<Utc>) -> sea_orm::sea_query::SelectStatement {
    use sea_orm::sea_query::{ExprTrait as _, Query};
    Query::select()
        .column(Column::RunId)
        .from(Entity)
        .and_where(Expr::col(Column::Owner).eq(owner))
        .and_where(Expr::col(Column::ExpiresAt).gt(at))
        .to_owned()
}
