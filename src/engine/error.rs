//! The errors every API call maps to: a stable code, a message for the caller, and what is
//! behind it as a value: the field a refusal is about, the typed source of a malfunction.

use crate::staging::StagingError;
use crate::store::StoreError;
use std::sync::Arc;

/// A refusal: what was wrong with the request, and the field it is about when there is one
/// (`submissions[2].evidence_ref`, `limit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: Option<String>,
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Refusal {
    /// A refusal about `field`.
    pub fn about(field: impl Into<String>, message: impl Into<String>) -> Refusal {
        Refusal {
            field: Some(field.into()),
            message: message.into(),
        }
    }
}

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal {
            field: None,
            message,
        }
    }
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Self {
        Refusal::from(message.to_string())
    }
}

/// A malfunction of Airlock or what it depends on, with its typed source. Its text can hold
/// host paths and git argv: the API logs it under an error id and never returns it.
#[derive(Debug, thiserror::Error)]
pub enum Internal {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Git(#[from] StagingError),
    #[error(transparent)]
    Runtime(#[from] crate::sandbox::SandboxError),
    /// A stored record that does not decode.
    #[error("{what}: {source}")]
    Record {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// A file operation on the data dir.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Writing or removing a durable artifact.
    #[error("{what}: {source}")]
    Artifact {
        what: String,
        #[source]
        source: crate::artifacts::ArtifactIoError,
    },
    /// An invariant that did not hold, or a failure without a typed source.
    #[error("{0}")]
    Invariant(String),
}

/// Stable error codes of the API.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    InvalidArgument(Refusal),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    FailedPrecondition(Refusal),
    #[error("{0}")]
    ResourceExhausted(Refusal),
    #[error("{0}")]
    Internal(Arc<Internal>),
    #[error("{0}")]
    Unavailable(String),
    /// The client did not send its request in time.
    #[error("{0}")]
    DeadlineExceeded(String),
}

impl ServiceError {
    pub fn code(&self) -> &'static str {
        match self {
            ServiceError::InvalidArgument(_) => "invalid_argument",
            ServiceError::Unauthenticated(_) => "unauthenticated",
            ServiceError::PermissionDenied(_) => "permission_denied",
            ServiceError::NotFound(_) => "not_found",
            ServiceError::Conflict(_) => "conflict",
            ServiceError::FailedPrecondition(_) => "failed_precondition",
            ServiceError::ResourceExhausted(_) => "resource_exhausted",
            ServiceError::Internal(_) => "internal",
            ServiceError::Unavailable(_) => "unavailable",
            ServiceError::DeadlineExceeded(_) => "deadline_exceeded",
        }
    }

    /// The request field a refusal is about, when it names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ServiceError::InvalidArgument(r)
            | ServiceError::FailedPrecondition(r)
            | ServiceError::ResourceExhausted(r) => r.field.as_deref(),
            ServiceError::Unauthenticated(_)
            | ServiceError::PermissionDenied(_)
            | ServiceError::NotFound(_)
            | ServiceError::Conflict(_)
            | ServiceError::Internal(_)
            | ServiceError::Unavailable(_)
            | ServiceError::DeadlineExceeded(_) => None,
        }
    }

    /// `invalid_argument`.
    pub fn invalid(r: impl Into<Refusal>) -> ServiceError {
        ServiceError::InvalidArgument(r.into())
    }

    /// `invalid_argument` about one field.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> ServiceError {
        ServiceError::InvalidArgument(Refusal {
            field: Some(field.into()),
            message: message.into(),
        })
    }

    /// `failed_precondition`.
    pub fn precondition(r: impl Into<Refusal>) -> ServiceError {
        ServiceError::FailedPrecondition(r.into())
    }

    /// `failed_precondition` about one field.
    pub fn precondition_field(
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ServiceError {
        ServiceError::FailedPrecondition(Refusal {
            field: Some(field.into()),
            message: message.into(),
        })
    }

    /// `resource_exhausted`.
    pub fn exhausted(r: impl Into<Refusal>) -> ServiceError {
        ServiceError::ResourceExhausted(r.into())
    }

    /// `resource_exhausted` about one field.
    pub fn exhausted_field(field: impl Into<String>, message: impl Into<String>) -> ServiceError {
        ServiceError::ResourceExhausted(Refusal {
            field: Some(field.into()),
            message: message.into(),
        })
    }

    /// `internal`: an invariant that did not hold.
    pub fn internal(message: impl Into<String>) -> ServiceError {
        ServiceError::Internal(Arc::new(Internal::Invariant(message.into())))
    }

    /// `internal`: a file operation failed.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> ServiceError {
        ServiceError::Internal(Arc::new(Internal::Io {
            what: what.into(),
            source,
        }))
    }

    /// `internal`: an artifact could not be written or removed.
    pub fn artifact(
        what: impl Into<String>,
        source: crate::artifacts::ArtifactIoError,
    ) -> ServiceError {
        ServiceError::Internal(Arc::new(Internal::Artifact {
            what: what.into(),
            source,
        }))
    }

    /// `internal`: a stored record that does not decode.
    pub fn record(what: impl Into<String>, source: serde_json::Error) -> ServiceError {
        ServiceError::Internal(Arc::new(Internal::Record {
            what: what.into(),
            source,
        }))
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(m) => ServiceError::Conflict(m),
            StoreError::Precondition { field, message } => {
                ServiceError::FailedPrecondition(Refusal {
                    field: field.map(str::to_string),
                    message,
                })
            }
            StoreError::IllegalTransition(t) => ServiceError::from(t),
            other => ServiceError::Internal(Arc::new(Internal::Store(other))),
        }
    }
}

