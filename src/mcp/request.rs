//! A tool call's arguments as the API request they stand for: path parameters substituted
//! (percent-encoded), query parameters, the rest as the JSON body. Nothing is validated here
//! beyond what a URL needs: the API judges the arguments and its 400 names what is wrong.

use awc::http::Method;
use serde_json::{Map, Value};

use crate::{
    cli::client::{Call, encode},
    mcp::catalog::{Body, IDEMPOTENCY_ARG, ToolSpec},
};

/// The request of one call, and the Idempotency-Key it carries (writes only).
#[derive(Debug)]
pub struct Request {
    pub call: Call,
    pub idempotency_key: Option<String>,
}

/// A value as query or path text: strings as they are, arrays comma-joined, the rest as JSON.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(as_text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// The request for `tool` called with `arguments`; a missing path parameter is the only
/// refusal, since without it there is no URL to send to.
pub fn build(tool: &ToolSpec, arguments: Option<Map<String, Value>>) -> Result<Request, String> {
    let mut args = arguments.unwrap_or_default();

    let mut path = tool.path.clone();
    for name in &tool.path_params {
        let value = match args.remove(name) {
            Some(Value::Null) | None => {
                return Err(format!(
                    "the argument `{name}` is required: it is part of the path {}",
                    tool.path
                ));
            }
            Some(value) => value,
        };
        path = path.replace(&format!("{{{name}}}"), &encode(&as_text(&value)));
    }

    let method = Method::from_bytes(tool.method.to_ascii_uppercase().as_bytes())
        .map_err(|e| format!("{}: {e}", tool.method))?;
    let mut call = Call::get(path).with_method(method);

    for name in &tool.query_params {
        match args.remove(name) {
            None | Some(Value::Null) => {}
            Some(value) => call.query.push((name.clone(), as_text(&value))),
        }
    }

    let idempotency_key = if tool.is_write() {
        Some(match args.remove(IDEMPOTENCY_ARG) {
            None | Some(Value::Null) => uuid::Uuid::new_v4().to_string(),
            Some(value) => {
                let key = as_text(&value);
                // Said as what it is, never as a server that could not be reached.
                crate::http::idempotency::parse_key(Some(&key)).map_err(|_| {
                    format!(
                        "{IDEMPOTENCY_ARG}: `{}` is not a UUID v4; send a new UUID v4 (for \
                         example 3f2b8c1e-9d4a-4b7e-8f6a-1c2d3e4f5a6b), or leave it out and one \
                         is made",
                        key.chars().take(80).collect::<String>()
                    )
                })?
            }
        })
    } else {
        None
    };

    match &tool.body {
        Body::None => {
            // The API refuses unknown query parameters by name.
            for (name, value) in args {
                call.query.push((name, as_text(&value)));
            }
        }
        Body::Object { required, renamed } => {
            let body: Map<String, Value> = args
                .into_iter()
                .map(|(argument, value)| {
                    let field = renamed
                        .iter()
                        .find(|(a, _)| *a == argument)
                        .map(|(_, f)| f.clone())
                        .unwrap_or(argument);
                    (field, value)
                })
                .collect();
            if *required || !body.is_empty() {
                call = call.json(Value::Object(body));
            }
        }
        Body::Array { required, argument } => {
            let rows = args.remove(argument);
            call = match rows {
                // Other arguments beside the rows: sent as they are, for the API to refuse.
                Some(rows) if args.is_empty() => call.json(rows),
                Some(rows) => {
                    args.insert(argument.clone(), rows);
                    call.json(Value::Object(args))
                }
                None if *required || !args.is_empty() => call.json(Value::Object(args)),
                None => call,
            };
        }
    }

    Ok(Request {
        call,
        idempotency_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::catalog::tools;
    use serde_json::json;

    fn tool(name: &str) -> ToolSpec {
        tools(&crate::openapi::document())
            .into_iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no tool {name}"))
    }

    fn args(value: Value) -> Option<Map<String, Value>> {
        value.as_object().cloned()
    }

    fn body(request: &Request) -> Value {
        request
            .call
            .body
            .as_ref()
            .map(|(bytes, _)| serde_json::from_slice(bytes).unwrap_or(Value::Null))
            .unwrap_or(Value::Null)
    }

    #[test]
    fn path_parameters_are_substituted_and_encoded() {
        let request = build(
            &tool("confirmPayrollRun"),
            args(json!({"run_id": "run_a/b c"})),
        )
        .expect("request");
        assert_eq!(request.call.method, Method::POST);
        assert_eq!(request.call.path, "/payroll-runs/run_a%2Fb%20c/confirm");
        assert!(request.call.query.is_empty());
        assert!(
            request.call.body.is_none(),
            "an optional empty body stays out"
        );
        let key = request.idempotency_key.expect("a write carries a key");
        assert_eq!(
            uuid::Uuid::try_parse(&key).map(|u| u.get_version_num()),
            Ok(4)
        );
    }

    #[test]
    fn a_missing_path_parameter_is_named() {
        let err = build(&tool("getPayrollRun"), None).expect_err("no run_id");
        assert!(err.contains("run_id"), "{err}");
    }

    #[test]
    fn query_parameters_and_leftovers_of_a_read_go_to_the_query_string() {
        let request = build(
            &tool("listPayrollRuns"),
            args(json!({"status": "DRAFT", "limit": 5, "include_archived": true, "colour": "red", "sort": null})),
        )
        .expect("request");
        let mut query = request.call.query.clone();
        query.sort();
        assert_eq!(
            query,
            vec![
                ("colour".to_owned(), "red".to_owned()),
                ("include_archived".to_owned(), "true".to_owned()),
                ("limit".to_owned(), "5".to_owned()),
                ("status".to_owned(), "DRAFT".to_owned()),
            ]
        );
        assert!(request.idempotency_key.is_none());
        assert!(request.call.body.is_none());
    }

    #[test]
    fn body_fields_and_unknown_arguments_go_to_the_body() {
        let key = "0b6c6f7e-3f5a-4b7e-9c1d-2a3b4c5d6e7f";
        let request = build(
            &tool("createPayrollRun"),
            args(json!({
                "period_start": "2026-03-01",
                "period_end": "2026-03-31",
                "idempotency_key": key,
                "surprise": 1
            })),
        )
        .expect("request");
        assert_eq!(request.call.path, "/payroll-runs");
        assert_eq!(request.idempotency_key.as_deref(), Some(key));
        assert_eq!(
            body(&request),
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "surprise": 1})
        );
        // A required body is sent even when empty, so that the API lists what is missing.
        let empty = build(&tool("createPayrollRun"), None).expect("request");
        assert_eq!(body(&empty), json!({}));
    }

    #[test]
    fn rows_are_the_array_body_of_an_import() {
        let rows = json!([{"name": "Ada", "email": "ada@example.com"}]);
        let request = build(
            &tool("importEmployees"),
            args(json!({"rows": rows.clone()})),
        )
        .expect("request");
        assert_eq!(body(&request), rows);
        let with_extra = build(
            &tool("importEmployees"),
            args(json!({"rows": rows.clone(), "mode": "x"})),
        )
        .expect("request");
        assert_eq!(body(&with_extra), json!({"rows": rows, "mode": "x"}));
    }

    #[test]
    fn renamed_body_fields_get_their_own_names_back() {
        let document = json!({"paths": {"/things/{id}": {"patch": {
            "operationId": "updateThing",
            "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
            "requestBody": {"required": true, "content": {"application/json": {"schema": {
                "type": "object", "properties": {"id": {"type": "integer"}}
            }}}}
        }}}});
        let tool = tools(&document).remove(0);
        let request = build(&tool, args(json!({"id": "t1", "body_id": 7}))).expect("request");
        assert_eq!(request.call.path, "/things/t1");
        assert_eq!(request.call.method, Method::PATCH);
        assert_eq!(body(&request), json!({"id": 7}));
    }
}
