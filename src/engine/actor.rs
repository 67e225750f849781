//! Who is calling: an actor established by the transport (a token's member, a run's agent, a
//! system task), never read from a request body.

use crate::config::{Config, TokenSubject};
use sha2::{Digest, Sha256};

/// Who is calling, as established by the transport. Never read from JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Member {
        member_id: String,
    },
    Run {
        run_id: String,
        workspace_id: String,
    },
    /// Airlock itself (recovery settling a delivery from its receipt). Never authenticated by a
    /// token; its key `system:<task>` cannot equal any member's or run's, because configured
    /// ids never contain ':'.
    System {
        task: SystemTask,
    },
}

/// What Airlock does on its own behalf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemTask {
    /// The maintenance pass reconciling interrupted deliveries.
    Recovery,
}

impl SystemTask {
    pub fn as_str(self) -> &'static str {
        match self {
            SystemTask::Recovery => "recovery",
        }
    }
}

impl Actor {
    /// Stable key used in idempotency bindings and mutation history.
    pub fn key(&self) -> String {
        match self {
            Actor::Member { member_id } => format!("member:{member_id}"),
            Actor::System { task } => format!("system:{}", task.as_str()),
            Actor::Run {
                run_id,
                workspace_id,
            } => format!("run:{workspace_id}/{run_id}"),
        }
    }
}

/// Resolves a bearer token to an actor. Every configured hash is compared, in constant time, so
/// timing reveals neither which token matched nor how much of it.
pub fn authenticate(config: &Config, bearer: &str) -> Option<Actor> {
    let presented: [u8; 32] = Sha256::digest(bearer.as_bytes()).into();
    let mut found: Option<&TokenSubject> = None;
    for t in &config.tokens {
        let mut diff = 0u8;
        for (a, b) in t.sha256.iter().zip(presented.iter()) {
            diff |= a ^ b;
        }
        if diff == 0 && found.is_none() {
            found = Some(&t.subject);
        }
    }
    found.map(|s| match s {
        TokenSubject::Member { member_id } => Actor::Member {
            member_id: member_id.clone(),
        },
        TokenSubject::Run {
            run_id,
            workspace_id,
        } => Actor::Run {
            run_id: run_id.clone(),
            workspace_id: workspace_id.clone(),
        },
    })
}
