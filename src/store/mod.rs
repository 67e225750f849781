//! SQLite state: the only module that names rusqlite.
//!
//! One connection on one dedicated thread; callers hold an async [`Store`] handle. WAL mode,
//! `synchronous=FULL` (every commit here acknowledges or gates something), foreign keys on.
//! Every state change is one transaction; transitions are compare-and-set with the affected row
//! count checked, so a lost race is a [`StoreError::Conflict`], never a silent success.

pub mod applies;
mod candidates;
pub mod claim_ends;
pub mod claims;
pub mod contentions;
mod events;
mod fences;
pub mod gauges;
pub mod jobs;
pub mod lists;
mod migrations;
mod pending;
pub mod proposals;
pub mod replies;
pub mod reviews;
pub mod snapshot;
pub mod webhooks;

pub use candidates::{Binding, Inserted, StoredCandidate};

use crate::verification::{Status, Verification};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

pub use migrations::MIGRATIONS;
pub use pending::Pending;

/// One row of the durable event log, written in the transaction of the change it records.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub workspace_id: String,
    pub subject: String,
    pub kind: String,
    pub actor: String,
    pub prior: Option<String>,
    pub new: Option<String>,
    pub payload: String,
    pub at: String,
}

/// `candidate.verification_requested` (a `running` record) or `.verification_settled`.
fn verification_event(
    tx: &rusqlite::Transaction,
    workspace_id: &str,
    candidate_id: &str,
    v: &Verification,
    actor: &str,
) -> rusqlite::Result<()> {
    let settled = v.status != Status::Running;
    NewEvent {
        workspace_id: workspace_id.to_string(),
        subject: candidate_id.to_string(),
        kind: if settled {
            "candidate.verification_settled"
        } else {
            "candidate.verification_requested"
        }
        .to_string(),
        actor: actor.to_string(),
        prior: settled.then(|| Status::Running.as_str().to_string()),
        new: Some(v.status.as_str().to_string()),
        payload: serde_json::json!({
            "candidate_id": candidate_id,
            "verification_id": v.verification_id,
            "status": v.status.as_str(),
            "candidate_revision": v.candidate_revision,
        })
        .to_string(),
        at: v
            .finished_at
            .clone()
            .unwrap_or_else(|| v.created_at.clone()),
    }
    .insert(tx)
}

impl NewEvent {
    pub(crate) fn insert(&self, tx: &rusqlite::Transaction) -> rusqlite::Result<()> {
        events::event(
            tx,
            &self.workspace_id,
            &self.subject,
            &self.kind,
            &self.actor,
            self.prior.as_deref(),
            self.new.as_deref(),
            &self.payload,
            &self.at,
        )
    }
}

/// A compare-and-set update's check: exactly one row changed, else `conflict` naming `what`
/// (the transaction is then rolled back, nothing of it kept).
pub(crate) fn changed_one(n: usize, what: impl FnOnce() -> String) -> Result<(), StoreError> {
    if n == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict(format!(
            "{} changed meanwhile",
            what()
        )))
    }
}

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "database {path} has schema version {found}, newer than this binary knows ({known}); refusing to open it with an older airlock"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("migration {version} ({name}) failed: {source}")]
    Migration {
        version: i64,
        name: &'static str,
        source: rusqlite::Error,
    },
    #[error("conflict: {0}")]
    Conflict(String),
    /// The change is refused by what the database holds now: an open apply's fence, or a gate
    /// that no longer holds (the message names which).
    #[error("{message}")]
    Precondition {
        /// The request field the refusal is about, when it names one.
        field: Option<&'static str>,
        message: String,
    },
    /// The row's state does not allow the change (decided by the domain's state machine).
    #[error(transparent)]
    IllegalTransition(#[from] crate::domain::IllegalTransition),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("corrupt record {id}: {message}")]
    Corrupt { id: String, message: String },
    #[error("the database thread is gone")]
    Closed,
}

impl StoreError {
    /// A change refused by an open apply's fence (or another state the message names).
    pub fn fenced(message: String) -> StoreError {
        StoreError::Precondition {
            field: None,
            message,
        }
    }
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// The meta key `airlock backup` sets in the copy it makes (to the instance id copied): the
/// copy's first open takes a new instance id.
pub const COPIED_FROM_KEY: &str = "instance_copied_from";

/// Where a data dir's database is opened: the directory's device, inode and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    pub dev: u64,
    pub ino: u64,
    pub path: String,
}

