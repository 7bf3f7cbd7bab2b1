//! The tools: one per canonical operation of the OpenAPI document, derived from it at start.
//! A tool's arguments are the operation's path and query parameters and its JSON body's
//! fields side by side, plus `idempotency_key` on writes.
//!
//! Naming rule: parameters keep their names; a body field whose name a parameter (or
//! `idempotency_key`) already takes is the argument `body_<name>`. A JSON array body (the
//! employee import) is the argument `rows`.

use serde_json::{Map, Value, json};

use crate::{
    http::auth::{self, Scope},
    mcp::{
        hints::{Hints, hints},
        schema::{inline_refs, object_alternative, resolve},
    },
};

/// The argument that carries the Idempotency-Key header of a write.
pub const IDEMPOTENCY_ARG: &str = "idempotency_key";
/// The argument that carries a JSON array body.
pub const ROWS_ARG: &str = "rows";
/// The prefix of a body field's argument when a parameter has its name.
pub const BODY_PREFIX: &str = "body_";

/// Operations that are not API calls an agent makes: the document itself and the error page.
const NOT_TOOLS: &[&str] = &["/openapi.json", "/docs"];

/// One canonical operation of the document.
#[derive(Debug, Clone)]
pub struct Operation {
    pub operation_id: String,
    /// Lower case, as the document keys it.
    pub method: String,
    /// Under `/api/v1`, with `{name}` placeholders.
    pub path: String,
    pub spec: Value,
}

/// Every operation that gets a tool: those with an operationId, minus the `/runs` aliases
/// (`x-alias-of`, the tag `aliases` or an id ending `ViaRunsAlias`) and [`NOT_TOOLS`].
pub fn canonical_operations(document: &Value) -> Vec<Operation> {
    let mut out = Vec::new();
    let Some(paths) = document["paths"].as_object() else {
        return out;
    };
    for (path, item) in paths {
        if NOT_TOOLS.contains(&path.as_str()) {
            continue;
        }
        let Some(item) = item.as_object() else {
            continue;
        };
        for (method, spec) in item {
            if !matches!(method.as_str(), "get" | "post" | "put" | "patch" | "delete") {
                continue;
            }
            let Some(id) = spec["operationId"].as_str() else {
                continue;
            };
            let tagged_alias = spec["tags"]
                .as_array()
                .is_some_and(|tags| tags.iter().any(|t| t == "aliases"));
            if spec.get("x-alias-of").is_some() || tagged_alias || id.ends_with("ViaRunsAlias") {
                continue;
            }
            out.push(Operation {
                operation_id: id.to_owned(),
                method: method.clone(),
                path: path.clone(),
                spec: spec.clone(),
            });
        }
    }
    out.sort_by(|a, b| a.operation_id.cmp(&b.operation_id));
    out
}

/// How a tool's remaining arguments become the request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// No body in the document: leftover arguments go to the query string, where the API
    /// refuses unknown parameters.
    None,
    /// A JSON object; `renamed` lists (argument, field) pairs of fields named `body_…`.
    Object {
        required: bool,
        renamed: Vec<(String, String)>,
    },
    /// A JSON array, given as the argument `rows`.
    Array { required: bool, argument: String },
}

/// A tool and what its call sends.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub method: String,
    pub path: String,
    pub path_params: Vec<String>,
    pub query_params: Vec<String>,
    pub body: Body,
    pub input_schema: Map<String, Value>,
    /// `x-required-scopes` (any one suffices); `None` when any valid key may call it.
    pub required_scopes: Option<Vec<String>>,
    pub hints: Hints,
}

impl ToolSpec {
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "post" | "put" | "patch" | "delete")
    }
}

/// Every tool of the document.
pub fn tools(document: &Value) -> Vec<ToolSpec> {
    canonical_operations(document)
        .into_iter()
        .map(|op| tool(&op, document))
        .collect()
}

