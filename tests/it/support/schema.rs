//! The providers' JSON Schemas: requests closed, responses open.

use jsonschema::Validator;
use serde_json::{Map, Value};

/// Which schema of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Root {
    Request,
    Response,
    /// One event of a streamed answer (open, as responses are).
    Stream,
    /// The root of this name in the file's `x-roots` (open).
    Named(&'static str),
}

/// A validator for `file`'s request (closed) or response (as published) schema.
pub(crate) fn validator(file: &str, root: Root) -> Validator {
    let mut doc: Value = serde_json::from_str(&super::fixture(file)).unwrap();
    let roots = &doc["x-roots"];
    let target = match root {
        Root::Request => &roots["request"],
        Root::Response => &roots["response"],
        Root::Stream => roots.get("stream-chunk").unwrap_or(&roots["stream-event"]),
        Root::Named(name) => &roots[name],
    };
    let target = target.as_str().unwrap().to_owned();
    if root == Root::Request {
        close(&mut doc);
    }
    let obj = doc.as_object_mut().unwrap();
    obj.insert("$ref".into(), Value::String(target));
    jsonschema::draft202012::new(&doc).unwrap()
}

/// Validation errors of `instance`, as readable lines (empty when valid).
pub(crate) fn errors(v: &Validator, instance: &Value) -> Vec<String> {
    v.iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// Panics with every error when `instance` does not validate.
pub(crate) fn assert_valid(v: &Validator, instance: &Value, what: &str) {
    let errs = errors(v, instance);
    assert!(
        errs.is_empty(),
        "{what} does not validate:\n{}\n{instance:#}",
        errs.join("\n")
    );
}

/// Definitions that stay open whatever they declare: free-form metadata.
const OPEN_DEFS: &[&str] = &["Metadata", "MetadataParam"];

/// Adds `unevaluatedProperties: false` to every object schema that declares `properties`,
/// says nothing about additional properties, and is not a part of an `allOf` (the
/// composing object is closed instead: closing a part would refuse its siblings' keys).
fn close(doc: &mut Value) {
    let mut parts: Vec<String> = Vec::new();
    collect_allof_refs(doc, &mut parts);
    if let Some(defs) = doc.get_mut("$defs").and_then(Value::as_object_mut) {
        for (name, def) in defs.iter_mut() {
            let open = OPEN_DEFS.contains(&name.as_str());
            let part = parts.contains(&format!("#/$defs/{name}"));
            close_schema(def, !(open || part));
        }
    }
}

fn collect_allof_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(items)) = m.get("allOf") {
                for it in items {
                    if let Some(Value::String(r)) = it.get("$ref") {
                        out.push(r.clone());
                    }
                }
            }
            m.values().for_each(|x| collect_allof_refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_allof_refs(x, out)),
        _ => {}
    }
}

/// Closes `schema` itself when `close_here`, then walks its subschemas (only schema
/// positions, so a property *named* `properties` is not mistaken for the keyword).
fn close_schema(schema: &mut Value, close_here: bool) {
    let Value::Object(m) = schema else { return };
    if close_here
        && (m.contains_key("properties") || m.contains_key("allOf"))
        && !m.contains_key("additionalProperties")
        && !m.contains_key("unevaluatedProperties")
    {
        m.insert("unevaluatedProperties".into(), Value::Bool(false));
    }
    walk_subschemas(m);
}

fn walk_subschemas(m: &mut Map<String, Value>) {
    for (k, v) in m.iter_mut() {
        match k.as_str() {
            "properties" | "patternProperties" | "$defs" | "dependentSchemas" => {
                if let Value::Object(children) = v {
                    children.values_mut().for_each(|c| close_schema(c, true));
                }
            }
            "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(items) = v {
                    items.iter_mut().for_each(|c| close_schema(c, true));
                }
            }
            // Parts of a composition stay open; the composing object was closed.
            "allOf" => {
                if let Value::Array(items) = v {
                    items.iter_mut().for_each(|c| close_schema(c, false));
                }
            }
            "items"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "propertyNames"
            | "unevaluatedItems" => close_schema(v, true),
            _ => {}
        }
    }
}