impl std::fmt::Display for Home {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} {}", self.dev, self.ino, self.path)
    }
}

impl Home {
    fn parse(text: &str) -> Option<Home> {
        let (ids, path) = text.split_once(' ')?;
        let (dev, ino) = ids.split_once(':')?;
        Some(Home {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
            path: path.to_string(),
        })
    }
}

/// A data dir's instance (see [`Store::instance`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    /// The ids this data dir had before it was copied, oldest first.
    pub previous: Vec<String>,
    /// This open gave a copy its new id.
    pub new_copy: bool,
}

/// Async handle to the database thread. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    tx: mpsc::Sender<Job>,
    /// Moves after every job that changed the database (its count of writing jobs): what
    /// event streams wait on instead of polling.
    changed: tokio::sync::watch::Receiver<u64>,
}

/// Opens a connection with Airlock's settings and brings the schema up to date.
pub fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let open_err = |source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    };
    let conn = Connection::open(path).map_err(open_err)?;
    conn.busy_timeout(crate::limits::SQLITE_BUSY_TIMEOUT)
        .map_err(open_err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(open_err)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(open_err)?;
    let mut conn = conn;
    migrations::migrate(&mut conn, path)?;
    Ok(conn)
}

impl Store {
    /// Opens (creating if needed) the database at `path` and starts its thread.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let mut conn = open_connection(path)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let (notify, changed) = tokio::sync::watch::channel(0u64);
        std::thread::Builder::new()
            .name("airlock-store".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    let before = conn.total_changes();
                    job(&mut conn);
                    if conn.total_changes() != before {
                        notify.send_modify(|n| *n += 1);
                    }
                }
            })
            .map_err(|e| StoreError::Open {
                path: path.to_path_buf(),
                source: rusqlite::Error::ToSqlConversionFailure(Box::new(e)),
            })?;
        Ok(Store { tx, changed })
    }

    /// A receiver that sees a new value after every job that wrote to the database.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.clone()
    }

    /// Runs `f` on the database thread.
    pub async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    {
        self.submit(f)?.answer().await
    }

    /// Moves every committed page from the WAL into `airlock.db` and truncates the WAL (at a
    /// clean shutdown, so the database file alone holds the data). Returns whether the
    /// checkpoint completed (false: another connection was reading; the WAL stays valid).
    pub async fn checkpoint(&self) -> Result<bool, StoreError> {
        self.call(|c| {
            let busy: i64 = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
            Ok(busy == 0)
        })
        .await
    }

    /// This data dir's instance: its id (created on first open) and the ids it had before.
    ///
    /// `home` names the directory the database is opened in (its device, inode and path).
    /// The id follows its directory: a data dir moved (same inode) or restored in place (same
    /// path) keeps it; a copy elsewhere (another path and another inode), and any copy
    /// `airlock backup` made ([`COPIED_FROM_KEY`]), takes a new one on its first open, so it
    /// can never take the original's containers for its own while the original runs.
    pub async fn instance(&self, home: Home) -> Result<Instance, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let get = |key: &str| -> Result<Option<String>, rusqlite::Error> {
                tx.query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                    r.get(0)
                })
                .optional()
            };
            let existing = get("instance_id")?;
            let recorded = get("instance_home")?.and_then(|h| Home::parse(&h));
            let copied_from = get(COPIED_FROM_KEY)?;
            let mut previous: Vec<String> = get("previous_instance_ids")?
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            let is_copy = existing.is_some()
                && (copied_from.is_some()
                    || recorded.as_ref().is_some_and(|r| {
                        r.path != home.path && (r.dev, r.ino) != (home.dev, home.ino)
                    }));
            let id = match existing {
                Some(id) if !is_copy => id,
                old => {
                    previous.extend(old);
                    crate::ids::new_creation_key()
                }
            };
            let set = |key: &str, value: &str| {
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES (?1, ?2) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    params![key, value],
                )
            };
            set("instance_id", &id)?;
            set("instance_home", &home.to_string())?;
            set(
                "previous_instance_ids",
                &serde_json::to_string(&previous).expect("a list of strings serializes"),
            )?;
            tx.execute("DELETE FROM meta WHERE key = ?1", params![COPIED_FROM_KEY])?;
            tx.commit()?;
            Ok(Instance {
                id,
                previous,
                new_copy: is_copy,
            })
        })
        .await
    }

    /// When recovery last reached engine `name` (RFC 3339), if ever.
    pub async fn engine_seen(&self, name: &str) -> Result<Option<String>, StoreError> {
        let key = format!("engine_seen.{name}");
        self.call(move |c| {
            Ok(
                c.query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                    r.get(0)
                })
                .optional()?,
            )
        })
        .await
    }

    /// Records that recovery reached engine `name` at `at` (RFC 3339).
    pub async fn set_engine_seen(&self, name: &str, at: String) -> Result<(), StoreError> {
        let key = format!("engine_seen.{name}");
        self.call(move |c| {
            c.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![key, at],
            )?;
            Ok(())
        })
        .await
    }

    /// Inserts a new `running` verification with its spec provenance. Committed (FULL) before
    /// the call returns, so it precedes any checkout or container.
    pub async fn insert_running(
        &self,
        v: &Verification,
        spec_json: String,
    ) -> Result<(), StoreError> {
        self.insert_running_linked(v, spec_json, None).await
    }

    /// [`Store::insert_running`] for a candidate's verification: the row, its candidate id and
    /// the idempotency binding commit together (queued until a worker starts it).
    pub async fn insert_running_linked(
        &self,
        v: &Verification,
        spec_json: String,
        link: Option<(String, Binding)>,
    ) -> Result<(), StoreError> {
        if v.status != Status::Running {
            return Err(StoreError::Conflict(format!(
                "insert of {} with status {}",
                v.verification_id,
                v.status.as_str()
            )));
        }
        let v = v.clone();
        let record = serde_json::to_string(&v).expect("a verification serializes");
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let (candidate_id, queued) = match &link {
                Some((cid, _)) => (Some(cid.clone()), 1),
                None => (None, 0),
            };
            let n = tx.execute(
                "INSERT INTO verifications (verification_id, creation_key, status, created_at, record, spec, candidate_id, queued)
                 VALUES (?1, ?2, ?8, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
                params![v.verification_id, v.creation_key, v.created_at, record, spec_json, candidate_id, queued, Status::Running.as_str()],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!(
                    "verification {} or creation key {} already exists",
                    v.verification_id, v.creation_key
                )));
            }
            if let Some((cid, b)) = &link {
                candidates::insert_binding_checked(&tx, b)?;
                verification_event(&tx, &b.workspace_id, cid, &v, &b.actor_key)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Marks a queued verification as started by its worker at `at` (and its job, if it is
    /// one, in the same transaction: a restart resumes only jobs never started).
    pub async fn mark_started(&self, verification_id: &str, at: String) -> Result<(), StoreError> {
        let id = verification_id.to_string();
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "UPDATE verifications SET queued = 0 WHERE verification_id = ?1 AND status = ?2",
                params![id, Status::Running.as_str()],
            )?;
            let started: Option<String> = tx
                .query_row(
                    "UPDATE jobs SET started_at = ?2 WHERE verification_id = ?1 AND started_at IS NULL
                     RETURNING job_id",
                    params![id, at],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(job_id) = started {
                let rec: String = tx.query_row(
                    "SELECT record FROM verifications WHERE verification_id = ?1",
                    params![id],
                    |r| r.get(0),
                )?;
                let v = decode(&id, &rec)?;
                jobs::job_event(
                    &tx,
                    &job_id,
                    crate::domain::event_kind::JOB_STARTED,
                    "system:airlock",
                    Some("queued"),
                    &v,
                    &at,
                )?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Marks a running verification as waiting for an engine, and why none takes it now.
    pub async fn mark_waiting(
        &self,
        verification_id: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        let (id, reason) = (verification_id.to_string(), reason.to_string());
        self.call(move |c| {
            c.execute(
                "UPDATE verifications SET queued = 1, queued_reason = ?3
                 WHERE verification_id = ?1 AND status = ?2",
                params![id, Status::Running.as_str(), reason],
            )?;
            Ok(())
        })
        .await
    }

    /// Records the engine a running verification was placed on (recovery then looks for its
    /// container there first) and ends any wait.
    pub async fn mark_placed(&self, verification_id: &str, engine: &str) -> Result<(), StoreError> {
        let (id, engine) = (verification_id.to_string(), engine.to_string());
        self.call(move |c| {
            c.execute(
                "UPDATE verifications SET queued = 0, queued_reason = NULL, engine = ?3
                 WHERE verification_id = ?1 AND status = ?2",
                params![id, Status::Running.as_str(), engine],
            )?;
            Ok(())
        })
        .await
    }

    /// A candidate's verifications, oldest first, with their queued flag.
    pub async fn verifications_of(
        &self,
        candidate_id: &str,
    ) -> Result<Vec<(Verification, bool)>, StoreError> {
        let cid = candidate_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT verification_id, record, queued, queued_reason, engine FROM verifications
                 WHERE candidate_id = ?1 ORDER BY created_at, rowid",
            )?;
            let rows = st.query_map(params![cid], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (id, rec, queued, reason, engine) = row?;
                let mut v = decode(&id, &rec)?;
                if v.status == Status::Running {
                    v.engine = v.engine.or(engine);
                    v.queued_reason = reason.filter(|_| queued != 0);
                }
                out.push((v, queued != 0));
            }
            Ok(out)
        })
        .await
    }

    /// Settles a `running` verification to its terminal record. Compare-and-set from `running`.
    pub async fn settle(&self, v: &Verification) -> Result<(), StoreError> {
        if !v.status.is_terminal() {
            return Err(StoreError::Conflict(format!(
                "settle of {} to non-terminal status {}",
                v.verification_id,
                v.status.as_str()
            )));
        }
        self.transition(v, Status::Running, v.status, None).await
    }

    /// [`Store::settle`] with where the run's time went (shown by a job), in the same update.
    pub async fn settle_with_phases(
        &self,
        v: &Verification,
        phases: Option<crate::verification::JobPhases>,
    ) -> Result<(), StoreError> {
        if !v.status.is_terminal() {
            return Err(StoreError::Conflict(format!(
                "settle of {} to non-terminal status {}",
                v.verification_id,
                v.status.as_str()
            )));
        }
        let phases = phases.map(|p| serde_json::to_string(&p).expect("phases serialize"));
        self.transition(v, Status::Running, v.status, phases).await
    }

    async fn transition(
        &self,
        v: &Verification,
        from: Status,
        to: Status,
        phases: Option<String>,
    ) -> Result<(), StoreError> {
        let id = v.verification_id.clone();
        let record = serde_json::to_string(v).expect("a verification serializes");
        let v = v.clone();
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.execute(
                "UPDATE verifications SET status = ?1, record = ?2, phases = COALESCE(?5, phases)
                 WHERE verification_id = ?3 AND status = ?4",
                params![to.as_str(), record, id, from.as_str(), phases],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!(
                    "verification {id} is not {} (lost race or unknown id)",
                    from.as_str()
                )));
            }
            // A candidate's verification settling is in the candidate's event log.
            let owner: Option<(String, String)> = tx
                .query_row(
                    "SELECT c.candidate_id, c.workspace_id FROM verifications v
                     JOIN candidates c ON c.candidate_id = v.candidate_id
                     WHERE v.verification_id = ?1",
                    params![id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((cid, ws)) = owner {
                verification_event(&tx, &ws, &cid, &v, "system:airlock")?;
            }
            // So is a job's.
            let job: Option<(String, Option<String>)> = tx
                .query_row(
                    "SELECT job_id, started_at FROM jobs WHERE verification_id = ?1",
                    params![id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((job_id, started)) = job
                && to.is_terminal()
            {
                use crate::domain::event_kind::{JOB_CANCELLED, JOB_SETTLED};
                let prior = if started.is_some() {
                    "running"
                } else {
                    "queued"
                };
                let at = v.finished_at.clone().unwrap_or_default();
                let system = "system:airlock";
                jobs::job_event(&tx, &job_id, JOB_SETTLED, system, Some(prior), &v, &at)?;
                if to == Status::Cancelled {
                    jobs::job_event(&tx, &job_id, JOB_CANCELLED, system, Some(prior), &v, &at)?;
                }
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// One verification by id.
    pub async fn get(&self, id: &str) -> Result<Option<Verification>, StoreError> {
        let id = id.to_string();
        self.call(move |c| {
            let rec: Option<String> = c
                .query_row(
                    "SELECT record FROM verifications WHERE verification_id = ?1",
                    params![id],
                    |r| r.get(0),
                )
                .optional()?;
            rec.map(|r| decode(&id, &r)).transpose()
        })
        .await
    }

    /// Verifications newest first, optionally by status, at most `limit`.
    pub async fn list(
        &self,
        status: Option<Status>,
        limit: u32,
    ) -> Result<Vec<Verification>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare(
                "SELECT verification_id, record, engine FROM verifications
                 WHERE (?1 IS NULL OR status = ?1)
                 ORDER BY created_at DESC, rowid DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![status.map(Status::as_str), limit], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (id, rec, engine) = row?;
                let mut v = decode(&id, &rec)?;
                // A running row's record predates its placement; the column says where it went.
                if v.status == Status::Running {
                    v.engine = v.engine.or(engine);
                }
                out.push(v);
            }
            Ok(out)
        })
        .await
    }

    /// Every `running` verification (unbounded: recovery must see them all).
    /// Running verifications recovery judges: every one but a job never started (nothing of
    /// it ran, so a restart resumes it rather than recovery settling it).
    pub async fn running(&self) -> Result<Vec<Verification>, StoreError> {
        let unstarted: std::collections::HashSet<String> = self
            .unstarted_jobs()
            .await?
            .into_iter()
            .map(|(j, _)| j.verification_id)
            .collect();
        let mut all = self.list(Some(Status::Running), u32::MAX).await?;
        all.retain(|v| !unstarted.contains(&v.verification_id));
        Ok(all)
    }

    /// Ids of every settled verification of a candidate (none is `running` once the candidate's
    /// verifications were cancelled).
    pub async fn verifications_of_candidate(
        &self,
        candidate_id: &str,
    ) -> Result<Vec<String>, StoreError> {
        let cid = candidate_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT verification_id FROM verifications WHERE candidate_id = ?1 AND status != ?2",
            )?;
            let ids = st
                .query_map(params![cid, Status::Running.as_str()], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ids)
        })
        .await
    }

    /// Ids of settled one-shot verifications (no candidate) created before `before`, at most
    /// `limit`, oldest first.
    pub async fn runs_created_before(
        &self,
        before: String,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT verification_id FROM verifications
                 WHERE candidate_id IS NULL AND status != ?3 AND created_at < ?1
                 ORDER BY created_at LIMIT ?2",
            )?;
            let ids = st
                .query_map(params![before, limit, Status::Running.as_str()], |r| {
                    r.get::<_, String>(0)
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ids)
        })
        .await
    }

    /// Deletes settled verification rows, in one transaction; a `running` row is never
    /// deleted. Returns how many were deleted.
    pub async fn delete_settled(&self, ids: Vec<String>) -> Result<usize, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let mut n = 0;
            for id in &ids {
                let gone = tx.execute(
                    "DELETE FROM verifications WHERE verification_id = ?1 AND status != ?2",
                    params![id, Status::Running.as_str()],
                )?;
                if gone == 1 {
                    tx.execute("DELETE FROM jobs WHERE verification_id = ?1", params![id])?;
                }
                n += gone;
            }
            tx.commit()?;
            Ok(n)
        })
        .await
    }

    /// Status of the verification with `creation_key`, if any.
    pub async fn status_by_creation_key(&self, key: &str) -> Result<Option<Status>, StoreError> {
        let key = key.to_string();
        self.call(move |c| {
            let s: Option<String> = c
                .query_row(
                    "SELECT status FROM verifications WHERE creation_key = ?1",
                    params![key],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(s.and_then(|s| Status::parse(&s)))
        })
        .await
    }
}

fn decode(id: &str, rec: &str) -> Result<Verification, StoreError> {
    serde_json::from_str(rec).map_err(|e| StoreError::Corrupt {
        id: id.to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod fence_tests;
#[cfg(test)]
pub(crate) mod tests;
