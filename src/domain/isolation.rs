//! Isolation levels: the OCI runtime a job's container runs under, chosen per profile by the
//! server. `runc` (the default) runs the job on the host's kernel behind namespaces, seccomp and
//! dropped capabilities; `runsc` (gVisor) puts a user-space kernel between the job and the host:
//! the job's system calls are served by gVisor's Sentry, and only a small, fixed set reaches
//! Linux.

use serde::{Deserialize, Serialize};

/// The OCI runtime a job's container runs under (its name as the engine registers it).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// runc: namespaces, cgroups, seccomp and dropped capabilities on the host's kernel.
    #[default]
    Runc,
    /// gVisor's runsc: a user-space kernel between the job and the host.
    Runsc,
}

impl Isolation {
    /// Every level, in order of strength.
    pub const ALL: [Isolation; 2] = [Isolation::Runc, Isolation::Runsc];

    /// The runtime's name, as a profile's `runtime` and an engine's runtimes name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Runc => "runc",
            Isolation::Runsc => "runsc",
        }
    }

    /// The level a runtime name names, if it is one of Airlock's.
    pub fn parse(s: &str) -> Option<Isolation> {
        Isolation::ALL.into_iter().find(|i| i.as_str() == s)
    }
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_parse_and_serde() {
        for i in Isolation::ALL {
            assert_eq!(Isolation::parse(i.as_str()), Some(i));
            let json = serde_json::to_string(&i).unwrap();
            assert_eq!(json, format!("\"{}\"", i.as_str()));
            assert_eq!(serde_json::from_str::<Isolation>(&json).unwrap(), i);
        }
        assert_eq!(Isolation::parse("kata"), None);
        assert_eq!(Isolation::default(), Isolation::Runc);
    }
}
