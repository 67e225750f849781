//! Airlock: runs untrusted verification work against exact Git revisions inside hardened
//! Docker containers, records every result durably, and recovers interrupted runs without ever
//! rerunning a command or inventing a result. See ARCHITECTURE.md for the code map.

#![deny(unsafe_code)]

pub mod api;
pub mod artifacts;
pub mod attest;
pub mod backup;
pub mod beneath;
pub mod cancel;
pub mod candidate;
pub mod canonical;
pub mod cli;
pub mod client;
pub mod config;
pub mod crash;
pub mod daemon;
pub mod deps;
pub mod domain;
pub mod engine;
pub mod ids;
pub mod install;
pub mod limits;
pub mod metrics;
pub mod patch;
pub mod process;
pub mod sandbox;
pub mod staging;
pub mod store;
pub mod symbols;
pub mod verification;
pub mod wire;
pub mod workspace;
pub mod worktree;

#[cfg(test)]
mod architecture_tests;
