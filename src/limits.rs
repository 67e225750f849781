//! Every limit Airlock enforces, as a named constant. Each one produces a specific error that
//! names the field and the bound when it is hit.

use std::time::Duration;

/// Most argv entries a verification may have.
pub const MAX_ARGV_ENTRIES: usize = 64;
/// Most bytes in one argv entry.
pub const MAX_ARGV_ENTRY_BYTES: usize = 16 * 1024;
/// Timeout used when the caller names none.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// Smallest accepted timeout.
pub const MIN_TIMEOUT_SECONDS: u64 = 1;
/// Largest accepted timeout (30 minutes).
pub const MAX_TIMEOUT_SECONDS: u64 = 1800;

/// Most output bytes retained per verification (head + marker + tail).
pub const OUTPUT_CAP_BYTES: usize = 65_536;
/// Bytes reserved inside the cap for the "bytes omitted" marker line.
pub const OUTPUT_MARKER_RESERVE_BYTES: usize = 128;
/// Bytes of the beginning of the output kept when it is truncated (about 32 KiB).
pub const OUTPUT_HEAD_BYTES: usize = (OUTPUT_CAP_BYTES - OUTPUT_MARKER_RESERVE_BYTES) / 2;
/// Bytes of the end of the output kept when it is truncated (about 32 KiB).
pub const OUTPUT_TAIL_BYTES: usize = (OUTPUT_CAP_BYTES - OUTPUT_MARKER_RESERVE_BYTES) / 2;

/// How many changed paths the `source_changed` error lists.
pub const SOURCE_CHANGED_LISTED_PATHS: usize = 20;

/// How long a `passed` result stays valid.
pub const VERIFICATION_VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// Open files per job process (soft and hard).
pub const SANDBOX_NOFILE: i64 = 4096;
/// Largest file a job process may write (RLIMIT_FSIZE), 4 GiB.
pub const SANDBOX_MAX_FILE_BYTES: i64 = 4 << 30;
/// OOM score adjustment for job containers: they die before anything else on the host.
pub const SANDBOX_OOM_SCORE_ADJ: i64 = 1000;
/// Smallest memory limit Docker accepts (6 MiB); profiles below it are refused.
pub const MIN_MEMORY_BYTES: i64 = 6 * 1024 * 1024;
/// Smallest tmpfs size for /tmp.
pub const MIN_TMP_BYTES: i64 = 1024 * 1024;
/// Largest pids limit a profile may set.
pub const MAX_PIDS: i64 = 65_536;
/// Largest CPU count a profile may set.
pub const MAX_CPUS: f64 = 256.0;
/// Most bytes of a profile's setup script.
pub const MAX_SETUP_SCRIPT_BYTES: usize = 64 * 1024;
/// Most environment variables a profile may set.
pub const MAX_PROFILE_ENV_VARS: usize = 256;

/// How long connecting to Docker waits for the engine to answer the version negotiation.
pub const DOCKER_NEGOTIATE_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a job's container state is polled after its output closed (a very fast exit can
/// beat the wait request to the engine).
pub const EXIT_POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How long a non-zero exit waits for the engine's `oom` event, which arrives around the exit.
pub const OOM_EVENT_GRACE: Duration = Duration::from_millis(100);
/// Pause between container removal attempts (multiplied by the attempt number).
pub const CONTAINER_REMOVE_RETRY_DELAY: Duration = Duration::from_millis(200);
/// SQLite busy timeout: how long a statement waits for another connection's lock.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often taking a worker lock is retried when its file keeps being replaced under it.
pub const WORKER_LOCK_ATTEMPTS: u32 = 8;
/// How long daemon shutdown waits for in-flight verifications to destroy their containers and
/// settle.
pub const SHUTDOWN_SETTLE_WAIT: Duration = Duration::from_secs(60);

/// Bounds of the configuration keys.
pub const EVIDENCE_TTL_DAYS: std::ops::RangeInclusive<u64> = 1..=365;
pub const MAINTENANCE_INTERVAL_SECONDS: std::ops::RangeInclusive<u64> = 1..=86_400;
pub const MAX_CONCURRENT_VERIFICATIONS: std::ops::RangeInclusive<usize> = 1..=64;

