//! The governed patch path on workspaces with a `worktree`: claims and resources, proposals,
//! reviews and the policy, validation in the sandbox, the journaled apply, its recovery and
//! the control actions on its transactions.

pub mod applying;
pub mod claims;
pub mod contentions;
pub mod control;
pub mod lists;
pub mod proposals;
pub mod requests;
pub mod resources;
pub mod reviews;
pub mod validation;
pub mod verdict;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Claims and resources: grants and their moves, contentions, reconcile, session ends,
/// resource reads and the event log.
#[derive(Clone)]
pub struct Claims {
    pub ctx: crate::engine::context::Handles,
}

/// Proposals: immutable revisions, their lifecycle, previews and reads, and the policy's
/// verdict on the current revision (the review evidence it reads is recorded by
/// [`reviews::Reviews`]).
#[derive(Clone)]
pub struct Proposals {
    pub ctx: crate::engine::context::Handles,
    /// Every path a proposal revision touches, by the revision's digest (the verdict needs
    /// them on every evaluation; a revision never changes, so neither do they).
    touched: Arc<Mutex<HashMap<String, Arc<Vec<String>>>>>,
    claims: Claims,
}

/// Validation of a proposal revision: the dry run in the sandbox, the claims and tests it
/// judges, and what it answers.
#[derive(Clone)]
pub struct Validations {
    pub ctx: crate::engine::context::Handles,
    proposals: Proposals,
    /// Where a validation's tests run (beside candidate verifications, one bound for both).
    background: Arc<crate::engine::background::Background>,
}

/// The journaled apply, its transactions, their control actions and their recovery.
#[derive(Clone)]
pub struct Applies {
    pub ctx: crate::engine::context::Handles,
    /// One apply lock per configured workspace: applies, control actions and the recovery of
    /// a workspace's transactions take turns (the store's fence covers other processes).
    locks: Arc<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    claims: Claims,
    proposals: Proposals,
    validations: Validations,
}

impl Claims {
    pub fn new(ctx: crate::engine::context::Handles) -> Claims {
        Claims { ctx }
    }
}

impl Proposals {
    pub fn new(ctx: crate::engine::context::Handles) -> Proposals {
        Proposals {
            claims: Claims::new(ctx.clone()),
            ctx,
            touched: Arc::default(),
        }
    }

    /// The claims workflow these proposals share.
    pub fn claims(&self) -> Claims {
        self.claims.clone()
    }
}

impl Validations {
    pub fn new(
        proposals: Proposals,
        background: Arc<crate::engine::background::Background>,
    ) -> Validations {
        Validations {
            ctx: proposals.ctx.clone(),
            proposals,
            background,
        }
    }
}

impl Applies {
    pub fn new(
        proposals: Proposals,
        background: Arc<crate::engine::background::Background>,
    ) -> Applies {
        let locks = proposals
            .ctx
            .config
            .workspaces
            .keys()
            .map(|w| (w.clone(), Arc::default()))
            .collect();
        Applies {
            ctx: proposals.ctx.clone(),
            locks: Arc::new(locks),
            claims: proposals.claims.clone(),
            validations: Validations::new(proposals.clone(), background),
            proposals,
        }
    }

    /// The apply lock of a configured workspace.
    pub fn apply_lock(
        &self,
        workspace_id: &str,
    ) -> Result<Arc<tokio::sync::Mutex<()>>, crate::engine::error::ServiceError> {
        self.locks.get(workspace_id).cloned().ok_or_else(|| {
            crate::engine::error::ServiceError::internal(format!(
                "workspace {workspace_id:?} has no apply lock"
            ))
        })
    }
}

/// A text field a client sends: at most `max` bytes, not blank when `required`, and never a
/// NUL (it would cut the text short wherever a C string or a terminal shows it).
pub(super) fn check_text_field(
    field: &str,
    v: &str,
    required: bool,
    max: usize,
) -> Result<(), crate::engine::error::ServiceError> {
    use crate::engine::error::ServiceError;
    if (required && v.trim().is_empty()) || v.len() > max {
        return Err(ServiceError::invalid_field(
            field,
            format!(
                "{field} must be {}..={max} bytes{}",
                u8::from(required),
                if required { " and not blank" } else { "" }
            ),
        ));
    }
    if let Some(at) = v.find('\0') {
        return Err(ServiceError::invalid_field(
            field,
            format!("{field} holds a NUL character at byte {at}; text fields never do"),
        ));
    }
    Ok(())
}
