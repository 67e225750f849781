//! Why a run did not produce a settled verification, and how each reason reaches the API.

use crate::engine::error::Refusal;
use crate::sandbox::SandboxError;
use crate::staging::StagingError;

/// Why a run did not produce a settled verification.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Refused before anything ran or was recorded, naming the field when it is about one.
    #[error("{0}")]
    Refused(Refusal),
    /// Refused because the host is short of a resource (disk space); nothing ran.
    #[error("{0}")]
    Exhausted(Refusal),
    /// Recording conflicted with a durable idempotency binding; nothing new was recorded.
    #[error("{0}")]
    Conflict(String),
    /// Something the run needs is not available now (the ids of the built images, while the
    /// engine they are built on has never answered); nothing was recorded. Retry later.
    #[error("{0}")]
    Unavailable(String),
    /// git failed while the revision was resolved (not: the revision does not exist).
    #[error("resolving the revision: {0}")]
    Git(#[source] StagingError),
    /// The container engine failed while the image was resolved (not: the image is not built).
    #[error("resolving the image: {0}")]
    Runtime(#[source] SandboxError),
    /// A host operation failed before anything was recorded (the data dir's free space, the
    /// worker lock): a malfunction, not a refusal of the request.
    #[error("{what}: {source}")]
    Host {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Something that cannot happen did (a fresh creation key already locked).
    #[error("{0}")]
    Invariant(&'static str),
    /// The store failed to record the `running` row; nothing ran.
    #[error("cannot record the verification: {0}")]
    Record(#[source] crate::store::StoreError),
    /// The recovery artifact of a result could not be written, so its row was not settled;
    /// recovery will settle it (never as a pass).
    #[error("cannot write the artifact of {verification_id}: {source}")]
    Artifact {
        verification_id: String,
        #[source]
        source: crate::artifacts::ArtifactIoError,
    },
    /// The store failed to settle a verification whose artifact is durable; recovery will
    /// settle it from the artifact.
    #[error("cannot settle {verification_id}: {source}")]
    Settle {
        verification_id: String,
        #[source]
        source: crate::store::StoreError,
    },
}

impl RunError {
    /// Whether Airlock malfunctioned (as opposed to refusing the request or losing a race).
    pub fn is_malfunction(&self) -> bool {
        match self {
            RunError::Refused(_)
            | RunError::Exhausted(_)
            | RunError::Conflict(_)
            | RunError::Unavailable(_) => false,
            RunError::Git(_)
            | RunError::Runtime(_)
            | RunError::Host { .. }
            | RunError::Invariant(_)
            | RunError::Record(_)
            | RunError::Artifact { .. }
            | RunError::Settle { .. } => true,
        }
    }

    pub(crate) fn refused(field: &str, message: impl std::fmt::Display) -> RunError {
        RunError::Refused(Refusal::about(field, message.to_string()))
    }

    /// A git failure: a refusal when it is about what the request named (no repository there,
    /// no such revision), a malfunction otherwise.
    pub(crate) fn from_git(e: StagingError) -> RunError {
        match e {
            // The error names no field; the refusal names it once.
            StagingError::NotARepository { .. } => RunError::refused("repo", format!("repo: {e}")),
            StagingError::UnknownRevision { .. } | StagingError::InvalidRevision(_) => {
                RunError::refused("rev", format!("rev: {e}"))
            }
            StagingError::Git { .. }
            | StagingError::OutputTooLarge { .. }
            | StagingError::Space(_)
            | StagingError::Volume(_)
            | StagingError::EngineUnresponsive(_)
            | StagingError::TreeReplaced { .. }
            | StagingError::Io { .. } => RunError::Git(e),
        }
    }

    /// An image lookup failure: a refusal when the profile's image is not built, a
    /// malfunction otherwise.
    pub(super) fn from_image(e: SandboxError) -> RunError {
        match e {
            SandboxError::ImageMissing { .. } => RunError::refused("profile", e),
            e => RunError::Runtime(e),
        }
    }
}

impl From<RunError> for crate::engine::error::ServiceError {
    fn from(e: RunError) -> Self {
        use crate::engine::error::Internal;
        use crate::engine::error::ServiceError;
        let internal = |i: Internal| ServiceError::Internal(std::sync::Arc::new(i));
        match e {
            RunError::Refused(r) => ServiceError::FailedPrecondition(r),
            RunError::Exhausted(r) => ServiceError::ResourceExhausted(r),
            RunError::Conflict(m) => ServiceError::Conflict(m),
            RunError::Unavailable(m) => ServiceError::Unavailable(m),
            RunError::Git(e) => internal(Internal::Git(e)),
            RunError::Runtime(e) => internal(Internal::Runtime(e)),
            RunError::Host { what, source } => internal(Internal::Io {
                what: what.to_string(),
                source,
            }),
            RunError::Invariant(m) => internal(Internal::Invariant(m.to_string())),
            RunError::Artifact {
                verification_id,
                source,
            } => internal(Internal::Artifact {
                what: format!("writing the artifact of {verification_id}"),
                source,
            }),
            RunError::Record(s) | RunError::Settle { source: s, .. } => ServiceError::from(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malfunction_is_internal_never_a_refusal_or_a_conflict() {
        use crate::store::StoreError;
        let cases = [
            (
                RunError::refused("argv", "argv is empty"),
                false,
                "failed_precondition",
            ),
            (
                RunError::Exhausted("disk".into()),
                false,
                "resource_exhausted",
            ),
            (RunError::Conflict("key".into()), false, "conflict"),
            (
                RunError::Host {
                    what: "creating the worker lock",
                    source: std::io::Error::other("EIO"),
                },
                true,
                "internal",
            ),
            (RunError::Record(StoreError::Closed), true, "internal"),
            (
                RunError::from_git(StagingError::Git {
                    args: "rev-parse".into(),
                    code: Some(128),
                    stderr: "fatal: bad object".into(),
                }),
                true,
                "internal",
            ),
            (
                RunError::from_git(StagingError::UnknownRevision {
                    rev: "nope".into(),
                    repo: "/r".into(),
                }),
                false,
                "failed_precondition",
            ),
            (
                RunError::from_image(SandboxError::ImageMissing {
                    image: "airlock-default".into(),
                }),
                false,
                "failed_precondition",
            ),
            (
                RunError::from_image(SandboxError::Unreachable {
                    endpoint: "unix:///var/run/docker.sock".into(),
                    message: "connection refused".into(),
                }),
                true,
                "internal",
            ),
            (
                RunError::Invariant("a fresh key is locked"),
                true,
                "internal",
            ),
            (
                RunError::Settle {
                    verification_id: "ver_1".into(),
                    source: StoreError::Closed,
                },
                true,
                "internal",
            ),
        ];
        let field = |e: &RunError| {
            crate::engine::error::ServiceError::from(match e {
                RunError::Refused(r) => RunError::Refused(r.clone()),
                _ => RunError::Conflict(String::new()),
            })
            .field()
            .map(str::to_string)
        };
        assert_eq!(field(&cases[0].0).as_deref(), Some("argv"));
        assert_eq!(field(&cases[6].0).as_deref(), Some("rev"));
        assert_eq!(field(&cases[7].0).as_deref(), Some("profile"));
        for (e, malfunction, code) in cases {
            assert_eq!(e.is_malfunction(), malfunction, "{e}");
            let text = e.to_string();
            assert_eq!(
                crate::engine::error::ServiceError::from(e).code(),
                code,
                "{text}"
            );
        }
    }
}
