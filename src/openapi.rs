//! The OpenAPI 3.1 document. Operations and schemas are derived from the handlers' types with
//! `utoipa`; the route table then adds what it owns: required scopes (`x-required-scopes`),
//! the `Idempotency-Key` header of every write, the response envelope, the error responses
//! and the `/runs` aliases.

use std::sync::OnceLock;

use serde_json::{Map, Value, json};
use utoipa::OpenApi;

use crate::{
    http::{error::ErrorCode, route::RouteSpec},
    routes::{
        ROUTES, agent_sessions, api_keys, approvals, audit_log, docs, employees, events, jobs,
        payouts, runs, treasury, webhooks,
    },
};
use payroll_actors::views::API_VERSION;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Payroll disbursement API",
        description = "Payroll runs paid out in USDC through an exchange account. Every write takes an Idempotency-Key (UUID v4); every call but this document and /docs takes Authorization: Bearer <API key>.",
    ),
    paths(
        docs::openapi_document,
        docs::docs_page,
        api_keys::list,
        api_keys::create,
        api_keys::get,
        api_keys::current,
        api_keys::rotate,
        api_keys::revoke,
        employees::list,
        employees::create,
        employees::bulk_import::import,
        employees::get,
        employees::update,
        employees::deactivate,
        employees::approve_wallet,
        runs::list,
        runs::create,
        runs::get,
        runs::payouts,
        runs::confirm,
        runs::balance_check,
        runs::execute,
        runs::sync,
        runs::retry_failed,
        runs::cancel,
        runs::archive,
        payouts::get,
        payouts::retry,
        payouts::cancel,
        payouts::resolve,
        jobs::get,
        treasury::balance,
        treasury::create_transfer,
        treasury::list_transfers,
        webhooks::create,
        webhooks::list,
        webhooks::get,
        webhooks::delete,
        webhooks::enable,
        webhooks::rotate_secret,
        webhooks::test,
        webhooks::deliveries,
        webhooks::retry_delivery,
        events::list,
        audit_log::list,
        agent_sessions::create,
        agent_sessions::list,
        agent_sessions::get,
        agent_sessions::revoke,
        approvals::list,
        approvals::get,
        approvals::approve,
        approvals::reject,
    ),
    components(schemas(
        crate::http::envelope::Pagination,
        payroll_entities::WebhookStatus,
        payroll_entities::DeliveryStatus
    ))
)]
struct ApiDoc;

/// The document as JSON text, built once.
pub fn document_json() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| document().to_string())
}

/// The document as a JSON value.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    doc["openapi"] = json!("3.1.0");
    doc["info"]["version"] = json!(API_VERSION);
    doc["servers"] = json!([{"url": "/api/v1"}]);
    let components = doc["components"]
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    let mut components = Value::Object(components);
    components["securitySchemes"] = json!({
        "bearer": {"type": "http", "scheme": "bearer", "description": "An API key: mpk_live_…"}
    });
    components["schemas"]["Error"] = error_schema();
    components["parameters"]["IdempotencyKey"] = json!({
        "name": "Idempotency-Key", "in": "header", "required": true,
        "description": "A UUID v4 for this write; send the same key to retry it safely.",
        "schema": {"type": "string", "format": "uuid", "pattern": crate::http::idempotency::KEY_PATTERN}
    });
    request_constraints(&mut components["schemas"]);
    doc["components"] = components;

    let mut paths = doc["paths"]
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    for spec in ROUTES {
        let method = spec.method.as_str().to_ascii_lowercase();
        let Some(op) = paths
            .get_mut(spec.path)
            .and_then(|item| item.get_mut(&method))
        else {
            continue;
        };
        decorate(op, spec);
    }
    // The /runs aliases: the same operations under `…ViaRunsAlias` operationIds, tagged
    // `aliases`; idempotency and audit use the canonical operationId (`x-alias-of`).
    let aliases: Vec<(String, Value)> = paths
        .iter()
        .filter_map(|(path, item)| {
            let alias = path
                .strip_prefix("/payroll-runs")
                .map(|rest| format!("/runs{rest}"))?;
            let mut item = item.clone();
            if let Some(ops) = item.as_object_mut() {
                for op in ops.values_mut() {
                    if let Some(op) = op.as_object_mut()
                        && let Some(Value::String(id)) = op.remove("operationId")
                    {
                        op.insert("operationId".into(), json!(format!("{id}ViaRunsAlias")));
                        op.insert("x-alias-of".into(), json!(id));
                        op.insert("tags".into(), json!(["aliases"]));
                    }
                }
            }
            Some((alias, item))
        })
        .collect();
    paths.extend(aliases);
    doc["paths"] = Value::Object(paths);
    optional_empty_bodies(&mut doc);
    doc
}

