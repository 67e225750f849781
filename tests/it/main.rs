//! Airlock's integration tests: one binary, real Docker, real git, real SQLite, the real CLI.
//! Docker tests fail with a clear message when no engine is reachable, unless
//! AIRLOCK_SKIP_DOCKER=1 is set explicitly.

mod apply_corpus;
mod apply_hostile;
mod apply_kill;
mod apply_races;
mod attestation;
mod cli;
mod clients;
mod delivery;
mod engine_pool;
mod governed_gates;
mod hardening;
mod inprocess;
mod readme_config;
mod recovery;
mod refusals;
mod remote_engine;
mod runner;
mod serve_access;
pub(crate) mod serve_apply;
mod serve_assembly;
mod serve_backup;
mod serve_claim_ends;
mod serve_claims;
mod serve_contentions;
mod serve_events;
mod serve_governed;
mod serve_history;
mod serve_hygiene;
mod serve_jobs;
mod serve_lifecycle;
mod serve_lists;
mod serve_mcp;
mod serve_metrics;
mod serve_openapi;
mod serve_proposals;
mod serve_replays;
mod serve_reviews;
mod serve_symbols;
mod serve_ui;
mod serve_ui_pages;
mod serve_ui_review;
mod support;
mod toolchain;
mod warm;
mod workspace_seam;
