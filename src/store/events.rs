//! The event log's rows: one written in the transaction of every change it records (a leaf
//! every store module writes through).

use rusqlite::params;

#[allow(clippy::too_many_arguments)] // one column each; a struct would only rename them
pub(super) fn event(
    tx: &rusqlite::Transaction,
    workspace_id: &str,
    subject: &str,
    kind: &str,
    actor: &str,
    prior: Option<&str>,
    new: Option<&str>,
    payload: &str,
    at: &str,
) -> rusqlite::Result<()> {
    // A kind missing from the one list could never be filtered or subscribed to.
    debug_assert!(
        crate::domain::event_kind::is_known(kind),
        "event kind {kind} is not in domain::event_kind::EVENT_KINDS"
    );
    tx.execute(
        "INSERT INTO events (workspace_id, subject, kind, actor, prior, new, payload, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![workspace_id, subject, kind, actor, prior, new, payload, at],
    )?;
    Ok(())
}