/// An empty body counts as `{}` (CONTRACT §1): a body whose schema requires no field may be
/// left out, and the document says so.
fn optional_empty_bodies(doc: &mut Value) {
    let schemas = doc["components"]["schemas"].clone();
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for op in paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
    {
        let Some(schema) = op.pointer("/requestBody/content/application~1json/schema") else {
            continue;
        };
        let resolved = schema["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
            .map_or(schema, |name| &schemas[name]);
        let requires_fields = resolved["required"]
            .as_array()
            .is_some_and(|r| !r.is_empty());
        if resolved["type"] == "object" && !requires_fields {
            op["requestBody"]["required"] = json!(false);
        }
    }
}

fn error_schema() -> Value {
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    json!({
        "type": "object",
        "required": ["error", "api_version", "request_id"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "details", "recovery_hint", "docs_url"],
                "properties": {
                    "code": {"type": "string", "enum": codes},
                    "message": {"type": "string"},
                    "details": {"type": "object", "description": "Context; validation errors list every invalid field as {field, message}."},
                    "recovery_hint": {"type": "string", "description": "What to do next, in one sentence."},
                    "docs_url": {"type": "string"}
                }
            },
            "api_version": {"type": "string"},
            "request_id": {"type": "string"}
        }
    })
}

/// A date-time or a plain date, as `http::dates::DateInput` reads them (CONTRACT §1).
fn date_input(nullable: bool) -> Value {
    json!({
        "type": if nullable { json!(["string", "null"]) } else { json!("string") },
        "anyOf": [
            {"format": "date-time"},
            {"format": "date"},
            {"pattern": crate::http::dates::LOCAL_DATE_TIME_PATTERN}
        ],
        // Typed, so that null (where allowed) is not refused by the `not`.
        "not": {"type": "string", "pattern": "^0000-"},
        "description": "An ISO 8601 date-time (2026-03-01T00:00:00Z; without an offset it is UTC) or a plain date (2026-03-01), of a year from 0001 to 9999, also in UTC (an offset may not carry it past them)."
    })
}

/// The query parameters' schemas, as the handlers read them (`http::query::Query`): paging
/// bounds, dates, and the closed sets of `sort` and `format`.
fn query_schemas(op: &mut Value) {
    let lists_runs = op["operationId"] == "listPayrollRuns";
    let Some(Value::Array(params)) = op.get_mut("parameters") else {
        return;
    };
    for param in params.iter_mut() {
        if param["in"] != "query" {
            continue;
        }
        let schema = match param["name"].as_str() {
            Some("limit") => {
                json!({"type": "integer", "minimum": 1, "maximum": 200, "default": 25})
            }
            Some("offset") => {
                json!({"type": "integer", "minimum": 0, "maximum": i64::MAX, "default": 0})
            }
            Some("created_after" | "created_before" | "after" | "before") => date_input(false),
            Some("sort") => json!({"type": "string", "enum": runs::RUN_SORTS}),
            Some("format") => json!({"type": "string", "enum": runs::PAYOUT_FORMATS}),
            Some("type" | "event_type") if !lists_runs => {
                json!({"type": "string", "enum": events::filter_kinds()})
            }
            _ => continue,
        };
        param["schema"] = schema;
    }
}

/// Merges `extra` into one property of a component schema.
fn constrain(schemas: &mut Value, schema: &str, property: &str, extra: Value) {
    let Some(target) = schemas
        .get_mut(schema)
        .and_then(|s| s.get_mut("properties"))
        .and_then(|p| p.get_mut(property))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if let Value::Object(extra) = extra {
        if extra.contains_key("anyOf") {
            // A date input: its formats are the alternatives, not the one the derive wrote.
            target.remove("format");
        }
        target.extend(extra);
    }
}

/// Free text of at most `max` characters, none of them refused (CONTRACT §1).
fn free_text(max: usize) -> Value {
    json!({"maxLength": max, "pattern": crate::http::body::TEXT_PATTERN})
}

