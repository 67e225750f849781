//! The daemon's service: the composition the API dispatches into (actors, the admission seam
//! and the error codes are re-exported from `actor`, `admission` and `error`). [`Service`] holds one value per workflow ([`Candidates`] and its steps,
//! the governed path's `Claims`, `Proposals`, `Validations` and `Applies`, the runner's
//! `Jobs`); what they share is the [`Context`] (authorization and idempotency bindings are its
//! methods).

use super::Context;
use crate::config::{Permission, Workspace};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use time::OffsetDateTime;

pub use super::actor::{Actor, SystemTask, authenticate};
pub use super::admission::{Admission, AdmissionFn, Admitted, Operation, default_admission};
pub use super::blocking::blocking;
pub use super::error::{Internal, Refusal, ServiceError};

/// The daemon's service: one value per workflow, each holding the context and only the
/// workflows it calls. The API dispatches to the workflow a method names.
pub struct Service {
    pub ctx: Context,
    /// Verifications in the background (candidates' and validations' tests), at most
    /// `max_concurrent_verifications` at once.
    pub background: Arc<super::background::Background>,
    /// Evidence packets: record, show, expiry.
    pub evidence: super::integration::evidence::Evidence,
    /// Candidates: the aggregate (load, compare-and-set save, locks, admission) and its reads.
    pub candidates: Candidates,
    /// Candidate integration's steps, each a type of its own over the candidates: prepare,
    /// assembly and resolve; candidate verification; delivery; deletion and expiry.
    pub assembler: super::integration::prepare::Assembler,
    pub candidate_verifications: super::integration::verify::CandidateVerifications,
    pub deliveries: super::integration::delivery::Deliveries,
    pub lifecycle: super::integration::lifecycle::Lifecycle,
    /// Verification jobs on a revision, submitted over the API (`job.*`).
    pub jobs: super::jobs::Jobs,
    /// Webhook subscriptions and their outbox (`webhook.list`).
    pub webhooks: super::webhooks::Webhooks,
    /// The governed path's workflows.
    pub claims: crate::engine::governed::Claims,
    pub proposals: crate::engine::governed::Proposals,
    pub reviews: crate::engine::governed::reviews::Reviews,
    pub validations: crate::engine::governed::Validations,
    pub applies: crate::engine::governed::Applies,
}

impl Service {
    pub fn new(ctx: Context, admission: AdmissionFn) -> Service {
        let background = Arc::new(super::background::Background::new(ctx.clone()));
        // Every workflow holds the handles; only the background (the runner) the whole context.
        let handles = ctx.handles.clone();
        let proposals = crate::engine::governed::Proposals::new(handles.clone());
        let candidates = Candidates {
            ctx: handles.clone(),
            admission,
            background: background.clone(),
            candidate_locks: Arc::default(),
            read_cache: Arc::default(),
        };
        Service {
            claims: proposals.claims(),
            validations: crate::engine::governed::Validations::new(
                proposals.clone(),
                background.clone(),
            ),
            applies: crate::engine::governed::Applies::new(proposals.clone(), background.clone()),
            reviews: crate::engine::governed::reviews::Reviews::new(proposals.clone()),
            proposals,
            jobs: super::jobs::Jobs::new(handles.clone(), background.clone()),
            webhooks: super::webhooks::Webhooks::new(handles.clone()),
            evidence: super::integration::evidence::Evidence::new(handles.clone()),
            candidates: candidates.clone(),
            assembler: super::integration::prepare::Assembler::new(
                candidates.clone(),
                super::integration::evidence::Evidence::new(handles.clone()),
            ),
            candidate_verifications: super::integration::verify::CandidateVerifications::new(
                candidates.clone(),
                background.clone(),
            ),
            deliveries: super::integration::delivery::Deliveries::new(candidates.clone()),
            lifecycle: super::integration::lifecycle::Lifecycle::new(candidates),
            background,
            ctx,
        }
    }

    /// The configuration, as the API and its pages read it (they change nothing through the
    /// context: every change is a workflow's method).
    pub fn config(&self) -> &crate::config::Config {
        &self.ctx.config
    }

    /// Now, by the context's clock.
    pub fn now(&self) -> OffsetDateTime {
        self.ctx.clock.now()
    }

    /// The attestation signer and the public keys pages and the keys document show.
    pub fn attestor(&self) -> &super::attesting::Attestor {
        &self.ctx.attest
    }

