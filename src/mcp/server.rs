//! The MCP handler: lists the tools the API key's scopes allow and turns each call into one
//! request of the REST API through the CLI's client.

use std::{cell::RefCell, sync::Arc};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
        ToolAnnotations,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use crate::{
    cli::client::{Answer, Call, Client, Failure},
    mcp::{
        catalog::{ToolSpec, allowed},
        request,
    },
};

const INSTRUCTIONS: &str = "Each tool is one operation of the payroll REST API, named by its \
operationId. A result is the API's JSON envelope ({data, api_version, request_id}); an error \
result is its error envelope, whose recovery_hint says what to do next. Writes take an optional \
idempotency_key (UUID v4); without one a fresh key is used and named in the result, so that the \
same write can be sent again safely. Money is integer cents of USDC.";

/// The MCP server of one API key.
pub struct PayrollMcp {
    client: Client,
    tools: Vec<ToolSpec>,
    /// The key's scopes, read at the first listing.
    granted: RefCell<Option<Vec<String>>>,
}

impl PayrollMcp {
    pub fn new(client: Client, tools: Vec<ToolSpec>) -> PayrollMcp {
        PayrollMcp {
            client,
            tools,
            granted: RefCell::new(None),
        }
    }

    /// The key's scopes, from `GET /api-keys/current` once; a failure is not remembered, so
    /// the next listing asks again.
    async fn granted(&self) -> Result<Vec<String>, McpError> {
        if let Some(granted) = self.granted.borrow().as_ref() {
            return Ok(granted.clone());
        }
        let base = self.client.base_url.clone();
        let answer = self
            .client
            .send_with_key(&Call::get("/api-keys/current"), None)
            .await
            .map_err(|failure| {
                McpError::internal_error(
                    format!(
                        "cannot read the API key's scopes from {base}: {}",
                        failure_text(&failure)
                    ),
                    None,
                )
            })?;
        let body = answer.json();
        if answer.status != 200 {
            let error = &body["error"];
            return Err(McpError::internal_error(
                format!(
                    "{base} refused the API key ({}): {} {}",
                    answer.status,
                    error["code"].as_str().unwrap_or("UNKNOWN"),
                    error["message"].as_str().unwrap_or_default()
                ),
                Some(body),
            ));
        }
        let granted: Vec<String> = body["data"]["scopes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .chain(
                body["data"]["id"]
                    .as_str()
                    .filter(|id| id.starts_with("ses_"))
                    .map(|_| crate::mcp::catalog::SESSION_MARKER.to_owned()),
            )
            .collect();
        *self.granted.borrow_mut() = Some(granted.clone());
        Ok(granted)
    }

    async fn call(&self, tool: &ToolSpec, params: CallToolRequestParams) -> CallToolResult {
        let request = match request::build(tool, params.arguments) {
            Ok(request) => request,
            Err(why) => return CallToolResult::error(vec![ContentBlock::text(why)]),
        };
        let answer = self
            .client
            .send_with_key(&request.call, request.idempotency_key.clone())
            .await;
        let mut result = match answer {
            Ok(answer) => result_of(&answer),
            Err(Failure::Usage(why)) => CallToolResult::error(vec![ContentBlock::text(format!(
                "the call could not be made: {why}"
            ))]),
            Err(Failure::BadAnswer(why)) => CallToolResult::error(vec![ContentBlock::text(
                format!("the server's answer was refused: {why}"),
            )]),
            Err(failure) => CallToolResult::error(vec![ContentBlock::text(format!(
                "the server could not be reached: {}",
                failure_text(&failure)
            ))]),
        };
        if let Some(key) = request.idempotency_key {
            result.content.push(ContentBlock::text(format!(
                "Idempotency-Key: {key} (send it again as idempotency_key to repeat this call \
                 safely)"
            )));
        }
        result
    }
}

fn failure_text(failure: &Failure) -> String {
    match failure {
        Failure::Unreachable(why) | Failure::Usage(why) | Failure::BadAnswer(why) => why.clone(),
        Failure::Api => "the API answered an error".into(),
        Failure::WaitTimedOut => "timed out".into(),
    }
}

/// The tool result of an API answer: the JSON envelope unchanged as `structuredContent` and
/// as text, `isError` for any status but 2xx; a body that is not JSON (CSV) as text alone.
pub fn result_of(answer: &Answer) -> CallToolResult {
    let failed = !(200..300).contains(&answer.status);
    let json = answer
        .content_type
        .contains("json")
        .then(|| serde_json::from_slice::<Value>(&answer.bytes).ok())
        .flatten()
        .filter(Value::is_object);
    // The text is the answer's own bytes, not the envelope serialized again.
    let text = || vec![ContentBlock::text(String::from_utf8_lossy(&answer.bytes))];
    match (json, failed) {
        (Some(envelope), false) => {
            let mut result = CallToolResult::structured(envelope);
            result.content = text();
            result
        }
        (Some(envelope), true) => {
            let mut result = CallToolResult::structured_error(envelope);
            result.content = text();
            result
        }
        (None, false) => CallToolResult::success(vec![ContentBlock::text(
            String::from_utf8_lossy(&answer.bytes).into_owned(),
        )]),
        (None, true) => CallToolResult::error(vec![ContentBlock::text(format!(
            "HTTP {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.bytes)
        ))]),
    }
}

