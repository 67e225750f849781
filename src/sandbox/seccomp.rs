//! The seccomp profile every job container runs under (`seccomp/airlock.json`), embedded in the
//! binary so the profile that was reviewed is the profile that runs, and validated at start-up.

use sha2::{Digest, Sha256};

/// The profile text exactly as committed.
pub const PROFILE_JSON: &str = include_str!("../../seccomp/airlock.json");

/// Syscalls that must never be allowed by any rule.
pub const MUST_DENY: &[&str] = &[
    "unshare",
    "setns",
    "mount",
    "umount",
    "umount2",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "pivot_root",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "name_to_handle_at",
];

/// Socket families a job may create: AF_UNIX, AF_INET, AF_INET6, AF_NETLINK.
pub const ALLOWED_SOCKET_FAMILIES: &[u64] = &[1, 2, 10, 16];

/// Why the embedded profile was refused.
#[derive(Debug, thiserror::Error)]
#[error("seccomp profile seccomp/airlock.json is invalid: {0}")]
pub struct SeccompError(String);

/// A validated profile: compact JSON for Docker's `security_opt` and its SHA-256.
#[derive(Debug, Clone)]
pub struct SeccompProfile {
    pub compact_json: String,
    pub sha256: String,
}

/// Validates the embedded profile.
pub fn load() -> Result<SeccompProfile, SeccompError> {
    validate(PROFILE_JSON)
}

/// Validates profile text: default-deny, clone3 answered with ENOSYS, the required denials,
/// socket families restricted, personality restricted to queries, and a comment on every rule.
pub fn validate(text: &str) -> Result<SeccompProfile, SeccompError> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| SeccompError(format!("not JSON: {e}")))?;
    let err = |m: String| Err(SeccompError(m));
    if v["defaultAction"] != "SCMP_ACT_ERRNO" {
        return err("defaultAction must be SCMP_ACT_ERRNO (default deny)".into());
    }
    let Some(rules) = v["syscalls"].as_array() else {
        return err("syscalls must be an array".into());
    };
    let mut clone3_enosys = false;
    for (i, rule) in rules.iter().enumerate() {
        if rule["comment"].as_str().is_none_or(str::is_empty) {
            return err(format!("syscalls[{i}] has no comment"));
        }
        if rule.get("includes").and_then(|x| x.get("caps")).is_some() {
            return err(format!(
                "syscalls[{i}] is capability-gated; jobs drop every capability, so such rules only hide intent"
            ));
        }
        let names: Vec<&str> = rule["names"]
            .as_array()
            .map(|a| a.iter().filter_map(|n| n.as_str()).collect())
            .unwrap_or_default();
        let action = rule["action"].as_str().unwrap_or("");
        if names.contains(&"clone3") {
            if action != "SCMP_ACT_ERRNO" || rule["errnoRet"] != 38 {
                return err("clone3 must return ENOSYS (errnoRet 38), never EPERM".into());
            }
            clone3_enosys = true;
        }
        if action != "SCMP_ACT_ALLOW" {
            continue;
        }
        if let Some(bad) = names.iter().find(|n| MUST_DENY.contains(n)) {
            return err(format!("syscalls[{i}] allows {bad}, which must be denied"));
        }
        let args = rule["args"].as_array();
        if names.contains(&"socket") {
            let ok = args.is_some_and(|a| {
                a.len() == 1
                    && a[0]["index"] == 0
                    && a[0]["op"] == "SCMP_CMP_EQ"
                    && a[0]["value"]
                        .as_u64()
                        .is_some_and(|f| ALLOWED_SOCKET_FAMILIES.contains(&f))
            });
            if !ok {
                return err(format!(
                    "syscalls[{i}] allows socket for a family other than AF_UNIX/AF_INET/AF_INET6/AF_NETLINK"
                ));
            }
        }
        if names.contains(&"personality") {
            let ok = args.is_some_and(|a| {
                a.len() == 1 && a[0]["op"] == "SCMP_CMP_EQ" && a[0]["value"] == 0xffff_ffffu64
            });
            if !ok {
                return err(format!(
                    "syscalls[{i}] allows personality other than the query 0xffffffff"
                ));
            }
        }
        if names.contains(&"clone") {
            let ok = args.is_some_and(|a| {
                a.len() == 1
                    && a[0]["op"] == "SCMP_CMP_MASKED_EQ"
                    && a[0]["value"] == 0x7E02_0000u64
            });
            if !ok {
                return err(format!(
                    "syscalls[{i}] allows clone without masking the namespace flags"
                ));
            }
        }
    }
    if !clone3_enosys {
        return err("no rule answers clone3 with ENOSYS".into());
    }
    let compact_json = serde_json::to_string(&v).expect("a parsed JSON value serializes");
    let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
    Ok(SeccompProfile {
        compact_json,
        sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_profile_is_valid() {
        let p = load().unwrap();
        assert_eq!(p.sha256.len(), 64);
        assert!(p.compact_json.len() < PROFILE_JSON.len());
    }

    fn mutate(f: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v: serde_json::Value = serde_json::from_str(PROFILE_JSON).unwrap();
        f(&mut v);
        v.to_string()
    }

    #[test]
    fn weakened_profiles_are_refused() {
        let allow_unshare = mutate(|v| {
            v["syscalls"][0]["names"]
                .as_array_mut()
                .unwrap()
                .push("unshare".into())
        });
        assert!(
            validate(&allow_unshare)
                .unwrap_err()
                .to_string()
                .contains("unshare")
        );

        let clone3_eperm = mutate(|v| {
            for r in v["syscalls"].as_array_mut().unwrap() {
                if r["names"][0] == "clone3" {
                    r["errnoRet"] = 1.into();
                }
            }
        });
        assert!(
            validate(&clone3_eperm)
                .unwrap_err()
                .to_string()
                .contains("ENOSYS")
        );

        let packet_socket = mutate(|v| {
            for r in v["syscalls"].as_array_mut().unwrap() {
                if r["names"][0] == "socket" {
                    r["args"][0]["value"] = 17.into();
                }
            }
        });
        assert!(
            validate(&packet_socket)
                .unwrap_err()
                .to_string()
                .contains("socket")
        );

        let allow_all = mutate(|v| v["defaultAction"] = "SCMP_ACT_ALLOW".into());
        assert!(validate(&allow_all).is_err());

        let no_comment = mutate(|v| {
            v["syscalls"][1].as_object_mut().unwrap().remove("comment");
        });
        assert!(
            validate(&no_comment)
                .unwrap_err()
                .to_string()
                .contains("comment")
        );
        assert!(validate("{").is_err());
    }
}