fn text(value: &Value) -> Option<String> {
    value
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn tool(op: &Operation, document: &Value) -> ToolSpec {
    let spec = &op.spec;
    let is_write = matches!(op.method.as_str(), "post" | "put" | "patch" | "delete");
    let mut properties = Map::new();
    let mut required: Vec<String> = Vec::new();
    let mut path_params = Vec::new();
    let mut query_params = Vec::new();

    for param in spec["parameters"].as_array().into_iter().flatten() {
        let param = match param["$ref"].as_str() {
            Some(reference) => resolve(reference, document).unwrap_or(Value::Null),
            None => param.clone(),
        };
        let (Some(name), Some(place)) = (param["name"].as_str(), param["in"].as_str()) else {
            continue;
        };
        match place {
            "path" => path_params.push(name.to_owned()),
            "query" => query_params.push(name.to_owned()),
            // The Idempotency-Key header is the argument idempotency_key, added below.
            _ => continue,
        }
        let mut schema = inline_refs(&param["schema"], document);
        if let (Some(description), Some(map)) =
            (text(&param["description"]), schema.as_object_mut())
        {
            map.entry("description").or_insert(json!(description));
        }
        properties.insert(name.to_owned(), schema);
        if place == "path" || param["required"] == true {
            required.push(name.to_owned());
        }
    }

    if is_write {
        let header = resolve("#/components/parameters/IdempotencyKey", document)
            .map(|p| inline_refs(&p["schema"], document))
            .unwrap_or_else(|| json!({"type": "string", "format": "uuid"}));
        let mut schema = header;
        if let Some(map) = schema.as_object_mut() {
            map.insert(
                "description".into(),
                json!(
                    "UUID v4 sent as the Idempotency-Key header. Omitted: a fresh one is used and \
                     named in the result; send that one again to repeat this call safely."
                ),
            );
        }
        properties.insert(IDEMPOTENCY_ARG.into(), schema);
    }

    let body_spec = &spec["requestBody"];
    let body_required = body_spec["required"] == true;
    let body_schema = body_spec
        .pointer("/content/application~1json/schema")
        .map(|s| inline_refs(s, document));
    let argument_for = |field: &str, taken: &Map<String, Value>| {
        if taken.contains_key(field) {
            format!("{BODY_PREFIX}{field}")
        } else {
            field.to_owned()
        }
    };
    // The body's own conditions (a wallet's shape by network, a run's items by type) hold for
    // the arguments too when they keep the fields' names.
    let mut conditions = Map::new();
    let body = match &body_schema {
        None => Body::None,
        Some(schema) => {
            if let Some(object) = object_alternative(schema) {
                let mut renamed = Vec::new();
                let field_required: Vec<&str> = object
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for (field, schema) in object
                    .get("properties")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    let argument = argument_for(field, &properties);
                    if argument != *field {
                        renamed.push((argument.clone(), field.clone()));
                    }
                    properties.insert(argument, schema.clone());
                }
                if renamed.is_empty() {
                    for key in ["if", "then", "else"] {
                        if let Some(condition) = object.get(key) {
                            conditions.insert(key.into(), condition.clone());
                        }
                    }
                }
                if body_required {
                    for field in field_required {
                        let argument = renamed
                            .iter()
                            .find(|(_, f)| f == field)
                            .map(|(a, _)| a.clone())
                            .unwrap_or_else(|| field.to_owned());
                        required.push(argument);
                    }
                }
                Body::Object {
                    required: body_required,
                    renamed,
                }
            } else if schema["type"] == "array" {
                let argument = argument_for(ROWS_ARG, &properties);
                let mut schema = schema.clone();
                if let (Some(description), Some(map)) =
                    (text(&body_spec["description"]), schema.as_object_mut())
                {
                    map.entry("description").or_insert(json!(description));
                }
                properties.insert(argument.clone(), schema);
                if body_required {
                    required.push(argument.clone());
                }
                Body::Array {
                    required: body_required,
                    argument,
                }
            } else {
                Body::None
            }
        }
    };

    // Unknown arguments are not refused here (no additionalProperties: false): they are sent,
    // and the API's 400 names them.
    let mut input_schema = Map::new();
    input_schema.insert("type".into(), json!("object"));
    input_schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        input_schema.insert("required".into(), json!(required));
    }
    input_schema.extend(conditions);

    let title = text(&spec["summary"]);
    let http = format!(
        "HTTP: {} /api/v1{}",
        op.method.to_ascii_uppercase(),
        op.path
    );
    let description = [title.clone(), text(&spec["description"]), Some(http)]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n\n");
    let required_scopes = spec["x-required-scopes"].as_array().map(|scopes| {
        scopes
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    });

    ToolSpec {
        name: op.operation_id.clone(),
        title,
        description,
        method: op.method.clone(),
        path: op.path.clone(),
        path_params,
        query_params,
        body,
        input_schema,
        required_scopes,
        hints: hints(&op.operation_id, &op.method),
    }
}

/// Stands among the granted scopes when the credential is an agent session's token.
pub const SESSION_MARKER: &str = "(agent session)";

