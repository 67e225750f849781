//! The id of the HTTP request a piece of work serves, for the records that name it
//! (transaction phases). The API sets it for the duration of one call with [`scope`]; work
//! outside a request (recovery, maintenance) has none. A tokio task-local, so it follows the
//! call's future and nothing else: no global state.

use std::future::Future;

tokio::task_local! {
    static REQUEST_ID: Option<String>;
}

/// Runs `f` with `id` as the current request id.
pub async fn scope<F: Future>(id: Option<String>, f: F) -> F::Output {
    REQUEST_ID.scope(id, f).await
}

/// The current request id, if the work serves a request.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(|id| id.clone()).ok().flatten()
}

/// `detail` (a JSON object) with `request_id` added when there is one.
pub fn stamp(detail: &str) -> String {
    let Some(id) = current() else {
        return detail.to_string();
    };
    match serde_json::from_str::<serde_json::Value>(detail) {
        Ok(serde_json::Value::Object(mut m)) => {
            m.insert("request_id".into(), serde_json::Value::String(id));
            serde_json::Value::Object(m).to_string()
        }
        _ => detail.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_id_stamps_details_only_inside_its_scope() {
        assert_eq!(stamp(r#"{"a":1}"#), r#"{"a":1}"#);
        let inside = scope(Some("req_1".into()), async { stamp(r#"{"a":1}"#) }).await;
        let v: serde_json::Value = serde_json::from_str(&inside).unwrap();
        assert_eq!(v["request_id"], "req_1");
        assert_eq!(v["a"], 1);
        assert_eq!(current(), None);
    }
}