/// The MCP description of a tool.
pub fn describe(tool: &ToolSpec) -> Tool {
    let mut annotations = ToolAnnotations::new()
        .read_only(tool.hints.read_only)
        .destructive(tool.hints.destructive)
        .idempotent(tool.hints.idempotent)
        .open_world(false);
    annotations.title = tool.title.clone();
    let described = Tool::new(
        tool.name.clone(),
        tool.description.clone(),
        Arc::new(tool.input_schema.clone()),
    )
    .with_annotations(annotations);
    match &tool.title {
        Some(title) => described.with_title(title.clone()),
        None => described,
    }
}

impl ServerHandler for PayrollMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("payroll", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let granted = self.granted().await?;
        Ok(ListToolsResult::with_all_items(
            self.tools
                .iter()
                .filter(|tool| allowed(tool, &granted))
                .map(describe)
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Only a tool listed for this key is called: one it hides is refused here, as an
        // unknown one is, whatever the client asks.
        let granted = self.granted().await?;
        let Some(tool) = self
            .tools
            .iter()
            .find(|t| t.name == params.name && allowed(t, &granted))
        else {
            return Err(McpError::invalid_params(
                format!(
                    "no tool named {} is offered to this API key (tools/list names those it may call)",
                    params.name
                ),
                Some(json!({"tools": self
                    .tools
                    .iter()
                    .filter(|t| allowed(t, &granted))
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()})),
            ));
        };
        Ok(self.call(tool, params).await.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, content_type: &str, body: &str) -> Answer {
        Answer {
            streamed: false,
            status,
            bytes: body.as_bytes().to_vec(),
            content_type: content_type.into(),
        }
    }

    fn texts(result: &CallToolResult) -> Vec<String> {
        result
            .content
            .iter()
            .filter_map(|c| match c {
                ContentBlock::Text(t) => Some(t.text.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_envelope_is_the_structured_content_unchanged() {
        let body = r#"{"data":{"id":"run_1"},"api_version":"2026-03-01","request_id":"req_1"}"#;
        let result = result_of(&answer(200, "application/json", body));
        let envelope: Value = serde_json::from_str(body).unwrap_or_default();
        assert_eq!(result.structured_content, Some(envelope.clone()));
        assert_eq!(result.is_error, Some(false));
        let texts = texts(&result);
        assert_eq!(texts.len(), 1);
        assert_eq!(
            serde_json::from_str::<Value>(&texts[0]).ok(),
            Some(envelope)
        );
    }

    #[test]
    fn an_error_answer_is_a_tool_error_with_its_envelope() {
        let body = r#"{"error":{"code":"INVALID_STATUS_TRANSITION","message":"m","details":{"allowed_operations":["confirm"]},"recovery_hint":"h","docs_url":"/d"},"api_version":"2026-03-01","request_id":"req_2"}"#;
        let result = result_of(&answer(409, "application/json; charset=utf-8", body));
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result
                .structured_content
                .as_ref()
                .map(|e| &e["error"]["code"]),
            Some(&json!("INVALID_STATUS_TRANSITION"))
        );
    }

    #[test]
    fn csv_is_text_alone() {
        let result = result_of(&answer(200, "text/csv", "id,status\npay_1,COMPLETED\n"));
        assert_eq!(result.is_error, Some(false));
        assert!(result.structured_content.is_none());
        assert_eq!(texts(&result), vec!["id,status\npay_1,COMPLETED\n"]);
        let html = result_of(&answer(502, "text/html", "<h1>Bad gateway</h1>"));
        assert_eq!(html.is_error, Some(true));
        assert!(texts(&html)[0].starts_with("HTTP 502"));
    }

    #[test]
    fn tools_carry_their_hints_and_schema() {
        let tools = crate::mcp::catalog::tools(&crate::openapi::document());
        let execute = tools
            .iter()
            .find(|t| t.name == "executePayrollRun")
            .map(describe)
            .expect("execute");
        let wire = serde_json::to_value(&execute).unwrap_or_default();
        assert_eq!(wire["annotations"]["destructiveHint"], true);
        assert_eq!(wire["annotations"]["readOnlyHint"], false);
        assert_eq!(wire["inputSchema"]["required"], json!(["run_id"]));
        let list = tools
            .iter()
            .find(|t| t.name == "listEmployees")
            .map(describe)
            .expect("list");
        let wire = serde_json::to_value(&list).unwrap_or_default();
        assert_eq!(wire["annotations"]["readOnlyHint"], true);
        assert_eq!(wire["annotations"]["idempotentHint"], true);
    }
}
