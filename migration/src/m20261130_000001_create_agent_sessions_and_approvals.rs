use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Agent sessions (a key's delegated, time-boxed authority), approvals (a money-moving request
/// waiting for a human), and the session an audit entry was made under (CONTRACT §16).
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(AgentSessions::Table)
                    .col(string_len(AgentSessions::Id, 40).primary_key())
                    .col(text(AgentSessions::Description))
                    .col(text(AgentSessions::Scopes))
                    .col(string_len(AgentSessions::Prefix, 16))
                    .col(string_len_uniq(AgentSessions::TokenHash, 64))
                    .col(string_len(AgentSessions::CreatedByKeyId, 40))
                    .col(string_len(AgentSessions::LineageId, 40))
                    .col(timestamp_with_time_zone(AgentSessions::ExpiresAt))
                    .col(timestamp_with_time_zone_null(AgentSessions::RevokedAt))
                    .col(timestamp_with_time_zone_null(AgentSessions::LastUsedAt))
                    .col(timestamp_with_time_zone(AgentSessions::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_agent_sessions_lineage")
                    .table(AgentSessions::Table)
                    .col(AgentSessions::LineageId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Approvals::Table)
                    .col(string_len(Approvals::Id, 40).primary_key())
                    .col(string_len(Approvals::Status, 16))
                    .col(string_len(Approvals::Operation, 64))
                    .col(string_len(Approvals::Method, 8))
                    .col(text(Approvals::Path))
                    .col(text(Approvals::Body))
                    .col(string_len_null(Approvals::ResourceId, 40))
                    .col(string_len(Approvals::RequesterActorType, 16))
                    .col(string_len(Approvals::RequesterKeyId, 40))
                    .col(string_len(Approvals::RequesterLineageId, 40))
                    .col(string_len_null(Approvals::RequesterSessionId, 40))
                    .col(text(Approvals::RequesterScopes))
                    .col(string_len(Approvals::OperationIdempotencyKey, 36))
                    .col(text_null(Approvals::Reason))
                    .col(string_len_null(Approvals::DecidedByKeyId, 40))
                    .col(timestamp_with_time_zone_null(Approvals::DecidedAt))
                    .col(integer_null(Approvals::ResultStatus))
                    .col(text_null(Approvals::ResultBody))
                    .col(timestamp_with_time_zone(Approvals::ExpiresAt))
                    .col(timestamp_with_time_zone(Approvals::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_approvals_status_expires")
                    .table(Approvals::Table)
                    .col(Approvals::Status)
                    .col(Approvals::ExpiresAt)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(AuditEntries::Table)
                    .add_column(string_len_null(AuditEntries::AgentSessionId, 40))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_audit_entries_agent_session")
                    .table(AuditEntries::Table)
                    .col(AuditEntries::AgentSessionId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_audit_entries_agent_session")
                    .table(AuditEntries::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(AuditEntries::Table)
                    .drop_column(AuditEntries::AgentSessionId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(Approvals::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(AgentSessions::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum AgentSessions {
    Table,
    Id,
    Description,
    Scopes,
    Prefix,
    TokenHash,
    CreatedByKeyId,
    LineageId,
    ExpiresAt,
    RevokedAt,
    LastUsedAt,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Approvals {
    Table,
    Id,
    Status,
    Operation,
    Method,
    Path,
    Body,
    ResourceId,
    RequesterActorType,
    RequesterKeyId,
    RequesterLineageId,
    RequesterSessionId,
    RequesterScopes,
    OperationIdempotencyKey,
    Reason,
    DecidedByKeyId,
    DecidedAt,
    ResultStatus,
    ResultBody,
    ExpiresAt,
    CreatedAt,
}

#[derive(DeriveIden)]
enum AuditEntries {
    Table,
    AgentSessionId,
}
