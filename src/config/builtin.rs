//! The built-in profiles (`default`, `toolchain`, `git`); a config file's profiles are added to
//! them and may override them.

use super::{
    DEFAULT_IMAGE, DEFAULT_PROFILE, GIT_IMAGE, GIT_PROFILE, RawProfile, TOOLCHAIN_IMAGE,
    TOOLCHAIN_PROFILE,
};
use std::collections::BTreeMap;

pub(super) fn profiles() -> BTreeMap<String, RawProfile> {
    let mut m = BTreeMap::new();
    m.insert(
        DEFAULT_PROFILE.to_string(),
        RawProfile {
            engine_labels: vec![],
            dependencies: vec![],
            runtime: None,
            image: DEFAULT_IMAGE.to_string(),
            user: None,
            working_dir: None,
            memory_bytes: None,
            cpus: None,
            pids: None,
            tmp_bytes: None,
            disk_bytes: None,
            inodes: None,
            env: None,
            setup_script: None,
        },
    );
    // Builds need more of everything; HOME and CARGO_HOME live on the writable /tmp tmpfs
    // because the root filesystem is read-only.
    m.insert(
        TOOLCHAIN_PROFILE.to_string(),
        RawProfile {
            engine_labels: vec![],
            dependencies: vec![],
            runtime: None,
            image: TOOLCHAIN_IMAGE.to_string(),
            user: None,
            working_dir: None,
            memory_bytes: Some(2 << 30),
            cpus: Some(2.0),
            pids: Some(1024),
            tmp_bytes: Some(1 << 30),
            disk_bytes: None,
            inodes: None,
            env: Some(BTreeMap::from(
                [
                    ("LANG", "C.UTF-8"),
                    ("HOME", "/tmp"),
                    ("CARGO_HOME", "/tmp/cargo-home"),
                    ("PYTHONDONTWRITEBYTECODE", "1"),
                    (
                        "PATH",
                        "/opt/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    ),
                ]
                .map(|(k, v)| (k.to_string(), v.to_string())),
            )),
            setup_script: None,
        },
    );
    // The dry run applies one patch to a handful of files: small limits, git's HOME on /tmp.
    m.insert(
        GIT_PROFILE.to_string(),
        RawProfile {
            engine_labels: vec![],
            dependencies: vec![],
            runtime: None,
            image: GIT_IMAGE.to_string(),
            user: None,
            working_dir: None,
            memory_bytes: Some(512 << 20),
            cpus: Some(1.0),
            pids: Some(128),
            tmp_bytes: Some(256 << 20),
            disk_bytes: None,
            inodes: None,
            env: Some(BTreeMap::from(
                [
                    ("LANG", "C.UTF-8"),
                    ("HOME", "/tmp"),
                    (
                        "PATH",
                        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    ),
                ]
                .map(|(k, v)| (k.to_string(), v.to_string())),
            )),
            setup_script: None,
        },
    );
    m
}
