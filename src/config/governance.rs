//! The governed path's per-workspace config: who holds which review roles, and the policy
//! that gates apply (`[workspaces.<id>.roles]`, `[workspaces.<id>.policy]`).

use super::{ConfigError, bound};
use crate::domain::policy::{Gate, PathRole, Policy, RequiredCheck, check_glob};
use crate::limits;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Most roles one holder has, globs in one list, and path roles.
pub const MAX_ROLES_PER_HOLDER: usize = 32;
pub const MAX_POLICY_GLOBS: usize = 256;
/// Bounds of `required_approvals`.
pub const MAX_REQUIRED_APPROVALS: u32 = 32;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    required_approvals: Option<u32>,
    required_roles: Option<Vec<String>>,
    #[serde(default)]
    high_risk_paths: Vec<String>,
    #[serde(default)]
    path_roles: Vec<RawPathRole>,
    security_review: Option<Gate>,
    human_approval: Option<Gate>,
    required_tests: Option<bool>,
    #[serde(default)]
    required_checks: Vec<RawCheck>,
    claims_release_on: Option<crate::domain::claim::ReleaseOn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheck {
    name: String,
    argv: Vec<String>,
    profile: Option<String>,
    timeout_seconds: Option<u64>,
}

/// Most required checks one workspace's policy names.
pub const MAX_REQUIRED_CHECKS: usize = 16;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPathRole {
    glob: String,
    role: String,
}

/// A role name: 1..=64 of lowercase letters, digits, `_` and `-`.
pub fn is_role(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn invalid(field: String, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
}

/// Validates a workspace's roles: holders are member ids or `run:<run_id>`.
pub(super) fn roles(
    ws: &str,
    raw: BTreeMap<String, Vec<String>>,
) -> Result<BTreeMap<String, Vec<String>>, ConfigError> {
    for (holder, list) in &raw {
        let field = format!("workspaces.{ws}.roles.{holder}");
        let id = holder.strip_prefix("run:").unwrap_or(holder);
        if !super::is_identifier(id) {
            return Err(invalid(
                field,
                "a role holder is a member id or \"run:<run_id>\" (1..=128 letters, digits, '_', '-' or '.')",
            ));
        }
        if list.len() > MAX_ROLES_PER_HOLDER {
            return Err(invalid(
                field,
                format!("at most {MAX_ROLES_PER_HOLDER} roles per holder"),
            ));
        }
        if let Some(bad) = list.iter().find(|r| !is_role(r)) {
            return Err(invalid(
                field,
                format!("role {bad:?}: 1..=64 of a-z, 0-9, '_' and '-'"),
            ));
        }
    }
    Ok(raw)
}

/// Validates and completes a workspace's policy (defaults: one approval, role `reviewer`,
/// security review and human approval for high-risk changes, tests not required, no
/// required checks). `is_profile` says whether a profile name is configured.
pub(super) fn policy(
    ws: &str,
    raw: Option<RawPolicy>,
    is_profile: impl Fn(&str) -> bool,
) -> Result<Policy, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Policy::default());
    };
    let field = |k: &str| format!("workspaces.{ws}.policy.{k}");
    let d = Policy::default();
    let required_approvals = raw.required_approvals.unwrap_or(d.required_approvals);
    if required_approvals > MAX_REQUIRED_APPROVALS {
        return Err(invalid(
            field("required_approvals"),
            format!("{required_approvals} must be between 0 and {MAX_REQUIRED_APPROVALS}"),
        ));
    }
    let required_roles = raw.required_roles.unwrap_or(d.required_roles);
    if let Some(bad) = required_roles.iter().find(|r| !is_role(r)) {
        return Err(invalid(
            field("required_roles"),
            format!("role {bad:?}: 1..=64 of a-z, 0-9, '_' and '-'"),
        ));
    }
    if raw.high_risk_paths.len() > MAX_POLICY_GLOBS || raw.path_roles.len() > MAX_POLICY_GLOBS {
        return Err(invalid(
            field("high_risk_paths"),
            format!("at most {MAX_POLICY_GLOBS} globs in high_risk_paths and in path_roles"),
        ));
    }
    for (i, g) in raw.high_risk_paths.iter().enumerate() {
        check_glob(g).map_err(|m| invalid(field(&format!("high_risk_paths[{i}]")), m))?;
    }
    let mut path_roles = Vec::with_capacity(raw.path_roles.len());
    for (i, r) in raw.path_roles.into_iter().enumerate() {
        check_glob(&r.glob).map_err(|m| invalid(field(&format!("path_roles[{i}].glob")), m))?;
        if !is_role(&r.role) {
            return Err(invalid(
                field(&format!("path_roles[{i}].role")),
                format!("role {:?}: 1..=64 of a-z, 0-9, '_' and '-'", r.role),
            ));
        }
        path_roles.push(PathRole {
            glob: r.glob,
            role: r.role,
        });
    }
    if raw.required_checks.len() > MAX_REQUIRED_CHECKS {
        return Err(invalid(
            field("required_checks"),
            format!(
                "{} required checks; at most {MAX_REQUIRED_CHECKS}",
                raw.required_checks.len()
            ),
        ));
    }
    let mut required_checks: Vec<RequiredCheck> = Vec::with_capacity(raw.required_checks.len());
    for (i, c) in raw.required_checks.into_iter().enumerate() {
        let at = |k: &str| field(&format!("required_checks[{i}].{k}"));
        if !is_role(&c.name) {
            return Err(invalid(
                at("name"),
                format!("{:?}: 1..=64 of a-z, 0-9, '_' and '-'", c.name),
            ));
        }
        if required_checks.iter().any(|o| o.name == c.name) {
            return Err(invalid(at("name"), format!("{:?} is named twice", c.name)));
        }
        crate::verification::validate_argv(&c.argv)
            .map_err(|e| invalid(at("argv"), e.to_string()))?;
        if let Some(p) = &c.profile
            && !is_profile(p)
        {
            return Err(invalid(at("profile"), format!("unknown profile {p:?}")));
        }
        if let Some(t) = c.timeout_seconds {
            crate::verification::validate_timeout(t)
                .map_err(|e| invalid(at("timeout_seconds"), e.to_string()))?;
        }
        required_checks.push(RequiredCheck {
            name: c.name,
            argv: c.argv,
            profile: c.profile,
            timeout_seconds: c.timeout_seconds,
        });
    }
    Ok(Policy {
        required_approvals,
        required_roles,
        high_risk_paths: raw.high_risk_paths,
        path_roles,
        security_review: raw.security_review.unwrap_or(d.security_review),
        human_approval: raw.human_approval.unwrap_or(d.human_approval),
        required_tests: raw.required_tests.unwrap_or(d.required_tests),
        required_checks,
        claims_release_on: raw.claims_release_on.unwrap_or_default(),
    })
}