/// What the request validators enforce beyond the types, stated in the request schemas from
/// the constants the validators use. What JSON Schema cannot state (an EIP-55 checksum, a
/// Solana key's length in bytes, one date after another, a time in the future, an address
/// that resolves to a public host) is said in the field's description.
fn request_constraints(schemas: &mut Value) {
    use crate::routes::{api_keys::NAME_MAX, employees::input as employee};
    let name =
        json!({"minLength": 1, "maxLength": employee::NAME_MAX, "pattern": employee::NAME_PATTERN});
    let email = json!({"maxLength": employee::EMAIL_MAX, "pattern": employee::EMAIL_PATTERN});
    // Either shape; which one is the network's (below, for a full employee).
    let wallet = json!({"pattern": format!("{}|{}", crate::wallet::EVM_PATTERN, crate::wallet::SOLANA_PATTERN)});
    for schema in ["EmployeeInput", "EmployeeUpdate"] {
        constrain(schemas, schema, "name", name.clone());
        constrain(schemas, schema, "email", email.clone());
        constrain(schemas, schema, "wallet_address", wallet.clone());
    }
    // The address's shape follows the network: Solana's base58, or an EVM 0x address that is
    // not the zero address (whatever burns what is sent to it).
    let evm: Vec<&str> = payroll_entities::Network::ALL
        .iter()
        .filter(|n| n.is_evm())
        .map(|n| n.as_str())
        .collect();
    if let Some(employee) = schemas.get_mut("EmployeeInput") {
        employee["if"] = json!({"properties": {"network": {"enum": evm}}, "required": ["network"]});
        employee["then"] = json!({"properties": {"wallet_address": {
            "pattern": crate::wallet::EVM_PATTERN, "not": {"pattern": crate::wallet::ZERO_PATTERN}}}});
        employee["else"] =
            json!({"properties": {"wallet_address": {"pattern": crate::wallet::SOLANA_PATTERN}}});
    }
    // A patch naming both a network and a wallet is judged by itself (400); a wallet alone
    // meets the stored network (409 when they do not fit). The zero address fits none.
    constrain(
        schemas,
        "EmployeeUpdate",
        "wallet_address",
        json!({"not": {"type": "string", "pattern": crate::wallet::ZERO_PATTERN}}),
    );
    if let Some(update) = schemas.get_mut("EmployeeUpdate") {
        update["allOf"] = json!([
            {"if": {"properties": {"network": {"enum": evm}}, "required": ["network"]},
             "then": {"properties": {"wallet_address": {"pattern": crate::wallet::EVM_PATTERN}}}},
            {"if": {"properties": {"network": {"const": "SOLANA"}}, "required": ["network"]},
             "then": {"properties": {"wallet_address": {"pattern": crate::wallet::SOLANA_PATTERN}}}}
        ]);
    }
    let mut scopes = crate::http::auth::all_scope_names();
    scopes.extend(
        crate::http::auth::Scope::WILDCARDS
            .iter()
            .map(|s| (*s).to_owned()),
    );
    constrain(
        schemas,
        "CreateApiKeyRequest",
        "name",
        json!({"minLength": 1, "maxLength": NAME_MAX, "pattern": employee::NAME_PATTERN}),
    );
    constrain(
        schemas,
        "CreateApiKeyRequest",
        "scopes",
        json!({"minItems": 1, "items": {"type": "string", "enum": scopes}}),
    );
    constrain(
        schemas,
        "CreateApiKeyRequest",
        "expires_at",
        date_input(true),
    );
    constrain(
        schemas,
        "CreateAgentSessionRequest",
        "scopes",
        json!({"minItems": 1, "items": {"type": "string", "enum": crate::routes::agent_sessions::delegable_scopes()}}),
    );
    constrain(
        schemas,
        "CreateAgentSessionRequest",
        "description",
        json!({"minLength": 1, "maxLength": crate::routes::agent_sessions::DESCRIPTION_MAX, "pattern": employee::NAME_PATTERN}),
    );
    constrain(
        schemas,
        "CreateAgentSessionRequest",
        "expires_at",
        date_input(true),
    );
    constrain(
        schemas,
        "RejectRequest",
        "reason",
        json!({"minLength": 1, "maxLength": crate::routes::approvals::REASON_MAX, "pattern": employee::NAME_PATTERN}),
    );
    for field in ["period_start", "period_end"] {
        constrain(schemas, "CreateRunRequest", field, date_input(false));
    }
    constrain(schemas, "CreateRunRequest", "pay_date", date_input(true));
    constrain(
        schemas,
        "CreateRunRequest",
        "label",
        free_text(runs::create::LABEL_MAX),
    );
    constrain(
        schemas,
        "CreateRunRequest",
        "note",
        free_text(runs::create::NOTE_MAX),
    );
    constrain(
        schemas,
        "CreateRunRequest",
        "employee_ids",
        json!({"minItems": 1, "uniqueItems": true}),
    );
    constrain(schemas, "CreateRunRequest", "items", json!({"minItems": 1}));
    constrain(
        schemas,
        "RunItem",
        "note",
        free_text(runs::create::ITEM_NOTE_MAX),
    );
    // Regular runs take employee_ids and no items; the others take items and no employee_ids.
    if let Some(run) = schemas.get_mut("CreateRunRequest") {
        run["if"] = json!({"properties": {"type": {"enum": ["ad_hoc", "reimbursement"]}}, "required": ["type"]});
        run["then"] = json!({"required": ["items"], "properties": {"employee_ids": {"type": "null"}, "items": {"type": "array"}}});
        run["else"] = json!({"properties": {"items": {"type": "null"}}});
    }
    constrain(
        schemas,
        "CreateTransferRequest",
        "note",
        free_text(treasury::NOTE_MAX),
    );
    constrain(
        schemas,
        "CreateWebhookRequest",
        "events",
        json!({"minItems": 1, "maxItems": webhooks::MAX_EVENTS,
               "items": {"type": "string", "enum": payroll_actors::webhook::subscriptions::all_patterns()}}),
    );
    constrain(
        schemas,
        "CreateWebhookRequest",
        "description",
        free_text(webhooks::DESCRIPTION_MAX),
    );
    constrain(
        schemas,
        "CreateWebhookRequest",
        "url",
        json!({"pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[^\\s]+$"}),
    );
    constrain(
        schemas,
        "ResolvePayoutRequest",
        "on_chain_tx_hash",
        json!({"pattern": "^\\s*(0x[0-9a-fA-F]{64}|[1-9A-HJ-NP-Za-km-z]{64,90})\\s*$"}),
    );
    constrain(schemas, "ResolvePayoutRequest", "note", free_text(1000));
    constrain(schemas, "CancelRunRequest", "reason", free_text(1000));
    // A transaction hash only with outcome completed.
    if let Some(resolve) = schemas.get_mut("ResolvePayoutRequest") {
        resolve["if"] =
            json!({"properties": {"outcome": {"const": "failed"}}, "required": ["outcome"]});
        resolve["then"] = json!({"properties": {"on_chain_tx_hash": {"type": "null"}}});
    }
}

