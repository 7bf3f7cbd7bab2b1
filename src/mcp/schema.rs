//! Self-contained JSON Schemas out of the OpenAPI document: every `$ref` into
//! `#/components/…` replaced by what it names, so a tool's `inputSchema` needs no document
//! beside it.

use serde_json::{Map, Value};

/// How many references deep a chain is followed; a schema that refers to itself becomes `{}`
/// (anything) at that depth rather than growing without end.
pub const MAX_DEPTH: usize = 16;

/// `schema` with every `$ref` into the document's components inlined, recursively. Keywords
/// beside a `$ref` (a `description`, say) are kept over those of the schema it names.
pub fn inline_refs(schema: &Value, document: &Value) -> Value {
    inline(schema, document, 0)
}

fn inline(schema: &Value, document: &Value, depth: usize) -> Value {
    match schema {
        Value::Object(map) => {
            if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                if depth >= MAX_DEPTH {
                    return Value::Object(Map::new());
                }
                let target = resolve(reference, document).unwrap_or(Value::Object(Map::new()));
                let mut out = match inline(&target, document, depth + 1) {
                    Value::Object(target) => target,
                    other => return other,
                };
                for (key, value) in map {
                    if key != "$ref" {
                        out.insert(key.clone(), inline(value, document, depth));
                    }
                }
                return Value::Object(out);
            }
            Value::Object(
                map.iter()
                    .map(|(key, value)| (key.clone(), inline(value, document, depth)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| inline(item, document, depth))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// What a local reference (`#/components/schemas/X`) names, if it names something.
pub fn resolve(reference: &str, document: &Value) -> Option<Value> {
    let pointer = reference.strip_prefix('#')?;
    document.pointer(pointer).cloned()
}

/// The object schema among a body schema's alternatives: `{"oneOf": [{"type": "null"}, X]}`
/// (an optional body) is X. `None` when the body is not an object.
pub fn object_alternative(schema: &Value) -> Option<&Map<String, Value>> {
    let map = schema.as_object()?;
    if is_object(map) {
        return Some(map);
    }
    for key in ["oneOf", "anyOf"] {
        let Some(alternatives) = map.get(key).and_then(Value::as_array) else {
            continue;
        };
        let is_null = |a: &Value| a.get("type").and_then(Value::as_str) == Some("null");
        let objects: Vec<&Map<String, Value>> = alternatives
            .iter()
            .filter_map(Value::as_object)
            .filter(|m| is_object(m))
            .collect();
        if objects.len() == 1
            && objects.len() + alternatives.iter().filter(|a| is_null(a)).count()
                == alternatives.len()
        {
            return objects.first().copied();
        }
    }
    None
}

fn is_object(map: &Map<String, Value>) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        None => map.contains_key("properties"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_inlined_with_their_siblings_kept() {
        let doc = json!({"components": {"schemas": {
            "Network": {"type": "string", "enum": ["BASE", "SOLANA"]},
            "Item": {"type": "object", "properties": {"network": {"$ref": "#/components/schemas/Network"}}}
        }}});
        let schema = json!({"type": "array", "items": {"$ref": "#/components/schemas/Item", "description": "one"}});
        assert_eq!(
            inline_refs(&schema, &doc),
            json!({"type": "array", "items": {
                "type": "object",
                "description": "one",
                "properties": {"network": {"type": "string", "enum": ["BASE", "SOLANA"]}}
            }})
        );
    }

    #[test]
    fn a_schema_that_names_itself_stops_at_the_depth_guard() {
        let doc = json!({"components": {"schemas": {
            "Node": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"}}}
        }}});
        let inlined = inline_refs(&json!({"$ref": "#/components/schemas/Node"}), &doc);
        let text = inlined.to_string();
        assert!(!text.contains("$ref"), "{text}");
        let mut depth = 0;
        let mut node = &inlined;
        while let Some(next) = node.pointer("/properties/next") {
            node = next;
            depth += 1;
        }
        assert_eq!(depth, MAX_DEPTH);
        assert_eq!(node, &json!({}));
    }

    #[test]
    fn an_optional_body_is_its_object_alternative() {
        let empty = json!({"type": "object", "additionalProperties": false});
        let optional = json!({"oneOf": [{"type": "null"}, empty.clone()]});
        assert_eq!(
            object_alternative(&optional).cloned().map(Value::Object),
            Some(empty)
        );
        assert!(object_alternative(&json!({"type": "array", "items": {}})).is_none());
        assert!(
            object_alternative(&json!({"oneOf": [{"type": "object"}, {"type": "string"}]}))
                .is_none()
        );
    }
}