/// `[workspaces.X] max_queued_jobs` when the config names none: jobs of one workspace
/// (submitted jobs, candidate verifications, validation tests) waiting for a slot.
pub const DEFAULT_MAX_QUEUED_JOBS: usize = 100;
/// Bounds of `[workspaces.X] max_queued_jobs`.
pub const MAX_QUEUED_JOBS: std::ops::RangeInclusive<usize> = 1..=10_000;
/// Bounds of `[workspaces.X] max_running_jobs` (default: `max_concurrent_verifications`).
pub const MAX_RUNNING_JOBS: std::ops::RangeInclusive<usize> = 1..=64;
/// Most labels one submitted job carries.
pub const MAX_JOB_LABELS: usize = 16;
/// Longest label of a submitted job, in bytes.
pub const MAX_JOB_LABEL_BYTES: usize = 64;
/// Jobs one `job.list` page shows by default, and at most.
pub const DEFAULT_JOB_PAGE: u32 = 50;
pub const MAX_JOB_PAGE: u32 = 500;
/// A live log keeps the first bytes of a running job's output for followers who join late
/// (the rest of what they missed is counted in a note).
pub const LIVE_LOG_HEAD_BYTES: usize = OUTPUT_HEAD_BYTES;
/// Chunks a follower may fall behind before it is dropped with a note (the job never waits
/// for a follower).
pub const LIVE_LOG_FOLLOWER_CHUNKS: usize = 1024;
/// Followers one running job may have at once.
pub const MAX_LOG_FOLLOWERS: usize = 32;
pub const RUN_RETENTION_DAYS: std::ops::RangeInclusive<u64> = 1..=3650;

/// Bound on one Docker API call, until its response headers arrive (every call but a
/// transfer: an engine that stops answering is given up on after this, and the call fails
/// with [`crate::sandbox::SandboxError::Unresponsive`]). Streams are bounded where they are
/// read: a job's output by its deadline, a read-back by [`ENGINE_STREAM_IDLE_TIMEOUT`].
pub const ENGINE_CALL_TIMEOUT_SECS: u64 = 30;
/// [`ENGINE_CALL_TIMEOUT_SECS`] as a duration.
pub const ENGINE_CALL_TIMEOUT: Duration = Duration::from_secs(ENGINE_CALL_TIMEOUT_SECS);
/// Bound on opening a TCP connection to a `tcp://` engine.
pub const ENGINE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections a `tcp://` engine's client keeps open between calls (more run at once when
/// calls overlap; the rest close when done).
pub const ENGINE_IDLE_CONNECTIONS: usize = 8;
/// How long an unused connection to a `tcp://` engine stays open.
pub const ENGINE_IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on a transfer call (a workspace upload, an image build or load), whose whole body
/// is sent before the engine answers.
pub const DOCKER_TRANSFER_TIMEOUT_SECS: u64 = 120;
/// How long a read-back stream from an engine may go without a byte before it is given up on.
pub const ENGINE_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an engine has to confirm a job container's kill at its deadline (or cancel)
/// before Airlock gives up on it: the job settles `error` (the engine stopped answering),
/// the engine leaves placement, and the container is removed once the engine answers again.
pub const ENGINE_KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// Beyond a job's own timeout, how long its engine may take for everything else (staging,
/// creating, destroying, reading back) before Airlock settles the job `error` on its own
/// clock: no job stays running longer than `timeout_seconds` + this after its placement.
pub const ENGINE_GRACE: Duration = Duration::from_secs(120);
/// How often the pool checks each engine's image ids (and the ids Airlock built) while it
/// answers; see `engine::runner::pool::images`.
pub const IMAGE_RECHECK_INTERVAL: Duration = Duration::from_secs(5);
/// How long removal of a container is retried before Airlock reports it as left behind.
pub const CONTAINER_REMOVE_ATTEMPTS: u32 = 5;

