//! Prometheus metrics (`GET /metrics`, OpenMetrics 1.0 text served as
//! [`CONTENT_TYPE`]), on an explicit registry owned by the daemon's [`crate::engine::Context`]:
//! no global state, so tests and embedders get their own.
//!
//! Every label value known in advance (recovery kinds, the configured profiles' statuses, the
//! configured engines) is created at zero when the daemon starts, so each documented family has
//! samples from the first scrape and `rate()` sees the first increment.
//!
//! Event metrics are recorded where the event happens (the runner, the worker pool, recovery,
//! the HTTP layer); state gauges (candidates, proposals and transactions by state, claims
//! active, contentions open) are read from SQLite at each scrape, so they are never stale.
//! Every label takes a bounded set of values: statuses and states from their enums, profiles
//! from the config, HTTP methods from the method registry (anything else is `unknown`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Mutex;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EngineLabel {
    pub engine: String,
}

/// One engine's state at a scrape, as the pool reports it (metrics know no pool).
#[derive(Debug, Clone)]
pub struct EngineSample<'a> {
    pub name: &'a str,
    pub running: usize,
    /// It takes jobs (no down reason).
    pub up: bool,
    pub failures: u64,
    /// Images whose id there differs from this machine's.
    pub image_mismatches: usize,
    /// The isolation levels (OCI runtimes) it offers, as it last said; `None` until it did.
    pub runtimes: Option<Vec<&'static str>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EngineRuntime {
    pub engine: String,
    pub runtime: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EngineStatus {
    pub engine: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileStatus {
    pub profile: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabel {
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// The phases of a verification, in order, as `airlock_verification_phase_seconds` labels
/// them: the record's `phases` (waiting for an engine to checking the sources), then writing
/// the recovery artifact and settling the row.
pub const VERIFICATION_PHASES: [&str; 9] = [
    "wait_for_engine",
    "stage",
    "create",
    "start",
    "run",
    "destroy",
    "check",
    "artifact",
    "settle",
];

/// How a job's tree was found: in the warm tree cache, filled into it, or staged in full.
pub const TREE_CACHE_RESULTS: [&str; 3] = ["hit", "miss", "bypass"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabel {
    pub method: String,
}

type Hist<S> = Family<S, Histogram, fn() -> Histogram>;

/// Seconds, 1 ms to about 30 min.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 22))
}

/// Short durations (fsync, artifact writes): 50 µs to about 1.6 s.
fn short_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// The content type of [`Metrics::encode`]'s body: the encoder writes OpenMetrics (`# EOF`,
/// counter families whose samples end in `_total`), which Prometheus' classic text parser
/// would misread.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The kinds `airlock_recovery_actions_total` counts, besides `transaction_<state>` for each
/// state recovery settles an apply in ([`RECOVERED_TX_STATES`]).
pub const RECOVERY_KINDS: [&str; 8] = [
    "restored_from_artifact",
    "marked_error",
    "quarantined",
    "container_destroyed",
    "checkout_removed",
    "temp_file_removed",
    "lock_file_removed",
    "result_expired",
];

/// The kinds `airlock_artifact_write_seconds` times.
pub const ARTIFACT_KINDS: [&str; 1] = ["verification"];

/// The HTTP labels created at zero (code 200): the probes and the scrape, which every daemon
/// answers; the API methods' samples appear with their first request.
pub const PROBE_LABELS: [&str; 3] = ["healthz", "readyz", "metrics"];

/// The states apply recovery can leave a transaction in.
pub const RECOVERED_TX_STATES: [crate::domain::transaction::TxState; 4] = {
    use crate::domain::transaction::TxState;
    [
        TxState::Applied,
        TxState::Cancelled,
        TxState::Failed,
        TxState::NeedsAttention,
    ]
};

impl Metrics {
    /// Counts how a job's tree was made and the cache's figures after it.
    pub fn record_warmth(&self, w: &crate::workspace::Warmth) {
        let result = match &w.lookup {
            Ok(l) => l.as_str(),
            Err(_) => "bypass",
        };
        self.tree_cache_lookups
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
        if let Some(c) = &w.cache {
            self.tree_cache_bytes
                .set(i64::try_from(c.bytes).unwrap_or(i64::MAX));
            self.tree_cache_entries
                .set(i64::try_from(c.entries).unwrap_or(i64::MAX));
            let ev = &self.tree_cache_evictions;
            ev.inc_by(c.evicted.saturating_sub(ev.get()));
            let dis = &self.tree_cache_discarded;
            dis.inc_by(c.discarded.saturating_sub(dis.get()));
        }
    }

    /// One phase's duration.
    pub fn observe_phase(&self, phase: &str, us: u64) {
        self.phase_seconds
            .get_or_create(&PhaseLabel {
                phase: phase.to_string(),
            })
            .observe(us as f64 / 1e6);
    }
}

/// Every metric of one daemon.
pub struct Metrics {
    registry: Mutex<Registry>,
    pub verifications: Family<ProfileStatus, Counter>,
    pub verification_seconds: Hist<ProfileLabel>,
    pub queue_wait_seconds: Histogram,
    pub queue_depth: Gauge,
    pub live_containers: Gauge,
    pub jobs_unplaced: Gauge,
    pub engine_verifications: Family<EngineStatus, Counter>,
    pub engine_running: Family<EngineLabel, Gauge>,
    pub engine_up: Family<EngineLabel, Gauge>,
    pub engine_failures: Family<EngineLabel, Counter>,
    pub engine_image_mismatches: Family<EngineLabel, Gauge>,
    pub engine_runtime: Family<EngineRuntime, Gauge>,
    pub engine_upload_bytes: Family<EngineLabel, Counter>,
    pub engine_upload_seconds: Hist<EngineLabel>,
    pub engine_readback_bytes: Family<EngineLabel, Counter>,
    pub engine_readback_seconds: Hist<EngineLabel>,
    pub output_bytes: Counter,
    pub output_truncated: Counter,
    pub source_changed: Counter,
    pub oom_killed: Counter,
    pub recovery_actions: Family<KindLabel, Counter>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_seconds: Hist<MethodLabel>,
    pub artifact_write_seconds: Hist<KindLabel>,
    pub fsync_seconds: Histogram,
    pub candidates: Family<StateLabel, Gauge>,
    pub proposals: Family<StateLabel, Gauge>,
    pub transactions: Family<StateLabel, Gauge>,
    pub claims_active: Gauge,
    pub contentions_open: Gauge,
    pub phase_seconds: Hist<PhaseLabel>,
    pub tree_cache_lookups: Family<ResultLabel, Counter>,
    pub tree_cache_bytes: Gauge,
    pub tree_cache_entries: Gauge,
    pub tree_cache_evictions: Counter,
    pub tree_cache_discarded: Counter,
    pub dependency_lookups: Family<ResultLabel, Counter>,
    pub dependency_fetch_seconds: Hist<ResultLabel>,
    pub dependency_sets: Gauge,
    pub dependency_set_bytes: Gauge,
    pub dependency_evictions: Counter,
    pub dependency_discarded: Counter,
    /// Submitted jobs by workspace and state, read from the store at each scrape.
    pub jobs: Family<WorkspaceState, Gauge>,
    /// Jobs waiting (`queued`) per workspace, and the age of the oldest, read at each scrape.
    pub job_queue_depth: Family<WorkspaceLabel, Gauge>,
    pub job_queue_oldest_seconds: Family<WorkspaceLabel, Gauge>,
    /// A job's time from submission (or resumption) to settling, by profile and status.
    pub job_seconds: Hist<ProfileStatus>,
    /// Webhook delivery attempts by what came of them.
    pub webhook_deliveries: Family<ResultLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Mutex::new(Registry::with_prefix("airlock")),
            verifications: Family::default(),
            verification_seconds: Family::new_with_constructor(seconds),
            queue_wait_seconds: seconds(),
            queue_depth: Gauge::default(),
            live_containers: Gauge::default(),
            jobs_unplaced: Gauge::default(),
            engine_verifications: Family::default(),
            engine_running: Family::default(),
            engine_up: Family::default(),
            engine_failures: Family::default(),
            engine_image_mismatches: Family::default(),
            engine_runtime: Family::default(),
            engine_upload_bytes: Family::default(),
            engine_upload_seconds: Family::new_with_constructor(seconds),
            engine_readback_bytes: Family::default(),
            engine_readback_seconds: Family::new_with_constructor(seconds),
            output_bytes: Counter::default(),
            output_truncated: Counter::default(),
            source_changed: Counter::default(),
            oom_killed: Counter::default(),
            recovery_actions: Family::default(),
            http_requests: Family::default(),
            http_seconds: Family::new_with_constructor(seconds),
            artifact_write_seconds: Family::new_with_constructor(short_seconds),
            fsync_seconds: short_seconds(),
            candidates: Family::default(),
            proposals: Family::default(),
            transactions: Family::default(),
            claims_active: Gauge::default(),
            contentions_open: Gauge::default(),
            phase_seconds: Family::new_with_constructor(seconds),
            tree_cache_lookups: Family::default(),
            tree_cache_bytes: Gauge::default(),
            tree_cache_entries: Gauge::default(),
            tree_cache_evictions: Counter::default(),
            tree_cache_discarded: Counter::default(),
            dependency_lookups: Family::default(),
            dependency_fetch_seconds: Family::new_with_constructor(seconds),
            dependency_sets: Gauge::default(),
            dependency_set_bytes: Gauge::default(),
            dependency_evictions: Counter::default(),
            dependency_discarded: Counter::default(),
            jobs: Family::default(),
            job_queue_depth: Family::default(),
            job_queue_oldest_seconds: Family::default(),
            job_seconds: Family::new_with_constructor(seconds),
            webhook_deliveries: Family::default(),
        };
        {
            let mut r = m.registry.lock().expect("never poisoned");
            r.register(
                "verifications",
                "Settled verifications by profile and terminal status",
                m.verifications.clone(),
            );
            r.register(
                "verification_duration_seconds",
                "Time from staging to the container's end, by profile",
                m.verification_seconds.clone(),
            );
            r.register(
                "verification_queue_wait_seconds",
                "Time a candidate verification waited for a worker permit",
                m.queue_wait_seconds.clone(),
            );
            r.register(
                "verification_queue_depth",
                "Candidate verifications waiting for a worker permit",
                m.queue_depth.clone(),
            );
            r.register(
                "live_containers",
                "Job containers created and not yet destroyed by this process",
                m.live_containers.clone(),
            );
            r.register(
                "jobs_unplaced",
                "Jobs waiting for an engine that can take them (capacity, health, image id)",
                m.jobs_unplaced.clone(),
            );
            r.register(
                "engine_verifications",
                "Settled verifications by the engine they ran on and terminal status",
                m.engine_verifications.clone(),
            );
            r.register(
                "engine_running_jobs",
                "Jobs this process placed on each engine and that have not finished",
                m.engine_running.clone(),
            );
            r.register(
                "engine_up",
                "1 while an engine takes jobs, 0 while it is out of placement",
                m.engine_up.clone(),
            );
            r.register(
                "engine_failures",
                "Times an engine was taken out of placement (it stopped answering)",
                m.engine_failures.clone(),
            );
            r.register(
                "engine_image_mismatches",
                "Images whose id on an engine is not the one Airlock built (the engine takes no job needing them)",
                m.engine_image_mismatches.clone(),
            );
            r.register(
                "engine_runtime",
                "1 for each isolation level (OCI runtime: runc, runsc) an engine offers, 0 for one it does not, as it last said",
                m.engine_runtime.clone(),
            );
            r.register(
                "engine_upload_bytes",
                "Bytes of workspace trees uploaded to each engine (file contents)",
                m.engine_upload_bytes.clone(),
            );
            r.register(
                "engine_upload_seconds",
                "Time to read a job's tree from git and upload it into its volume, by engine",
                m.engine_upload_seconds.clone(),
            );
            r.register(
                "engine_readback_bytes",
                "Bytes of workspaces read back from each engine after a job (file contents)",
                m.engine_readback_bytes.clone(),
            );
            r.register(
                "engine_readback_seconds",
                "Time to read a job's volume back after its container is gone, by engine",
                m.engine_readback_seconds.clone(),
            );
            r.register(
                "output_bytes",
                "Bytes of job output produced (before the cap)",
                m.output_bytes.clone(),
            );
            r.register(
                "output_truncations",
                "Verifications whose output hit the cap",
                m.output_truncated.clone(),
            );
            r.register(
                "source_changed",
                "Verifications that changed tracked files",
                m.source_changed.clone(),
            );
            r.register(
                "oom_kills",
                "Job containers killed for memory",
                m.oom_killed.clone(),
            );
            r.register(
                "recovery_actions",
                "Actions recovery passes took, by kind",
                m.recovery_actions.clone(),
            );
            r.register(
                "http_requests",
                "HTTP requests by API method and status code",
                m.http_requests.clone(),
            );
            r.register(
                "http_request_duration_seconds",
                "HTTP request latency by API method",
                m.http_seconds.clone(),
            );
            r.register(
                "artifact_write_seconds",
                "Durable artifact writes (write, fsync, rename, directory fsync), by kind",
                m.artifact_write_seconds.clone(),
            );
            r.register(
                "fsync_seconds",
                "fsync calls of verification artifact writes",
                m.fsync_seconds.clone(),
            );
            r.register("candidates", "Candidates by state", m.candidates.clone());
            r.register(
                "jobs",
                "Submitted jobs by workspace and state",
                m.jobs.clone(),
            );
            r.register(
                "job_queue_depth",
                "Jobs waiting for a slot or an engine, per workspace",
                m.job_queue_depth.clone(),
            );
            r.register(
                "job_queue_oldest_seconds",
                "Age of each workspace's oldest waiting job (0 when none waits)",
                m.job_queue_oldest_seconds.clone(),
            );
            r.register(
                "job_seconds",
                "Submitted jobs' time from submission to settling, by profile and status",
                m.job_seconds.clone(),
            );
            r.register(
                "webhook_deliveries",
                "Webhook delivery attempts by result (delivered, retried, failed)",
                m.webhook_deliveries.clone(),
            );
            r.register("proposals", "Proposals by state", m.proposals.clone());
            r.register(
                "transactions",
                "Apply transactions by phase",
                m.transactions.clone(),
            );
            r.register(
                "claims_active",
                "Active, unexpired resource claims",
                m.claims_active.clone(),
            );
            r.register(
                "contentions_open",
                "Open claim contentions",
                m.contentions_open.clone(),
            );
            r.register(
                "verification_phase_seconds",
                "Where verifications' time goes, by phase (wait_for_engine, stage, create, start, run, destroy, check, artifact, settle)",
                m.phase_seconds.clone(),
            );
            r.register(
                "tree_cache_lookups",
                "Jobs' base trees by how they were found: hit (cached), miss (filled into the cache), bypass (staged in full)",
                m.tree_cache_lookups.clone(),
            );
            r.register(
                "tree_cache_bytes",
                "Bytes of base trees in the warm tree cache",
                m.tree_cache_bytes.clone(),
            );
            r.register(
                "tree_cache_entries",
                "Base trees in the warm tree cache",
                m.tree_cache_entries.clone(),
            );
            r.register(
                "tree_cache_evictions",
                "Base trees evicted from the warm tree cache (least recently used, unheld)",
                m.tree_cache_evictions.clone(),
            );
            r.register(
                "tree_cache_discarded",
                "Tree cache entries discarded: partial (a fill that was killed) or not as cached",
                m.tree_cache_discarded.clone(),
            );
            r.register(
                "dependency_lookups",
                "Jobs' dependency sets found published (hit) or fetched for them (miss)",
                m.dependency_lookups.clone(),
            );
            r.register(
                "dependency_fetch_seconds",
                "Time a dependency fetch took, by whether it published a set (ok) or failed",
                m.dependency_fetch_seconds.clone(),
            );
            r.register(
                "dependency_sets",
                "Published dependency sets in this data dir",
                m.dependency_sets.clone(),
            );
            r.register(
                "dependency_set_bytes",
                "Bytes the published dependency sets' filesystems use (bounded by dependencies.cache_bytes)",
                m.dependency_set_bytes.clone(),
            );
            r.register(
                "dependency_evictions",
                "Dependency sets evicted (least recently used, held by no job)",
                m.dependency_evictions.clone(),
            );
            r.register(
                "dependency_discarded",
                "Dependency sets discarded: not as their manifest records them (torn or tampered)",
                m.dependency_discarded.clone(),
            );
        }
        m
    }

    /// Counts a job's dependency set lookup (`hit`: published; `miss`: fetched for it).
    pub fn record_dependency_lookup(&self, result: &str) {
        self.dependency_lookups
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    /// The dependency set store's figures now.
    pub fn record_dependency_store(&self, st: &crate::deps::store::StoreStatus) {
        self.dependency_sets
            .set(i64::try_from(st.sets).unwrap_or(i64::MAX));
        self.dependency_set_bytes
            .set(i64::try_from(st.bytes).unwrap_or(i64::MAX));
        let ev = &self.dependency_evictions;
        ev.inc_by(st.evicted.saturating_sub(ev.get()));
        let dis = &self.dependency_discarded;
        dis.inc_by(st.discarded.saturating_sub(dis.get()));
    }

    /// Times one dependency fetch.
    pub fn record_dependency_fetch(&self, ok: bool, took: std::time::Duration) {
        self.dependency_fetch_seconds
            .get_or_create(&ResultLabel {
                result: if ok { "ok" } else { "failed" }.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// Sets the state gauges from a fresh read; `known` lists every state of each kind so a
    /// state that emptied reads 0 instead of keeping its last value.
    pub fn set_gauges(&self, g: &crate::store::gauges::Gauges, known: &KnownStates) {
        let set = |fam: &Family<StateLabel, Gauge>, all: &[&str], counts: &[(String, i64)]| {
            for s in all {
                let n = counts.iter().find(|(k, _)| k == s).map_or(0, |(_, n)| *n);
                fam.get_or_create(&StateLabel {
                    state: s.to_string(),
                })
                .set(n);
            }
        };
        set(&self.candidates, &known.candidates, &g.candidates);
        set(&self.proposals, &known.proposals, &g.proposals);
        set(&self.transactions, &known.transactions, &g.transactions);
        self.claims_active.set(g.claims_active);
        self.contentions_open.set(g.contentions_open);
    }

    /// Sets each engine's gauges from what the pool says now: jobs running, whether it takes
    /// jobs, its failure count (a counter that only moves up) and its image mismatches.
    pub fn set_engines<'a>(&self, engines: impl IntoIterator<Item = EngineSample<'a>>) {
        for e in engines {
            let label = EngineLabel {
                engine: e.name.to_string(),
            };
            self.engine_running
                .get_or_create(&label)
                .set(e.running as i64);
            self.engine_up.get_or_create(&label).set(i64::from(e.up));
            let failures = self.engine_failures.get_or_create(&label);
            failures.inc_by(e.failures.saturating_sub(failures.get()));
            self.engine_image_mismatches
                .get_or_create(&label)
                .set(e.image_mismatches as i64);
            if let Some(offered) = &e.runtimes {
                for runtime in crate::domain::isolation::Isolation::ALL {
                    self.engine_runtime
                        .get_or_create(&EngineRuntime {
                            engine: e.name.to_string(),
                            runtime: runtime.as_str().to_string(),
                        })
                        .set(i64::from(offered.contains(&runtime.as_str())));
                }
            }
        }
    }

    /// Creates at zero every sample whose labels are known before any work: recovery kinds,
    /// each profile's terminal statuses, each engine's counters and gauges.
    pub fn initialize<'a>(
        &self,
        profiles: impl IntoIterator<Item = &'a str>,
        engines: impl IntoIterator<Item = &'a str>,
    ) {
        use crate::domain::verification::Status;
        for kind in RECOVERY_KINDS {
            let _ = self.recovery_actions.get_or_create(&KindLabel {
                kind: kind.to_string(),
            });
        }
        for st in RECOVERED_TX_STATES {
            let _ = self.recovery_actions.get_or_create(&KindLabel {
                kind: format!("transaction_{}", st.as_str()),
            });
        }
        for kind in ARTIFACT_KINDS {
            let _ = self.artifact_write_seconds.get_or_create(&KindLabel {
                kind: kind.to_string(),
            });
        }
        for phase in VERIFICATION_PHASES {
            let _ = self.phase_seconds.get_or_create(&PhaseLabel {
                phase: phase.to_string(),
            });
        }
        for result in ["hit", "miss"] {
            let _ = self.dependency_lookups.get_or_create(&ResultLabel {
                result: result.to_string(),
            });
        }
        for result in ["ok", "failed"] {
            let _ = self.dependency_fetch_seconds.get_or_create(&ResultLabel {
                result: result.to_string(),
            });
        }
        for result in TREE_CACHE_RESULTS {
            let _ = self.tree_cache_lookups.get_or_create(&ResultLabel {
                result: result.to_string(),
            });
        }
        for probe in PROBE_LABELS {
            let _ = self.http_requests.get_or_create(&HttpLabels {
                method: probe.to_string(),
                code: "200".to_string(),
            });
            let _ = self.http_seconds.get_or_create(&MethodLabel {
                method: probe.to_string(),
            });
        }
        let terminal = || Status::ALL.into_iter().filter(|s| *s != Status::Running);
        for result in WEBHOOK_RESULTS {
            let _ = self.webhook_deliveries.get_or_create(&ResultLabel {
                result: result.to_string(),
            });
        }
        for profile in profiles {
            let label = ProfileLabel {
                profile: profile.to_string(),
            };
            let _ = self.verification_seconds.get_or_create(&label);
            for status in terminal() {
                let ps = ProfileStatus {
                    profile: profile.to_string(),
                    status: status.as_str().to_string(),
                };
                let _ = self.verifications.get_or_create(&ps);
                let _ = self.job_seconds.get_or_create(&ps);
            }
        }
        for engine in engines {
            let label = EngineLabel {
                engine: engine.to_string(),
            };
            let _ = self.engine_running.get_or_create(&label);
            let _ = self.engine_up.get_or_create(&label);
            let _ = self.engine_failures.get_or_create(&label);
            let _ = self.engine_image_mismatches.get_or_create(&label);
            let _ = self.engine_upload_bytes.get_or_create(&label);
            let _ = self.engine_upload_seconds.get_or_create(&label);
            let _ = self.engine_readback_bytes.get_or_create(&label);
            let _ = self.engine_readback_seconds.get_or_create(&label);
            for status in terminal() {
                let _ = self.engine_verifications.get_or_create(&EngineStatus {
                    engine: engine.to_string(),
                    status: status.as_str().to_string(),
                });
            }
        }
    }

    /// The registry as OpenMetrics text (serve it as [`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().expect("never poisoned");
        prometheus_client::encoding::text::encode(&mut out, &r)
            .expect("encoding into a String does not fail");
        out
    }

    /// One recovery action of `kind`, `n` times.
    pub fn recovered(&self, kind: &str, n: usize) {
        if n > 0 {
            self.recovery_actions
                .get_or_create(&KindLabel {
                    kind: kind.to_string(),
                })
                .inc_by(n as u64);
        }
    }
}

/// Every state name of the kinds the gauges count.
pub struct KnownStates {
    pub candidates: Vec<&'static str>,
    pub proposals: Vec<&'static str>,
    pub transactions: Vec<&'static str>,
}

impl KnownStates {
    pub fn all() -> KnownStates {
        use crate::domain::candidate::CandidateState;
        use crate::domain::proposal::ProposalState;
        use crate::domain::transaction::TxState;
        KnownStates {
            candidates: CandidateState::ALL.iter().map(|s| s.as_str()).collect(),
            proposals: ProposalState::ALL.iter().map(|s| s.as_str()).collect(),
            transactions: TxState::ALL.iter().map(|s| s.as_str()).collect(),
        }
    }
}

mod jobs;
pub use jobs::*;

#[cfg(test)]
mod tests;
