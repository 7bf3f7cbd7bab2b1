//! `payroll mcp`: the Model Context Protocol on stdio, a client of the REST API. One tool per
//! canonical operation of the OpenAPI document (derived from it at start, never listed by
//! hand), filtered by the API key's scopes; each call is one API request whose JSON envelope
//! comes back unchanged.

pub mod catalog;
pub mod hints;
pub mod request;
pub mod schema;
pub mod server;

use rmcp::ServiceExt;

use crate::cli::client::Client;

/// Serves MCP on stdin/stdout until the host closes stdin. Must run on a local task set (the
/// CLI's actix system): the API client is not `Send`.
pub async fn serve(client: Client) -> anyhow::Result<()> {
    let tools = catalog::tools(&crate::openapi::document());
    let running = server::PayrollMcp::new(client, tools)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP initialization failed: {e}"))?;
    running.waiting().await?;
    Ok(())
}