/// Largest recovery artifact Airlock will read back. A record's argv may hold up to 1 MiB
/// (64 entries of 16 KiB), and its attestation carries the argv again, base64-encoded.
pub const MAX_ARTIFACT_BYTES: u64 = 4 * 1024 * 1024;

/// Largest key file (`signing_key`, `verification_keys`, `--public-key`) Airlock reads; a PEM
/// Ed25519 key is about 120 bytes.
pub const MAX_KEY_FILE_BYTES: u64 = 16 * 1024;
/// Most `verification_keys` a config may list.
pub const MAX_VERIFICATION_KEYS: usize = 64;
/// Longest `verifier_id`.
pub const MAX_VERIFIER_ID_BYTES: usize = 512;
/// Largest attestation `airlock attestation verify` reads.
pub const MAX_ATTESTATION_BYTES: usize = 4 * 1024 * 1024;
/// Most signatures one envelope may carry before it is refused unread.
pub const MAX_ENVELOPE_SIGNATURES: usize = 16;
/// Attempts at adding a delivery's note when another delivery moves `refs/notes/airlock`
/// between reading it and the ref transaction.
pub const NOTES_ATTEMPTS: u32 = 8;
/// Most rows `verification list` returns.
pub const MAX_VERIFICATION_LIST_LIMIT: u32 = 1000;
/// Most candidates `integration.list` returns.
pub const MAX_CANDIDATE_LIST_LIMIT: u32 = 100;
/// Rows a list returns when no limit is given (`verification list`, `integration.list`).
pub const DEFAULT_LIST_LIMIT: u32 = 50;

/// Most bytes of git output Airlock reads into memory for one plumbing call.
pub const MAX_GIT_OUTPUT_BYTES: usize = 64 * 1024 * 1024;
/// Most commit summaries (author, subject) a repository handle remembers; past it the memory
/// starts over. A summary never changes, so remembering only saves git processes.
pub const MAX_REMEMBERED_SUMMARIES: usize = 4096;
/// Most commit -> tree answers a repository handle remembers (likewise never stale).
pub const MAX_REMEMBERED_TREES: usize = 4096;
/// Most bytes of headers read from the engine's `/_ping` answer (a few hundred in practice).
pub const DOCKER_PING_HEAD_BYTES: usize = 16 * 1024;

/// How many times a busy job filesystem is unmounted before the attempt is reported as failed.
pub const UNMOUNT_ATTEMPTS: u32 = 10;
/// Pause between unmount attempts (multiplied by the attempt number).
pub const UNMOUNT_RETRY_DELAY: Duration = Duration::from_millis(50);
/// Most threads that hand a staged tree to the sandbox user (one per core up to this).
pub const MAX_STAGING_WALKERS: usize = 8;
/// How many times removal of a checkout directory is tried.
pub const CHECKOUT_REMOVE_ATTEMPTS: u32 = 5;
/// Pause between checkout removal attempts (multiplied by the attempt number).
pub const CHECKOUT_REMOVE_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Default per-job disk quota (`disk_bytes`): the size of the job's own checkout filesystem.
pub const DEFAULT_DISK_BYTES: u64 = 4 << 30;
/// Smallest `disk_bytes` a profile may set.
pub const MIN_DISK_BYTES: u64 = 16 << 20;
/// Largest `disk_bytes` a profile may set (1 TiB).
pub const MAX_DISK_BYTES: u64 = 1 << 40;
/// Default per-job inode quota (`inodes`).
pub const DEFAULT_INODES: u64 = 1_000_000;
/// Smallest `inodes` a profile may set.
pub const MIN_INODES: u64 = 1024;
/// Bytes per inode at the densest: ext4 holds at most one inode per 4 KiB block.
pub const BYTES_PER_INODE_MIN: u64 = 4096;
/// Default bound of the warm tree cache (`tree_cache_bytes`): the bytes of base trees kept
/// for overlay checkouts, least recently used evicted first. The cache's image is sparse, so
/// only what is cached uses the data dir's disk.
pub const DEFAULT_TREE_CACHE_BYTES: u64 = 8 << 30;
/// Smallest non-zero `tree_cache_bytes` (0 turns the cache, and overlay checkouts, off).
pub const MIN_TREE_CACHE_BYTES: u64 = 64 << 20;
/// How many times the tree cache's image is mounted before the cache is reported unavailable:
/// the previous mount's loop device stays attached until every mount namespace that saw it
/// (a container's, torn down after the container) lets go, and the kernel refuses a second
/// mount meanwhile.
pub const TREE_CACHE_MOUNT_ATTEMPTS: u32 = 20;
/// Pause between tree cache mount attempts.
pub const TREE_CACHE_MOUNT_RETRY_DELAY: Duration = Duration::from_millis(250);
/// Largest `tree_cache_bytes` (1 TiB).
pub const MAX_TREE_CACHE_BYTES: u64 = 1 << 40;
/// Bytes of the tree cache's filesystem per inode: a cached tree of small files needs an
/// inode per 4 KiB block at most, and half of that leaves room for ordinary trees.
pub const TREE_CACHE_BYTES_PER_INODE: u64 = 8192;
/// A tree cache's seal is stamped at least this many ticks of the kernel's coarse clock (and a
/// millisecond) after its image last changed: a write in the same tick as the last change
/// would not move the image's times, and one tick later every write does.
pub const TREE_CACHE_SEAL_TICKS: u32 = 1;
/// Most waits for a tree cache image to stop changing before its seal is given up (the next
/// process then verifies every entry it uses).
pub const TREE_CACHE_SEAL_ATTEMPTS: u32 = 10;
/// Default free space the data dir's filesystem must keep (`min_free_bytes`): new work is
/// refused with `resource_exhausted` below it.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 2 << 30;