/// An apply step's error: what the worktree or the rollback artifact refuses is a
/// precondition the operator can act on; an I/O failure is a malfunction with its source.
impl From<crate::install::ApplyError> for ServiceError {
    fn from(e: crate::install::ApplyError) -> Self {
        use crate::install::ApplyError as A;
        match e {
            A::Io { path, op, source } => ServiceError::Internal(Arc::new(Internal::Io {
                what: format!("{op} {path:?} in the worktree"),
                source,
            })),
            e @ (A::Refused { .. } | A::Artifact(_) | A::ArtifactMissing(_)) => {
                ServiceError::precondition(e.to_string())
            }
        }
    }
}

impl ServiceError {
    /// A governed worktree that cannot be opened: a malfunction (start-up checked it).
    pub fn worktree(source: std::io::Error) -> ServiceError {
        ServiceError::Internal(Arc::new(Internal::Io {
            what: "opening the governed worktree".into(),
            source,
        }))
    }
}

impl From<crate::domain::IllegalTransition> for ServiceError {
    fn from(e: crate::domain::IllegalTransition) -> Self {
        ServiceError::precondition(e.to_string())
    }
}

impl From<StagingError> for ServiceError {
    fn from(e: StagingError) -> Self {
        ServiceError::Internal(Arc::new(Internal::Git(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apply_io_failure_is_a_malfunction_and_a_refusal_a_precondition() {
        use crate::install::ApplyError;
        let io = ServiceError::from(ApplyError::Io {
            path: "a.txt".into(),
            op: "rename",
            source: std::io::Error::other("EIO"),
        });
        assert_eq!(io.code(), "internal");
        let refused = ServiceError::from(ApplyError::Refused {
            path: "a.txt".into(),
            reason: "changed since it was validated".into(),
        });
        assert_eq!(refused.code(), "failed_precondition");
        assert!(refused.to_string().contains("a.txt"), "{refused}");
        let missing = ServiceError::from(ApplyError::ArtifactMissing("txn_1".into()));
        assert_eq!(missing.code(), "failed_precondition");
        assert_eq!(
            ServiceError::worktree(std::io::Error::other("gone")).code(),
            "internal"
        );
    }

    #[test]
    fn refusals_keep_their_field_and_malfunctions_their_source() {
        let e = ServiceError::invalid_field("limit", "limit is 0; it must be between 1 and 100");
        assert_eq!(e.code(), "invalid_argument");
        assert_eq!(e.field(), Some("limit"));
        assert_eq!(e.to_string(), "limit is 0; it must be between 1 and 100");
        assert_eq!(ServiceError::invalid("body is empty").field(), None);
        let git = ServiceError::from(StagingError::InvalidRevision("x".into()));
        let ServiceError::Internal(inner) = &git else {
            panic!("{git:?}");
        };
        assert!(matches!(
            **inner,
            Internal::Git(StagingError::InvalidRevision(_))
        ));
        assert_eq!(git.code(), "internal");
        assert_eq!(
            ServiceError::from(StoreError::Conflict("moved".into())).code(),
            "conflict"
        );
    }
}
