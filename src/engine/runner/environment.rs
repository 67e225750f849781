//! The environment builder: maps a server-side profile to the full runtime spec and its hashes.
//! The caller only ever names the profile.

use crate::config::{CheckoutFilesystem, Profile};
use crate::sandbox::seccomp::SeccompProfile;
use crate::sandbox::{ContainerRuntime, RuntimeSpec};
use crate::staging::CheckoutFs;

/// The resolved environment: everything that decides how a job runs, except its argv.
#[derive(Debug, Clone)]
pub struct EnvironmentSpec {
    pub profile: String,
    /// The image reference the profile names (its resolved id is in `runtime`).
    pub image: String,
    /// The container as the sandbox renders it.
    pub runtime: RuntimeSpec,
    /// CPUs as configured (the container gets `runtime.nano_cpus`).
    pub cpus: f64,
    /// The job's checkout filesystem and its disk and inode quota.
    pub checkout_fs: CheckoutFs,
    pub setup_script_sha256: String,
    /// `runtime` as the engine that runs the job renders it (see
    /// [`ContainerRuntime::environment_form`]).
    container: serde_json::Value,
    /// The dependency set's key and the files it is made from, when the profile has one.
    pub dependencies: Option<DependencyInputs>,
    /// What the job's command runs first to use its dependency set (its `PATH`).
    prelude: String,
}

/// What `environment_sha256` names of a job's dependency set: its key (the digest of its
/// inputs: the files below, the profile's dependency definition, the image id) and the
/// revision's files it is made from with their SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DependencyInputs {
    pub key: String,
    pub lockfiles: std::collections::BTreeMap<String, String>,
}

pub use crate::canonical::sha256_hex;

impl EnvironmentSpec {
    /// Resolves `profile` with the image id `engine` reported for its image, rendered as
    /// `engine` renders environments.
    pub fn resolve(
        engine: &dyn ContainerRuntime,
        profile: &Profile,
        image_id: &str,
        seccomp: &SeccompProfile,
        fs: CheckoutFilesystem,
    ) -> EnvironmentSpec {
        let checkout_fs = match fs {
            CheckoutFilesystem::Loop => CheckoutFs::Loop {
                disk_bytes: profile.disk_bytes,
                inodes: profile.inodes,
            },
            CheckoutFilesystem::Directory => CheckoutFs::Directory,
        };
        let runtime = RuntimeSpec {
            image_id: image_id.to_string(),
            user: profile.user(),
            working_dir: profile.working_dir.clone(),
            env: profile.env.clone(),
            memory_bytes: profile.memory_bytes,
            nano_cpus: (profile.cpus * 1e9).round() as i64,
            pids: profile.pids,
            tmp_bytes: profile.tmp_bytes,
            seccomp_json: seccomp.compact_json.clone(),
            workspace_read_only: false,
            deps: None,
            isolation: profile.runtime,
        };
        EnvironmentSpec {
            profile: profile.name.clone(),
            image: profile.image.clone(),
            container: engine.environment_form(&runtime),
            runtime,
            cpus: profile.cpus,
            checkout_fs,
            setup_script_sha256: sha256_hex(profile.setup_script.as_bytes()),
            dependencies: None,
            prelude: String::new(),
        }
    }

    /// The same environment with the profile's dependency set: mounted read-only at `/deps`,
    /// each ecosystem's variables in the environment and its executables first on `PATH`, and
    /// the set's inputs named in `environment_sha256`.
    pub fn with_dependencies(
        mut self,
        engine: &dyn ContainerRuntime,
        deps: &[crate::deps::spec::Dependency],
        inputs: DependencyInputs,
    ) -> EnvironmentSpec {
        for d in deps {
            self.runtime.env.extend(d.job_env());
        }
        self.runtime.deps = Some(crate::sandbox::spec::DepsMount { read_only: true });
        self.container = engine.environment_form(&self.runtime);
        self.prelude = crate::deps::spec::job_prelude(deps);
        self.dependencies = Some(inputs);
        self
    }

    /// Canonical serialization: compact JSON with sorted keys, holding the container exactly as
    /// its engine renders it (minus per-run fields) and what decides the job outside it (the
    /// profile and image names, the checkout filesystem, the setup script's digest).
    pub fn canonical_json(&self) -> String {
        let mut v = serde_json::json!({
            "profile": self.profile,
            "image": self.image,
            "checkout_fs": self.checkout_fs,
            "setup_script_sha256": self.setup_script_sha256,
            "container": self.container,
        });
        // Absent without dependencies, so every environment without them hashes as before.
        if let Some(d) = &self.dependencies {
            v["dependencies"] = serde_json::to_value(d).expect("dependency inputs serialize");
        }
        crate::canonical::to_string(&v)
    }

    /// SHA-256 of the canonical serialization.
    pub fn sha256(&self) -> String {
        sha256_hex(self.canonical_json().as_bytes())
    }