/// Adds what the route table knows to one operation.
fn decorate(op: &mut Value, spec: &RouteSpec) {
    query_schemas(op);
    if spec.operation == "importEmployees"
        && let Some(rows) = op.pointer_mut("/requestBody/content/application~1json/schema")
    {
        rows["minItems"] = json!(1);
    }
    optional_body(op);
    let scopes = spec.scope_names();
    if matches!(spec.access, crate::http::route::Access::AnyKey) {
        op["security"] = json!([{"bearer": []}]);
        let text = "Any valid key, whatever its scopes.";
        op["description"] = json!(match op.get("description").and_then(Value::as_str) {
            Some(d) if !d.is_empty() => format!("{d}\n\n{text}"),
            _ => text.to_owned(),
        });
    } else if scopes.is_empty() {
        op["security"] = json!([]);
    } else {
        op["security"] = json!([{"bearer": []}]);
        op["x-required-scopes"] = json!(scopes);
        let prefix = if scopes.len() > 1 {
            "Requires one of the scopes"
        } else {
            "Requires the scope"
        };
        let mut text = format!("{prefix} {}.", scopes.join(", "));
        if crate::http::route::SELF_SERVICE.contains(&spec.operation) {
            text.push_str(
                " A key may always call it on itself (`key_id` its own id), whatever its scopes.",
            );
        }
        op["description"] = json!(match op.get("description").and_then(Value::as_str) {
            Some(d) if !d.is_empty() => format!("{d}\n\n{text}"),
            _ => text,
        });
    }
    if spec.is_write() {
        let params = op
            .as_object_mut()
            .map(|o| o.entry("parameters").or_insert_with(|| json!([])));
        if let Some(Value::Array(params)) = params {
            params.push(json!({"$ref": "#/components/parameters/IdempotencyKey"}));
        }
    }
    let mut responses = op["responses"]
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    if crate::http::approvals::MONEY_MOVING.contains(&spec.operation) {
        responses.insert(
            "202".into(),
            json!({
                "description": "Held for approval (CONTRACT §16): called by an agent session, or by any key while approvals.required, the operation does nothing now; the PENDING approval is answered, and a human key with payroll:approve of another lineage approves (it is carried out then) or rejects it",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ApprovalResource"}}}
            }),
        );
    }
    for (status, response) in responses.iter_mut() {
        if status.starts_with('2') {
            wrap_in_envelope(response);
        }
    }
    for (status, when) in error_statuses(spec) {
        responses.entry(status.to_string()).or_insert_with(|| {
            json!({
                "description": when,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            })
        });
    }
    op["responses"] = Value::Object(responses);
}