    /// The daemon's metrics registry (the API counts its requests there).
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.ctx.metrics
    }

    /// The metrics page: the registry with the store's and engines' gauges sampled now.
    pub async fn scrape_metrics(&self) -> Result<String, ServiceError> {
        self.ctx.scrape_metrics().await
    }

    /// `actor`'s authorization in `workspace_id` for `perm` (a refusal says why).
    pub fn authorize(
        &self,
        actor: &Actor,
        workspace_id: &str,
        perm: Permission,
    ) -> Result<(), ServiceError> {
        self.ctx.authorize(actor, workspace_id, perm).map(|_| ())
    }

    /// The live feed of a workspace's events (see [`super::event_feed`]).
    pub async fn event_feed(
        &self,
        actor: &Actor,
        workspace_id: &str,
        subject: Option<String>,
        kind: Option<String>,
        after: Option<i64>,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Result<super::event_feed::EventFeed, ServiceError> {
        self.ctx
            .event_feed(actor, workspace_id, subject, kind, after, stopping)
            .await
    }

    /// Whether `actor` may act in `workspace_id` with `perm` (what a page shows or hides).
    pub fn may(&self, actor: &Actor, workspace_id: &str, perm: Permission) -> bool {
        self.ctx.authorize(actor, workspace_id, perm).is_ok()
    }

    /// The answer to send for a successful keyed call (see
    /// [`super::idempotency::Keys::seal`]).
    pub async fn seal(
        &self,
        actor: &Actor,
        method: &str,
        body: super::idempotency::KeyedBody,
        reply: Vec<u8>,
    ) -> Vec<u8> {
        self.ctx.keys.seal(actor, method, body, reply).await
    }

    /// The first asynchronous persistence failure, if there was one.
    pub fn persistence_failure(&self) -> Option<String> {
        self.background.persistence_failure()
    }
}

/// A parsed candidate and the stored version it was parsed from.
pub(crate) type CachedCandidate = (u64, Arc<crate::candidate::Candidate>);

/// Candidates, the aggregate every step of candidate integration works on: loading and
/// compare-and-set saving, per-candidate locks, the admission policy, the parsed-candidate read
/// cache, the owned-evidence check, the reads, and the cancellation of a candidate's running
/// verifications (on the background they run on).
#[derive(Clone)]
pub struct Candidates {
    pub ctx: crate::engine::context::Handles,
    pub admission: AdmissionFn,
    pub(crate) background: Arc<super::background::Background>,
    candidate_locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    /// Parsed candidate records by id, each with the stored version it was parsed from; reads
    /// use an entry only while the store still holds that version.
    pub(crate) read_cache: Arc<Mutex<HashMap<String, CachedCandidate>>>,
}

impl Candidates {
    /// Drops per-candidate locks nobody holds or waits for; returns how many.
    pub fn prune_candidate_locks(&self) -> usize {
        let mut locks = self
            .candidate_locks
            .lock()
            .expect("candidate lock map is never poisoned");
        let before = locks.len();
        // Only the map holds an idle lock; a holder or waiter has its own clone.
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        before - locks.len()
    }

    /// Serializes work on one candidate inside this process (the store's compare-and-set covers
    /// other processes).
    pub fn candidate_lock(&self, candidate_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.candidate_locks
            .lock()
            .expect("candidate lock map is never poisoned")
            .entry(candidate_id.to_string())
            .or_default()
            .clone()
    }

    pub fn admit(&self, a: Admission) -> Result<Admitted, ServiceError> {
        (self.admission)(&a)
    }

    /// Admission of `op` on an existing candidate (loaded by the caller).
    pub fn admit_on(
        &self,
        actor: &Actor,
        op: Operation,
        mutation: bool,
        c: &crate::candidate::Candidate,
    ) -> Result<Admitted, ServiceError> {
        self.admit(Admission {
            operation: op,
            mutation,
            actor,
            workspace_id: &c.workspace_id,
            mission_id: c.mission_id.as_deref(),
            candidate: c,
            new_candidate: false,
            submissions: &c.submissions,
        })
    }
}

/// Authorization and idempotency bindings: what every workflow asks the same way.
impl crate::engine::context::Handles {
    /// The workspace, if the actor may act in it with `perm`. Unknown workspaces and non-members
    /// get the same answer, so membership probing reveals nothing about candidates.
    pub fn authorize(
        &self,
        actor: &Actor,
        workspace_id: &str,
        perm: Permission,
    ) -> Result<&Workspace, ServiceError> {
        self.authorize_with(actor, workspace_id, perm, RUN_PERMISSIONS)
    }

    /// [`Context::authorize`] for submitted jobs: a run may also verify (submit and cancel
    /// jobs) in its own workspace, which is how an orchestrator's agent asks for a check.
    pub fn authorize_job(
        &self,
        actor: &Actor,
        workspace_id: &str,
        perm: Permission,
    ) -> Result<&Workspace, ServiceError> {
        self.authorize_with(actor, workspace_id, perm, RUN_JOB_PERMISSIONS)
    }

    fn authorize_with(
        &self,
        actor: &Actor,
        workspace_id: &str,
        perm: Permission,
        run_may: &[Permission],
    ) -> Result<&Workspace, ServiceError> {
        let denied = || {
            ServiceError::PermissionDenied(format!("not a member of workspace {workspace_id:?}"))
        };
        let ws = self
            .config
            .workspaces
            .get(workspace_id)
            .ok_or_else(denied)?;
        match actor {
            Actor::Member { member_id } => {
                let perms = ws.members.get(member_id).ok_or_else(denied)?;
                if !perms.contains(&perm) {
                    return Err(ServiceError::PermissionDenied(format!(
                        "member {member_id:?} lacks the {:?} permission in workspace {workspace_id:?}",
                        perm.as_str()
                    )));
                }
            }
            Actor::Run {
                workspace_id: run_ws,
                run_id,
            } => {
                if run_ws != workspace_id {
                    return Err(denied());
                }
                // A run may record its own evidence, read its workspace, and claim and propose
                // on the governed path (the run is the agent); nothing else.
                if !run_may.contains(&perm) {
                    return Err(ServiceError::PermissionDenied(format!(
                        "run {run_id:?} cannot use the {:?} permission",
                        perm.as_str()
                    )));
                }
            }
            // Airlock's own passes never go through the API's authorization.
            Actor::System { .. } => {
                return Err(ServiceError::PermissionDenied(
                    "the system actor does not act through the API".into(),
                ));
            }
        }
        Ok(ws)
    }
}