    /// The command the container runs: argv itself, or the setup script followed by argv in the
    /// same shell process (`exec`), so the script's failure fails the job.
    pub fn command(&self, setup_script: &str, argv: &[String]) -> Vec<String> {
        if setup_script.is_empty() && self.prelude.is_empty() {
            return argv.to_vec();
        }
        let mut cmd = vec![
            "/bin/sh".to_string(),
            "-c".to_string(),
            format!("set -e\n{}{setup_script}\nexec \"$@\"", self.prelude),
            "airlock-setup".to_string(),
        ];
        cmd.extend(argv.iter().cloned());
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::sandbox::fake::FakeRuntime;
    const L: CheckoutFilesystem = CheckoutFilesystem::Loop;

    #[test]
    fn hash_covers_every_input_and_is_stable() {
        let seccomp = crate::sandbox::seccomp::load().unwrap();
        let c = Config::builtin();
        let p = c.profile("default").unwrap().clone();
        let base =
            EnvironmentSpec::resolve(&FakeRuntime::new(), &p, "sha256:1", &seccomp, L).sha256();
        assert_eq!(
            base,
            EnvironmentSpec::resolve(&FakeRuntime::new(), &p, "sha256:1", &seccomp, L).sha256()
        );
        assert_ne!(
            base,
            EnvironmentSpec::resolve(&FakeRuntime::new(), &p, "sha256:2", &seccomp, L).sha256()
        );
        let mut q = p.clone();
        q.memory_bytes += 1;
        assert_ne!(
            base,
            EnvironmentSpec::resolve(&FakeRuntime::new(), &q, "sha256:1", &seccomp, L).sha256()
        );
        let mut q = p.clone();
        q.env.insert("X".into(), "1".into());
        assert_ne!(
            base,
            EnvironmentSpec::resolve(&FakeRuntime::new(), &q, "sha256:1", &seccomp, L).sha256()
        );
        let mut q = p.clone();
        q.setup_script = "echo hi".into();
        assert_ne!(
            base,
            EnvironmentSpec::resolve(&FakeRuntime::new(), &q, "sha256:1", &seccomp, L).sha256()
        );
        let mut q = p.clone();
        q.disk_bytes += 4096;
        assert_ne!(
            base,
            EnvironmentSpec::resolve(&FakeRuntime::new(), &q, "sha256:1", &seccomp, L).sha256()
        );
        let mut q = p.clone();
        q.inodes += 1;
        assert_ne!(
            base,
            EnvironmentSpec::resolve(&FakeRuntime::new(), &q, "sha256:1", &seccomp, L).sha256()
        );
        let dir = CheckoutFilesystem::Directory;
        assert_ne!(
            base,
            EnvironmentSpec::resolve(&FakeRuntime::new(), &p, "sha256:1", &seccomp, dir).sha256()
        );
        let mut s2 = seccomp.clone();
        s2.compact_json.push(' ');
        assert_ne!(
            base,
            EnvironmentSpec::resolve(&FakeRuntime::new(), &p, "sha256:1", &s2, L).sha256()
        );
    }

    /// The environment hash of the built-in default profile on image `sha256:1` with the
    /// repository's seccomp profile, as recorded before the runtime seam rendered it. Changing
    /// the hardening, the seccomp profile or the built-in profile changes it on purpose: then
    /// update it here, knowing every new run's `environment_sha256` changes with it. (Last
    /// changed when the create body began to name its OCI runtime, `HostConfig.Runtime`, so a
    /// profile's isolation level is part of the hash.)
    const STORED_DEFAULT_HASH: &str =
        "bb289e07f740e76ffbdf1d891e6032b4d7bd3c626ad09df0df114839e9f8a66d";

    #[test]
    fn the_docker_rendering_keeps_the_recorded_hash() {
        let seccomp = crate::sandbox::seccomp::load().unwrap();
        let p = Config::builtin().profile("default").unwrap().clone();
        let spec = EnvironmentSpec::resolve(&FakeRuntime::new(), &p, "sha256:1", &seccomp, L);
        assert_eq!(
            spec.container,
            crate::sandbox::docker::render::hashed_form(&spec.runtime),
            "the fake renders as Docker does"
        );
        assert_eq!(
            spec.sha256(),
            STORED_DEFAULT_HASH,
            "{}",
            spec.canonical_json()
        );
    }

    #[test]
    fn setup_script_wraps_argv() {
        let seccomp = crate::sandbox::seccomp::load().unwrap();
        let p = Config::builtin().profile("default").unwrap().clone();
        let spec = EnvironmentSpec::resolve(&FakeRuntime::new(), &p, "x", &seccomp, L);
        let argv = vec!["make".to_string(), "test".to_string()];
        assert_eq!(spec.command("", &argv), argv);
        let cmd = spec.command("export A=1", &argv);
        assert_eq!(cmd[0], "/bin/sh");
        assert!(cmd[2].contains("export A=1") && cmd[2].ends_with("exec \"$@\""));
        assert_eq!(&cmd[4..], &argv[..]);
    }
}
