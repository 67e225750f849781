//! Every reply a test receives is checked against the daemon's own OpenAPI document: a 200
//! against the method's reply schema, anything else against the error envelope with one of the
//! documented statuses. The whole suite is so a conformance test of `/openapi.json`.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| airlock::api::openapi::document(&airlock::config::Config::builtin()))
}

/// A validator of the schema at `pointer` in the document (its `$ref`s resolve in it).
fn validator(pointer: &str) -> &'static jsonschema::Validator {
    static CACHE: OnceLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
        OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    if let Some(v) = cache.get(pointer) {
        return v;
    }
    let mut root = document().clone();
    let root_obj = root.as_object_mut().unwrap();
    root_obj.retain(|k, _| k == "components" || k == "paths");
    root_obj.insert("$ref".into(), json!(format!("#{pointer}")));
    let v: &'static jsonschema::Validator = Box::leak(Box::new(
        jsonschema::validator_for(&root)
            .unwrap_or_else(|e| panic!("the schema at {pointer} does not compile: {e}")),
    ));
    cache.insert(pointer.to_string(), v);
    v
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Panics when `v` is not what the document says `method` answers with `status`.
pub fn check_reply(method: &str, status: u16, v: &Value) {
    let doc = document();
    let op = format!("/paths/{}/post", escape(&format!("/api/v1/{method}")));
    let pointer = if status == 200 {
        assert!(
            doc.pointer(&op).is_some(),
            "{method} answered 200 but /openapi.json does not document it"
        );
        format!("{op}/responses/200/content/application~1json/schema")
    } else {
        assert!(
            airlock::api::openapi::ERRORS
                .iter()
                .any(|(s, code, _)| *s == status && v["error"]["code"] == *code),
            "{method} answered {status} {v}: not a documented status and code"
        );
        "/components/schemas/Error".to_string()
    };
    let errors: Vec<String> = validator(&pointer)
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} answered {status} with a body /openapi.json does not describe:\n{}\n{v}",
        errors.join("\n")
    );
}