/// Largest `max_connections` the config accepts.
pub const MAX_CONNECTIONS_BOUND: usize = 65_536;
/// Default time a client has to send a request's headers (`header_read_timeout_seconds`),
/// from the connection's start or the end of its previous response.
pub const DEFAULT_HEADER_READ_TIMEOUT_SECONDS: u64 = 10;
/// Default time a client has to send a request's body (`body_read_timeout_seconds`).
pub const DEFAULT_BODY_READ_TIMEOUT_SECONDS: u64 = 30;
/// Default idle time after which a keep-alive connection is closed (`keep_alive_idle_seconds`).
pub const DEFAULT_KEEP_ALIVE_IDLE_SECONDS: u64 = 30;
/// Default idle time after which an MCP session is closed (`mcp_session_idle_seconds`).
pub const DEFAULT_MCP_SESSION_IDLE_SECONDS: u64 = 300;
/// Most MCP sessions one token's identity may hold open.
pub const MAX_MCP_SESSIONS_PER_TOKEN: usize = 16;
/// Most MCP sessions open at once, over every token.
pub const MAX_MCP_SESSIONS: usize = 256;
/// Largest value of any of the HTTP timeouts above.
pub const MAX_HTTP_TIMEOUT_SECONDS: u64 = 3600;

/// Parsed candidates the daemon keeps for reads (by stored version; full means start over).
pub const CANDIDATE_READ_CACHE_ENTRIES: usize = 1024;
/// Proposal revisions whose touched paths are remembered (revisions are content-addressed and
/// immutable, so an entry is never stale; the map is cleared when full).
pub const TOUCHED_PATHS_CACHE_ENTRIES: usize = 256;
/// Serialized `integration.show` answers the API keeps (by version and verifications).
pub const SHOW_BODY_CACHE_ENTRIES: usize = 1024;

/// How often a connection checks whether it has been idle too long.
pub const IDLE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Pause after a failed `accept` (for example `EMFILE`), so the loop does not spin.
pub const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// How long shutdown waits for in-flight requests to finish their responses.
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(60);

/// How long an apply may take from its `prepared` commit to its end (the call budget): a
/// claim it relies on that expires sooner makes it refuse up front. A claim an open apply
/// holds is not expired before the apply settles.
pub const APPLY_CLAIM_MARGIN_SECONDS: i64 = 60;

/// The lowest port an unprivileged process in a job container may bind
/// (`net.ipv4.ip_unprivileged_port_start`; the kernel's own default).
pub const SANDBOX_UNPRIVILEGED_PORT_START: u16 = 1024;