/// A body the derive wrote as `oneOf [null, X]` is documented as `X`: the server refuses a JSON
/// `null`; that the body may be left out is said by [`optional_empty_bodies`].
fn optional_body(op: &mut Value) {
    let Some(schema) = op.pointer_mut("/requestBody/content/application~1json/schema") else {
        return;
    };
    let inner = schema
        .get("oneOf")
        .and_then(Value::as_array)
        .and_then(|variants| {
            let mut rest = variants.iter().filter(|v| v["type"] != "null");
            match (variants.len(), rest.next(), rest.next()) {
                (2, Some(only), None) => Some(only.clone()),
                _ => None,
            }
        });
    if let Some(inner) = inner {
        *schema = inner;
    }
}

/// Puts a JSON success schema inside `{data, api_version, request_id}` (and `pagination` for
/// lists).
fn wrap_in_envelope(response: &mut Value) {
    let Some(schema) = response.pointer_mut("/content/application~1json/schema") else {
        return;
    };
    let inner = std::mem::take(schema);
    let is_list = inner.get("type").and_then(Value::as_str) == Some("array");
    let mut properties = Map::new();
    properties.insert("data".into(), inner);
    if is_list {
        properties.insert(
            "pagination".into(),
            json!({"$ref": "#/components/schemas/Pagination"}),
        );
    }
    properties.insert(
        "api_version".into(),
        json!({"type": "string", "example": API_VERSION}),
    );
    properties.insert("request_id".into(), json!({"type": "string"}));
    let mut required = vec!["data", "api_version", "request_id"];
    if is_list {
        required.push("pagination");
    }
    *schema = json!({"type": "object", "required": required, "properties": properties});
}

fn error_statuses(spec: &RouteSpec) -> Vec<(u16, &'static str)> {
    let mut out = vec![(
        400,
        "Invalid request (INVALID_REQUEST_BODY, INVALID_QUERY_PARAMETER, UNSUPPORTED_API_VERSION…)",
    )];
    if spec.access != crate::http::route::Access::Public {
        out.push((401, "Missing, unknown, revoked or expired API key"));
        out.push((403, "The key lacks the required scope (INSUFFICIENT_SCOPE)"));
        out.push(if spec.body == crate::http::route::BodyKind::Import {
            (
                429,
                "Rate limited, or another import running (RATE_LIMITED, reason import_in_progress); see Retry-After",
            )
        } else {
            (429, "Rate limited (RATE_LIMITED); see Retry-After")
        });
    }
    if spec.path.contains('{') {
        out.push((404, "No such resource (RESOURCE_NOT_FOUND)"));
    }
    if spec.is_write() {
        out.push((
            409,
            "Conflict: status transition, overlap, email taken, idempotency key in use…",
        ));
        if spec.body != crate::http::route::BodyKind::None {
            out.push((
                408,
                "The body did not arrive within api.body_read_timeout_ms (REQUEST_TIMEOUT)",
            ));
        }
        out.push((413, "Body too large (PAYLOAD_TOO_LARGE)"));
        out.push((415, "Body is not JSON (UNSUPPORTED_MEDIA_TYPE)"));
        out.push((
            422,
            "Idempotency-Key reused for a different request (IDEMPOTENCY_KEY_REUSED)",
        ));
    }
    out.push((500, "Unexpected server error (INTERNAL_ERROR)"));
    out.push((
        503,
        "Database unreachable or failing, shutting down or overloaded (SERVICE_UNAVAILABLE); see Retry-After",
    ));
    out
}
