//! The governed patch path (seeds 000 and 003) on workspaces with a `worktree`: claims today;
//! proposals, reviews, policy and apply come next (issues 11-13).

pub mod applying;
pub mod claims;
pub mod contentions;
pub mod control;
pub mod proposals;
pub mod recovering;
pub mod resources;
pub mod reviews;
pub mod validation;
