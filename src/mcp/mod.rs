//! `payroll mcp`: the Model Context Protocol on stdio, a client of the REST API. One tool per
//! canonical operation of the OpenAPI document (derived from it at start, never listed by
//! hand), filtered by the API key's scopes; each call is one API request whose JSON envelope
//! comes back unchanged.

pub mod catalog;
pub mod hints;
pub mod request;
pub mod schema;