/// Days an ended claim is kept past its expiry when the config names none.
pub const DEFAULT_CLAIM_RETENTION_DAYS: u64 = 30;

/// The governed path's top-level options, validated.
pub(super) struct Options {
    pub(super) max_patch_bytes: usize,
    pub(super) claim_retention: std::time::Duration,
    pub(super) validation_ttl: std::time::Duration,
    pub(super) expected_test_timeout_seconds: u64,
}

/// `max_patch_bytes`, `claim_retention_days`, `validation_ttl_seconds` and
/// `expected_test_timeout_seconds`, with their defaults and bounds.
pub(super) fn options(
    max_patch_bytes: Option<usize>,
    claim_retention_days: Option<u64>,
    validation_ttl_seconds: Option<u64>,
    expected_test_timeout_seconds: Option<u64>,
) -> Result<Options, ConfigError> {
    let max_patch_bytes = max_patch_bytes.unwrap_or(limits::DEFAULT_MAX_PATCH_BYTES);
    if !limits::MAX_PATCH_BYTES.contains(&max_patch_bytes) {
        return Err(bound(
            "max_patch_bytes",
            max_patch_bytes,
            &limits::MAX_PATCH_BYTES,
        ));
    }
    let days = claim_retention_days.unwrap_or(DEFAULT_CLAIM_RETENTION_DAYS);
    if !limits::RUN_RETENTION_DAYS.contains(&days) {
        return Err(bound(
            "claim_retention_days",
            days,
            &limits::RUN_RETENTION_DAYS,
        ));
    }
    let ttl = validation_ttl_seconds.unwrap_or(limits::DEFAULT_VALIDATION_TTL_SECONDS);
    if !limits::VALIDATION_TTL_SECONDS.contains(&ttl) {
        return Err(bound(
            "validation_ttl_seconds",
            ttl,
            &limits::VALIDATION_TTL_SECONDS,
        ));
    }
    let timeout = expected_test_timeout_seconds.unwrap_or(limits::DEFAULT_TIMEOUT_SECONDS);
    let timeouts = limits::MIN_TIMEOUT_SECONDS..=limits::MAX_TIMEOUT_SECONDS;
    if !timeouts.contains(&timeout) {
        return Err(bound("expected_test_timeout_seconds", timeout, &timeouts));
    }
    Ok(Options {
        max_patch_bytes,
        claim_retention: std::time::Duration::from_secs(days * 86_400),
        validation_ttl: std::time::Duration::from_secs(ttl),
        expected_test_timeout_seconds: timeout,
    })
}