/// How long a sign-in form (its CSRF cookie) stays usable.
pub const UI_LOGIN_FORM_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Budget for one control call.
pub const CONTROL_CALL_BUDGET: Duration = Duration::from_secs(60);

/// How long cancel and delete wait for a worker to destroy its container and settle.
pub const SETTLE_WAIT: Duration = Duration::from_secs(50);

/// How long an image import may take to upload (the Docker client's default is 120 s, which a
/// large root filesystem tar exceeds).
pub const IMPORT_TIMEOUT_SECS: u64 = 3600;

/// A stamped file must be at least this much older than the moment its stamp was taken.
pub const REF_CACHE_RACY_MARGIN: Duration = Duration::from_secs(2);

/// Most remembered answers per repository.
pub const REF_CACHE_ENTRIES: usize = 4096;

/// Largest patch the parser reads (the API's own `max_patch_bytes` is below it).
pub const MAX_PATCH_PARSE_BYTES: usize = 64 * 1024 * 1024;
/// Most file sections in one patch.
pub const MAX_PATCH_FILES: usize = 10_000;

/// Most entries a directory resource hash reads.
pub const MAX_DIRECTORY_HASH_ENTRIES: usize = 200_000;
/// Most bytes a directory resource hash reads.
pub const MAX_DIRECTORY_HASH_BYTES: u64 = 2 << 30;

/// Claim lease lengths: `ttl_seconds` bounds and default.
pub const CLAIM_TTL_SECONDS: std::ops::RangeInclusive<u64> = 10..=86_400;
pub const DEFAULT_CLAIM_TTL_SECONDS: u64 = 900;
/// How many times a claim move whose version came from the server's own read is read and
/// judged again when another change got in between (an apply re-basing the claim, a
/// concurrent extend). A claim that keeps moving past this is answered `conflict`.
pub const CLAIM_MOVE_ATTEMPTS: u32 = 4;
/// `claim.list` page size bound.
pub const MAX_CLAIM_LIST_LIMIT: u32 = 200;
/// Longest `task_id`, `session_id` or `rationale`.
pub const MAX_CLAIM_TEXT_BYTES: usize = 4096;

/// Bounds of the `max_patch_bytes` config (a patch `proposal.create` accepts); the parser's own
/// ceiling [`MAX_PATCH_PARSE_BYTES`] is the upper one.
pub const MAX_PATCH_BYTES: std::ops::RangeInclusive<usize> = 1024..=MAX_PATCH_PARSE_BYTES;
/// `max_patch_bytes` when the config names none.
pub const DEFAULT_MAX_PATCH_BYTES: usize = 8 * 1024 * 1024;
/// What a patch may grow to when JSON-escaped: a control byte becomes `\u00XX`, 6 bytes.
pub const JSON_ESCAPE_FACTOR: usize = 6;
/// Room for the rest of a proposal request beside its patch (title, summary, resources, tests).
pub const PROPOSAL_ENVELOPE_BYTES: usize = 2 * 1024 * 1024;

/// The request body limit of `proposal.create` and `proposal.attach_patch`: the patch, JSON-escaped
/// at worst, plus the envelope.
pub fn patch_body_limit(max_patch_bytes: usize) -> usize {
    max_patch_bytes * JSON_ESCAPE_FACTOR + PROPOSAL_ENVELOPE_BYTES
}

