//! The API reference's examples are right: every method of the registry has a section in
//! `docs/api.md` with a request and a reply, the request is one `/openapi.json` accepts for that
//! method and the reply one it documents for a success, so an example cannot drift from the API.

use crate::support::markdown::{bodies, document};
use crate::support::schema::{check_reply, check_request};

#[test]
fn every_method_has_a_request_and_a_reply_example_the_schemas_accept() {
    let reference = document("docs/api.md");
    let mut sections = reference.split("\n### `").skip(1);
    let mut seen = vec![];
    for section in sections.by_ref() {
        let (name, text) = section.split_once("`\n").expect("a method heading");
        let text = text.split("\n## ").next().unwrap();
        let examples = bodies(text, "json");
        assert_eq!(examples.len(), 2, "{name}: a request and a reply");
        let request: serde_json::Value = serde_json::from_str(&examples[0])
            .unwrap_or_else(|e| panic!("{name}: the request is not JSON: {e}"));
        let reply: serde_json::Value = serde_json::from_str(&examples[1])
            .unwrap_or_else(|e| panic!("{name}: the reply is not JSON: {e}"));
        check_request(name, &request);
        check_reply(name, 200, &reply);
        seen.push(name.to_string());
    }
    for m in airlock::api::methods::METHODS {
        assert!(seen.iter().any(|s| s == m.name), "{}: no example", m.name);
    }
    assert_eq!(seen.len(), airlock::api::methods::METHODS.len(), "{seen:?}");
}