/// What a run token may do in its workspace: record its own evidence, read, and claim and
/// propose on the governed path (the run is the agent).
const RUN_PERMISSIONS: &[Permission] =
    &[Permission::View, Permission::Integrate, Permission::Propose];
/// ... and, for submitted jobs, verify.
const RUN_JOB_PERMISSIONS: &[Permission] = &[
    Permission::View,
    Permission::Integrate,
    Permission::Propose,
    Permission::Verify,
];

/// Parses an RFC 3339 time written by Airlock.
pub fn parse_time(s: &str) -> Option<OffsetDateTime> {
    crate::ids::parse_rfc3339(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use sha2::{Digest, Sha256};

    fn config() -> Config {
        let h = |s: &str| hex::encode(Sha256::digest(s.as_bytes()));
        Config::parse(&format!(
            "[workspaces.ws]\nrepo = \"/r\"\nmembers = {{ alice = [\"view\"] }}\n\
             [[tokens]]\nsha256 = \"{}\"\nmember_id = \"alice\"\n\
             [[tokens]]\nsha256 = \"{}\"\nrun_id = \"run_1\"\nworkspace_id = \"ws\"\n",
            h("alice-secret"),
            h("run-secret")
        ))
        .unwrap()
    }

    #[test]
    fn tokens_resolve_to_actors() {
        let c = config();
        assert_eq!(
            authenticate(&c, "alice-secret"),
            Some(Actor::Member {
                member_id: "alice".into()
            })
        );
        assert_eq!(
            authenticate(&c, "run-secret"),
            Some(Actor::Run {
                run_id: "run_1".into(),
                workspace_id: "ws".into()
            })
        );
        assert_eq!(authenticate(&c, "alice-secreT"), None);
        assert_eq!(authenticate(&c, ""), None);
    }

    #[test]
    fn the_system_actor_can_never_be_a_configured_member() {
        let system = Actor::System {
            task: SystemTask::Recovery,
        };
        assert_eq!(system.key(), "system:recovery");
        // The old stand-in was an ordinary member id anyone could configure.
        assert!(crate::config::is_identifier("airlock-recovery"));
        // A member id that would produce a system key is refused by the config.
        for id in ["system:recovery", "recovery:x"] {
            assert!(!crate::config::is_identifier(id), "{id}");
        }
        let member = Actor::Member {
            member_id: "system".into(),
        };
        assert_ne!(member.key(), system.key());
    }

    #[test]
    fn default_admission_refuses_runs_and_missions() {
        let adm = default_admission();
        let run = Actor::Run {
            run_id: "r".into(),
            workspace_id: "w".into(),
        };
        let member = Actor::Member {
            member_id: "m".into(),
        };
        let c: crate::candidate::Candidate = serde_json::from_value(serde_json::json!({
            "candidate_id": "cand_x", "workspace_id": "w", "mission_id": null,
            "mission_accepted_set_version": null, "submissions": [], "required_sources": ["git"],
            "inputs": [], "target_ref": "refs/heads/main", "expected_target_revision": "0".repeat(40),
            "candidate_revision": null, "state": "preparing", "conflicts": null,
            "applied_inputs": 0, "verifications": [], "delivery_request": null,
            "delivery_receipt": null, "created_at": "2026-01-01T00:00:00Z",
            "expires_at": "2026-01-02T00:00:00Z", "error": null, "version": 1, "mutations": []
        }))
        .unwrap();
        let a = |actor, mutation, mission| Admission {
            operation: Operation::Prepare,
            mutation,
            actor,
            workspace_id: "w",
            mission_id: mission,
            candidate: &c,
            new_candidate: true,
            submissions: &[],
        };
        assert!(matches!(
            adm(&a(&run, true, None)),
            Err(ServiceError::PermissionDenied(_))
        ));
        assert!(adm(&a(&run, false, None)).is_ok());
        assert!(adm(&a(&member, true, None)).is_ok());
        assert!(adm(&a(&member, true, Some(""))).is_ok());
        assert!(matches!(
            adm(&a(&member, true, Some("m1"))),
            Err(ServiceError::FailedPrecondition(_))
        ));
    }

    #[test]
    fn an_admission_is_released_when_the_action_ends() {
        let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = released.clone();
        let held =
            Admitted::with_release(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
        assert!(!released.load(std::sync::atomic::Ordering::SeqCst));
        drop(held);
        assert!(released.load(std::sync::atomic::Ordering::SeqCst));
    }
}