/// Longest proposal title, in bytes.
pub const MAX_PROPOSAL_TITLE_BYTES: usize = 512;
/// Longest proposal summary and rollback notes (Markdown), in bytes.
pub const MAX_PROPOSAL_TEXT_BYTES: usize = 64 * 1024;
/// Most `affected_resources` a proposal names (given and found together).
pub const MAX_AFFECTED_RESOURCES: usize = 1000;
/// Most `expected_tests` argvs a proposal carries.
pub const MAX_EXPECTED_TESTS: usize = 32;
/// Most revisions one proposal may have.
pub const MAX_PROPOSAL_REVISIONS: u64 = 100;
/// Largest `proposal.list` page.
pub const MAX_PROPOSAL_LIST_LIMIT: u32 = 200;
/// Most ended claims one maintenance pass removes (the rest wait for the next pass).
pub const CLAIM_PURGE_BATCH: u32 = 1000;
/// `proposal.preview` diff pages: default and largest, in lines.
pub const DEFAULT_PREVIEW_DIFF_LINES: u32 = 500;
pub const MAX_PREVIEW_DIFF_LINES: u32 = 5000;
/// The sandboxed dry run of `patch.validate`: its timeout, and the most bytes of post-images
/// it may write.
pub const DRY_RUN_TIMEOUT_SECONDS: u64 = 120;
pub const MAX_DRY_RUN_OUTPUT_BYTES: u64 = 256 * 1024 * 1024;
/// Bounds of `validation_ttl_seconds` (how long a validation can be applied), and its default.
pub const VALIDATION_TTL_SECONDS: std::ops::RangeInclusive<u64> = 60..=86_400;
pub const DEFAULT_VALIDATION_TTL_SECONDS: u64 = 3600;

/// Web page sessions kept at once; signing in past it drops the oldest.
pub const UI_MAX_SESSIONS: usize = 1024;
/// How long a web page session lasts after sign-in.
pub const UI_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The largest web form accepted (a sign-in, a decision with its reason).
pub const UI_FORM_LIMIT: usize = 64 * 1024;
/// Largest form body of a candidate page's forms: a resolution carries whole files (each
/// conflicted file is shown up to `MAX_CONFLICT_CONTENT_BYTES`, form-encoded). The session is
/// checked from the headers before such a body is read.
pub const UI_RESOLVE_FORM_LIMIT: usize = 8 * 1024 * 1024;
/// Active claims the web page reads to show those on a proposal's resources.
pub const UI_CLAIMS_SHOWN: u32 = 200;
/// Bytes of a candidate's combined diff per web page (`integration.patch`'s `limit`); the page
/// links the next one.
pub const UI_DIFF_PAGE_BYTES: usize = 256 * 1024;
/// Longest `public_url` in the config.
pub const MAX_PUBLIC_URL_BYTES: usize = 2048;

// ---- The dependency phase (`deps`, `engine::runner::deps`) ----

/// Most files of the revision a generic dependency's set is made from.
pub const MAX_DEPENDENCY_FILES: usize = 16;
/// Most `[egress] allow` entries.
pub const MAX_EGRESS_ALLOW: usize = 64;
/// Most connections one fetch's egress proxy carries at once.
pub const MAX_EGRESS_CONNECTIONS: usize = 64;
/// Largest proxy request head a fetch's tool may send.
pub const MAX_EGRESS_HEAD_BYTES: usize = 8 * 1024;
/// How long a tool may take to send its proxy request head.
pub const EGRESS_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long resolving and connecting to an admitted destination may take.
pub const EGRESS_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Refusals a fetch's error quotes (the log has every one).
pub const MAX_EGRESS_REFUSALS_KEPT: usize = 8;
/// Most paths one dependency set may hold (its manifest lists each).
pub const MAX_DEPENDENCY_SET_PATHS: usize = 1_000_000;
/// Largest set manifest read back.
pub const MAX_DEPENDENCY_MANIFEST_BYTES: u64 = 256 << 20;
/// `dependencies.fetch_timeout_seconds`: its default and bounds.
pub const DEFAULT_FETCH_TIMEOUT_SECONDS: u64 = 600;
pub const FETCH_TIMEOUT_SECONDS: std::ops::RangeInclusive<u64> = 10..=3600;
/// `dependencies.max_set_bytes` (one set's filesystem): default and bounds.
pub const DEFAULT_MAX_SET_BYTES: u64 = 4 << 30;
pub const MAX_SET_BYTES: std::ops::RangeInclusive<u64> = (16 << 20)..=(256 << 30);
/// `dependencies.max_set_inodes`: default and bounds.
pub const DEFAULT_MAX_SET_INODES: u64 = 500_000;
pub const MAX_SET_INODES: std::ops::RangeInclusive<u64> = 1_000..=10_000_000;
/// `dependencies.max_concurrent_fetches`: default and bounds.
pub const DEFAULT_MAX_CONCURRENT_FETCHES: usize = 2;
pub const MAX_CONCURRENT_FETCHES: std::ops::RangeInclusive<usize> = 1..=32;
/// `dependencies.cache_bytes` (every published set): default and bounds.
pub const DEFAULT_DEPENDENCY_CACHE_BYTES: u64 = 16 << 30;
pub const DEPENDENCY_CACHE_BYTES: std::ops::RangeInclusive<u64> = (64 << 20)..=(4 << 40);
/// Largest `dependencies.ca_bundle` (a PEM bundle).
pub const MAX_CA_BUNDLE_BYTES: u64 = 4 << 20;
/// Where a fetch finds `dependencies.ca_bundle` (removed from the set before it is sealed).
pub const FETCH_CA_FILE: &str = ".airlock-ca.pem";
/// Output a fetch keeps for its error (its head and tail).
pub const MAX_FETCH_OUTPUT_QUOTED: usize = 4 * 1024;

