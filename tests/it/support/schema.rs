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

/// With `AIRLOCK_API_EXAMPLES=<dir>` (`scripts/api-reference.sh` sets it), the first successful
/// call of each method a test makes is kept as `<dir>/<method>.json` (`{request, reply}`), and
/// the OpenAPI document as `<dir>/openapi.json`: the API reference's examples are real calls.
pub fn keep_example(method: &str, request: &Value, reply: &Value) {
    let Some(dir) = std::env::var_os("AIRLOCK_API_EXAMPLES") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let doc = dir.join("openapi.json");
    if !doc.exists() {
        std::fs::write(&doc, serde_json::to_vec_pretty(document()).unwrap()).unwrap();
    }
    let example = json!({"request": request, "reply": reply});
    // The first writer wins; a later call of the same method leaves the file alone.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join(format!("{method}.json")))
    {
        use std::io::Write;
        f.write_all(&serde_json::to_vec_pretty(&example).unwrap())
            .unwrap();
    }
}

/// Panics when `v` is not a request body the document accepts for `method`: its fields, types,
/// bounds and required fields. Patterns are not held against it: where the server's rule is
/// intricate the document states a conservative subset (a path with a dot is a real path), so a
/// real request may be outside a pattern and still right.
pub fn check_request(method: &str, v: &Value) {
    let op = format!("/paths/{}/post", escape(&format!("/api/v1/{method}")));
    let pointer = format!("{op}/requestBody/content/application~1json/schema");
    assert!(
        document().pointer(&pointer).is_some(),
        "{method}: /openapi.json has no request schema at {pointer}"
    );
    let errors: Vec<String> = validator(&pointer)
        .iter_errors(v)
        .filter(|e| {
            !matches!(
                e.kind(),
                jsonschema::error::ValidationErrorKind::Pattern { .. }
            )
        })
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method}: a request /openapi.json refuses:\n{}\n{v}",
        errors.join("\n")
    );
}