/// Whether a key holding `granted` (wildcards included) may call the tool: any one of its
/// required scopes suffices; a tool without any is open to every valid key.
pub fn allowed(tool: &ToolSpec, granted: &[String]) -> bool {
    // A session may not create sessions: the tool is not offered to it.
    if tool.name == "createAgentSession" && granted.iter().any(|g| g == SESSION_MARKER) {
        return false;
    }
    let Some(required) = &tool.required_scopes else {
        return true;
    };
    required.is_empty()
        || required.iter().any(|name| {
            match Scope::ALL.iter().find(|scope| scope.as_str() == name) {
                Some(scope) => auth::grants(granted, *scope),
                None => granted.contains(name),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::hints::WRITES;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn find<'a>(tools: &'a [ToolSpec], name: &str) -> &'a ToolSpec {
        tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no tool {name}"))
    }

    #[test]
    fn one_tool_per_canonical_operation_and_no_alias() {
        let document = crate::openapi::document();
        let tools = tools(&document);
        let ids: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        for id in [
            "listPayrollRuns",
            "executePayrollRun",
            "getCurrentApiKey",
            "importEmployees",
            "createTreasuryTransfer",
        ] {
            assert!(ids.contains(&id), "{id} missing from {ids:?}");
        }
        assert!(!ids.contains(&"getOpenApiDocument") && !ids.contains(&"getApiDocs"));
        assert!(tools.iter().all(|t| !t.path.starts_with("/runs")));
        let mut unique = ids.clone();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "tool names are unique");
        // Every /payroll-runs operation but none of its aliases.
        let runs = tools
            .iter()
            .filter(|t| t.path.starts_with("/payroll-runs"))
            .count();
        assert_eq!(runs, 11);
    }

    #[test]
    fn every_write_of_the_document_is_decided_and_no_other() {
        let document = crate::openapi::document();
        let writes: Vec<String> = canonical_operations(&document)
            .into_iter()
            .filter(|op| op.method != "get")
            .map(|op| op.operation_id)
            .collect();
        let undecided: Vec<&String> = writes
            .iter()
            .filter(|id| !WRITES.iter().any(|(w, _)| w == id))
            .collect();
        assert!(
            undecided.is_empty(),
            "writes without a decision in WRITES: {undecided:?}"
        );
        let stale: Vec<&str> = WRITES
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !writes.iter().any(|w| w == id))
            .collect();
        assert!(stale.is_empty(), "WRITES names no such write: {stale:?}");
    }

    #[test]
    fn aliases_are_skipped_whichever_way_they_are_marked() {
        let document = json!({"paths": {
            "/payroll-runs": {"get": {"operationId": "listPayrollRuns"}},
            "/runs": {
                "get": {"operationId": "listPayrollRunsViaRunsAlias", "tags": ["aliases"]},
                "post": {"x-alias-of": "createPayrollRun"}
            },
            "/runs/{run_id}": {"get": {"operationId": "getPayrollRunAgain", "tags": ["aliases"]}},
            "/openapi.json": {"get": {"operationId": "getOpenApiDocument"}},
            "/docs": {"get": {"operationId": "getApiDocs"}}
        }});
        let ids: Vec<String> = canonical_operations(&document)
            .into_iter()
            .map(|o| o.operation_id)
            .collect();
        assert_eq!(ids, vec!["listPayrollRuns"]);
    }

    #[test]
    fn arguments_are_path_query_and_body_fields_with_refs_inlined() {
        let document = crate::openapi::document();
        let tools = tools(&document);

        let create = find(&tools, "createPayrollRun");
        let schema = Value::Object(create.input_schema.clone());
        assert_eq!(schema["type"], "object");
        assert_eq!(
            schema["required"],
            json!(["period_start", "period_end"]),
            "{schema}"
        );
        assert_eq!(
            schema["properties"]["period_start"]["anyOf"][0]["format"],
            "date-time"
        );
        assert!(schema["properties"]["idempotency_key"]["pattern"].is_string());
        assert!(!schema.to_string().contains("$ref"), "{schema}");
        // RunItem, inlined: its amount keeps the document's bounds.
        let amount = schema
            .pointer("/properties/items/items/properties/amount_usd_cents")
            .unwrap_or(&Value::Null);
        assert_eq!(amount["minimum"], 1, "{schema}");
        assert_eq!(amount["maximum"], 100_000_000_000_i64);
        assert!(matches!(create.body, Body::Object { required: true, .. }));
        // The body's condition: items only for ad_hoc and reimbursement runs.
        assert!(schema["then"]["required"] == json!(["items"]), "{schema}");

        let payouts = find(&tools, "getPayrollRunPayouts");
        let schema = Value::Object(payouts.input_schema.clone());
        assert_eq!(payouts.path_params, vec!["run_id"]);
        assert!(payouts.query_params.contains(&"limit".to_owned()));
        assert_eq!(schema["properties"]["limit"]["maximum"], 200);
        assert_eq!(schema["required"], json!(["run_id"]));
        assert!(schema["properties"].get("idempotency_key").is_none());
        assert_eq!(payouts.body, Body::None);
        assert!(payouts.hints.read_only);

        let confirm = find(&tools, "confirmPayrollRun");
        let properties = confirm.input_schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut keys: Vec<&String> = properties.keys().collect();
        keys.sort();
        assert_eq!(keys, vec!["idempotency_key", "run_id"]);
        assert!(
            !properties.contains_key("Idempotency-Key"),
            "the header is not an argument"
        );

        let import = find(&tools, "importEmployees");
        let schema = Value::Object(import.input_schema.clone());
        assert_eq!(schema["properties"]["rows"]["type"], "array");
        assert_eq!(
            schema["properties"]["rows"]["items"]["properties"]["network"]["enum"]
                .as_array()
                .map(Vec::len),
            Some(6),
            "{schema}"
        );
        assert_eq!(schema["required"], json!(["rows"]));
        assert!(matches!(import.body, Body::Array { .. }));

        assert!(
            find(&tools, "executePayrollRun")
                .description
                .contains("payroll:execute")
        );
        assert!(
            find(&tools, "executePayrollRun")
                .description
                .contains("POST /api/v1/payroll-runs/{run_id}/execute")
        );
    }

    #[test]
    fn a_body_field_named_like_a_parameter_is_body_prefixed() {
        let document = json!({"paths": {"/things/{id}": {"patch": {
            "operationId": "updateThing",
            "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
            "requestBody": {"required": true, "content": {"application/json": {"schema": {
                "type": "object",
                "required": ["id"],
                "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}
            }}}}
        }}}});
        let tools = tools(&document);
        let tool = find(&tools, "updateThing");
        assert_eq!(tool.input_schema["properties"]["id"]["type"], "string");
        assert_eq!(
            tool.input_schema["properties"]["body_id"]["type"],
            "integer"
        );
        assert_eq!(tool.input_schema["required"], json!(["id", "body_id"]));
        assert_eq!(
            tool.body,
            Body::Object {
                required: true,
                renamed: vec![("body_id".into(), "id".into())]
            }
        );
    }

    #[test]
    fn scopes_filter_tools_with_wildcards_and_keyless_ones_stay() {
        let document = crate::openapi::document();
        let tools = tools(&document);
        let visible = |granted: &[&str]| -> Vec<String> {
            tools
                .iter()
                .filter(|t| allowed(t, &names(granted)))
                .map(|t| t.name.clone())
                .collect()
        };
        let read = visible(&["payroll:read"]);
        assert!(read.contains(&"listPayrollRuns".to_owned()));
        assert!(read.contains(&"getCurrentApiKey".to_owned()));
        // sync takes payroll:read, payroll:write or payroll:execute.
        assert!(read.contains(&"syncPayrollRun".to_owned()));
        assert!(!read.contains(&"executePayrollRun".to_owned()));
        assert!(!read.contains(&"listEmployees".to_owned()));

        let family = visible(&["payroll:*"]);
        assert!(family.contains(&"executePayrollRun".to_owned()));
        assert!(family.contains(&"createPayrollRun".to_owned()));
        assert!(!family.contains(&"getTreasuryBalance".to_owned()));

        let everything = visible(&[
            "payroll:*",
            "employees:*",
            "treasury:*",
            "audit:read",
            "webhooks:manage",
            "keys:manage",
            "payroll:approve",
        ]);
        assert_eq!(everything.len(), tools.len());
        let mut keyless = visible(&[]);
        keyless.sort();
        assert_eq!(
            keyless,
            [
                "createAgentSession",
                "getAgentSession",
                "getCurrentApiKey",
                "listAgentSessions",
                "revokeAgentSession"
            ]
        );
        // The decide tools need payroll:approve by name: a session (or payroll:*) never sees them.
        assert!(!family.contains(&"approveApproval".to_owned()));
        assert!(family.contains(&"getApproval".to_owned()));
    }
}
