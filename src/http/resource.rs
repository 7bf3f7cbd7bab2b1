//! Finding one resource by its id, or a 404 that names it.

use crate::http::error::ApiError;

/// The resource `id` of entity `E`, or 404 naming `resource_type`. An id of another kind or
/// form never reaches the database. `for_update` row-locks it on PostgreSQL (SQLite writers
/// are serialised already), for reads inside a write transaction.
pub async fn find_resource<E, C>(
    conn: &C,
    kind: payroll_entities::ids::IdKind,
    resource_type: &str,
    id: &str,
    for_update: bool,
) -> Result<E::Model, ApiError>
where
    E: sea_orm::EntityTrait,
    C: sea_orm::ConnectionTrait,
    String: Into<<E::PrimaryKey as sea_orm::PrimaryKeyTrait>::ValueType>,
{
    use sea_orm::QuerySelect;
    let not_found = || ApiError::not_found(resource_type, id);
    if !payroll_entities::ids::is_well_formed(kind, id) {
        return Err(not_found());
    }
    let mut select = E::find_by_id(id.to_owned());
    if for_update && conn.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        select = select.lock_exclusive();
    }
    select.one(conn).await?.ok_or_else(not_found)
}