/// Most labels of one engine (`[[engines]] labels`), and of a profile's `engine_labels`.
pub const MAX_ENGINE_LABELS: usize = 16;

/// Largest answer sealed for byte-for-byte replay; a larger one is answered but not kept (its
/// replays answer the result as it is then).
pub const MAX_SEALED_REPLY_BYTES: usize = 256 * 1024;

/// How long a keyed call's sealed answer is kept for replays (after that a replay still finds
/// its binding and answers the result as it is then).
pub const SEALED_REPLY_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Longest engine name or label, in bytes.
pub const MAX_ENGINE_NAME_BYTES: usize = 64;

/// Most webhook subscriptions of one workspace (`[[workspaces.<id>.webhooks]]`).
pub const MAX_WEBHOOKS_PER_WORKSPACE: usize = 16;
/// Shortest webhook `secret` (bytes): an HMAC key any shorter is guessable.
pub const MIN_WEBHOOK_SECRET_BYTES: usize = 16;
/// Longest webhook `secret` (bytes; also the most read from a `secret_file`).
pub const MAX_WEBHOOK_SECRET_BYTES: usize = 1024;
/// Longest webhook `url`, in bytes.
pub const MAX_WEBHOOK_URL_BYTES: usize = 2048;
/// `max_attempts` of a webhook: default and bounds. After the last failed attempt the delivery
/// is `failed` (its last error kept) and the next one of the subscription goes.
pub const DEFAULT_WEBHOOK_ATTEMPTS: u32 = 8;
pub const WEBHOOK_ATTEMPTS: std::ops::RangeInclusive<u32> = 1..=50;
/// The first retry's wait; each next one doubles it, up to [`MAX_WEBHOOK_BACKOFF`].
pub const WEBHOOK_FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two attempts of one delivery.
pub const MAX_WEBHOOK_BACKOFF: Duration = Duration::from_secs(600);
/// `timeout_seconds` of a webhook (connect, TLS, request and answer together): default and
/// bounds. A receiver that does not answer within it costs that attempt, nothing else.
pub const DEFAULT_WEBHOOK_TIMEOUT_SECONDS: u64 = 10;
pub const WEBHOOK_TIMEOUT_SECONDS: std::ops::RangeInclusive<u64> = 1..=120;
/// Most bytes of a receiver's answer read (the rest is not waited for) and quoted in an error.
pub const MAX_WEBHOOK_ANSWER_BYTES: usize = 64 * 1024;
pub const MAX_WEBHOOK_ERROR_QUOTED: usize = 512;
/// Most events one pass turns into deliveries for one subscription.
pub const WEBHOOK_ENQUEUE_PAGE: u32 = 200;
/// Deliveries of one subscription kept once sent or given up (the oldest are removed).
pub const WEBHOOK_DELIVERIES_KEPT: u32 = 1000;

/// Longest reason a delivery decision keeps (`integration.decide`'s `reason`), in bytes.
pub const MAX_DECISION_REASON_BYTES: usize = 4096;
