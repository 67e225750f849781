//! What a profile's dependency set is (pure: no I/O). A profile declares the ecosystems whose
//! dependencies its jobs need; each one names the files of the revision its set is made from
//! (a lockfile and its manifest), the command that fetches it in the sandbox into
//! `/deps/<name>`, and what a job's environment needs to use it offline. The set's key is the
//! digest of those files' digests, the profile's dependency definition and the image id.

use crate::limits;
use serde::Serialize;
use std::collections::BTreeMap;

/// Where a job (and a fetch) sees the dependency set.
pub const DEPS_DIR: &str = "/deps";
/// The egress proxy's port inside a fetch container's own network namespace (loopback only).
pub const PROXY_PORT: u16 = 3128;

/// One ecosystem of a profile's dependency set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "ecosystem", rename_all = "snake_case")]
pub enum Dependency {
    /// `Cargo.lock` (with its `Cargo.toml`), vendored with `cargo vendor --locked`: the job's
    /// `CARGO_HOME` points cargo at the vendored sources, so `cargo test --offline` needs no
    /// network. Cargo checks every crate against the lockfile's checksum; no build script
    /// runs while fetching.
    Cargo,
    /// A pip requirements file (`requirements.txt` by default), installed with `pip install
    /// --target` into a read-only directory on the job's `PYTHONPATH` (and its scripts on
    /// `PATH`), so `python3 -m pytest` imports them with no install step. Every requirement
    /// must be pinned (`name==version`); with `binary_only` (the default) only wheels are
    /// installed, so no package's build code runs; with `require_hashes` every pin needs a
    /// `--hash` and pip checks it.
    Pip {
        requirements: String,
        binary_only: bool,
        require_hashes: bool,
    },
    /// `package-lock.json` (with its `package.json`), installed with `npm ci
    /// --ignore-scripts` (no install script runs; npm checks each package's integrity): the
    /// job gets the `node_modules` on `NODE_PATH` and its `.bin` on `PATH`.
    Npm { lockfile: String },
    /// Any other ecosystem: `fetch` runs in the fetch sandbox with the checkout read-only at
    /// the working directory and `$AIRLOCK_DEPS` (= `/deps/<name>`) to fill; `files` are the
    /// revision's files the set is made from; `env` is given to the fetch and to every job
    /// (paths beneath `/deps/<name>`, say).
    Generic {
        name: String,
        files: Vec<String>,
        fetch: Vec<String>,
        env: BTreeMap<String, String>,
    },
}

impl Dependency {
    /// The set's name for this ecosystem: its directory beneath `/deps`.
    pub fn name(&self) -> &str {
        match self {
            Dependency::Cargo => "cargo",
            Dependency::Pip { .. } => "pip",
            Dependency::Npm { .. } => "npm",
            Dependency::Generic { name, .. } => name,
        }
    }

    /// The directory of this ecosystem's part of the set, in a container.
    pub fn dir(&self) -> String {
        format!("{DEPS_DIR}/{}", self.name())
    }

    /// The revision's files the set is made from: each `(path, required)`.
    pub fn files(&self) -> Vec<(String, bool)> {
        match self {
            Dependency::Cargo => vec![("Cargo.lock".into(), true), ("Cargo.toml".into(), true)],
            Dependency::Pip { requirements, .. } => vec![(requirements.clone(), true)],
            Dependency::Npm { lockfile } => {
                vec![(lockfile.clone(), true), ("package.json".into(), true)]
            }
            Dependency::Generic { files, .. } => files.iter().map(|f| (f.clone(), true)).collect(),
        }
    }

    /// The fetch's argv (run with the checkout read-only as the working directory, `HOME` in
    /// `/tmp`, the proxy in the environment).
    pub fn fetch_argv(&self) -> Vec<String> {
        let sh = |script: String| vec!["/bin/sh".to_string(), "-c".to_string(), script];
        let dir = self.dir();
        match self {
            Dependency::Cargo => sh(format!(
                "set -eu\n\
                 export CARGO_HOME=/tmp/airlock-cargo-home CARGO_HTTP_PROXY=\"$HTTPS_PROXY\"\n\
                 mkdir -p {dir}/home\n\
                 cargo vendor --locked --versioned-dirs --quiet {dir}/vendor >/dev/null\n\
                 printf '%s\\n' '[source.crates-io]' 'replace-with = \"airlock-vendored\"' \
                 '[source.airlock-vendored]' 'directory = \"{dir}/vendor\"' '[net]' 'offline = true' \
                 > {dir}/home/config.toml\n"
            )),
            Dependency::Pip {
                requirements,
                binary_only,
                require_hashes,
            } => {
                let mut flags = String::new();
                if *binary_only {
                    flags.push_str(" --only-binary=:all:");
                } else {
                    flags.push_str(" --prefer-binary");
                }
                if *require_hashes {
                    flags.push_str(" --require-hashes");
                }
                sh(format!(
                    "set -eu\n\
                     python3 -m pip install --no-input --disable-pip-version-check --no-cache-dir \
                     --no-warn-script-location --proxy \"$HTTPS_PROXY\" --target {dir}/site \
                     --report {dir}/report.json{flags} -r {}\n",
                    shell_quote(requirements)
                ))
            }
            Dependency::Npm { lockfile } => sh(format!(
                "set -eu\n\
                 mkdir -p {dir}\n\
                 cp -- package.json {dir}/package.json\n\
                 cp -- {} {dir}/package-lock.json\n\
                 cd {dir}\n\
                 npm ci --ignore-scripts --no-audit --no-fund --no-update-notifier \
                 --fetch-retries=1 --fetch-retry-mintimeout=1000 --fetch-retry-maxtimeout=5000 \
                 --cache /tmp/airlock-npm-cache --https-proxy \"$HTTPS_PROXY\" --proxy \"$HTTPS_PROXY\" >&2\n\
                 rm -rf /tmp/airlock-npm-cache\n",
                shell_quote(lockfile)
            )),
            Dependency::Generic { fetch, .. } => fetch.clone(),
        }
    }

    /// What a job's environment gets to use this part of the set.
    pub fn job_env(&self) -> BTreeMap<String, String> {
        let dir = self.dir();
        match self {
            Dependency::Cargo => BTreeMap::from([("CARGO_HOME".into(), format!("{dir}/home"))]),
            Dependency::Pip { .. } => {
                BTreeMap::from([("PYTHONPATH".into(), format!("{dir}/site"))])
            }
            Dependency::Npm { .. } => {
                BTreeMap::from([("NODE_PATH".into(), format!("{dir}/node_modules"))])
            }
            Dependency::Generic { env, .. } => env.clone(),
        }
    }

    /// Directories the job's `PATH` gets in front (the set's executables).
    pub fn job_path(&self) -> Vec<String> {
        let dir = self.dir();
        match self {
            Dependency::Pip { .. } => vec![format!("{dir}/site/bin")],
            Dependency::Npm { .. } => vec![format!("{dir}/node_modules/.bin")],
            Dependency::Cargo | Dependency::Generic { .. } => vec![],
        }
    }
}

/// `s` quoted for `/bin/sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The lines a job's command runs first to use its dependency set (its `PATH`), or nothing.
pub fn job_prelude(deps: &[Dependency]) -> String {
    let path: Vec<String> = deps.iter().flat_map(Dependency::job_path).collect();
    if path.is_empty() {
        return String::new();
    }
    format!("export PATH=\"{}:$PATH\"\n", path.join(":"))
}

/// Why a requirements file does not pin every requirement as the profile demands, naming the
/// file, the line and the package; `Ok` when it does.
pub fn check_pins(file: &str, text: &str, require_hashes: bool) -> Result<(), String> {
    // Continuation lines are one requirement (pip joins them).
    let joined = text.replace("\\\r\n", " ").replace("\\\n", " ");
    let mut any = false;
    for (i, raw) in joined.lines().enumerate() {
        let line = raw.split(" #").next().unwrap_or("").trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        if line.starts_with('-') {
            let option = line.split_whitespace().next().unwrap_or(line);
            return Err(format!(
                "{file} line {n}: option {option} is not allowed: list every pinned requirement in {file} itself (no -r includes, -e editables, -i or --extra-index-url: the index is the fetch's, from its own configuration)"
            ));
        }
        let (spec, options) = match line.find(" --") {
            Some(at) => (line[..at].trim(), &line[at..]),
            None => (line, ""),
        };
        let spec_no_marker = spec.split(';').next().unwrap_or(spec).trim();
        let name_end = spec_no_marker
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .unwrap_or(spec_no_marker.len());
        let name = &spec_no_marker[..name_end];
        if name.is_empty() || spec_no_marker.contains("://") || spec_no_marker.contains(" @ ") {
            return Err(format!(
                "{file} line {n}: {spec:?} is not a name==version requirement (URLs and paths are not pinned by version)"
            ));
        }
        let rest = spec_no_marker[name_end..].trim();
        let rest = match rest.strip_prefix('[') {
            Some(r) => r
                .split_once(']')
                .map(|(_, after)| after.trim())
                .unwrap_or(""),
            None => rest,
        };
        let pinned = rest
            .strip_prefix("==")
            .is_some_and(|v| !v.trim().is_empty() && !v.contains(',') && !v.contains('*'));
        if !pinned {
            return Err(format!(
                "{file} line {n}: {name} is not pinned ({spec:?}); the profile requires every requirement as {name}==<version>"
            ));
        }
        if require_hashes && !options.contains("--hash=") {
            return Err(format!(
                "{file} line {n}: {name} has no --hash; the profile requires hashes (require_hashes)"
            ));
        }
        any = true;
    }
    if !any {
        return Err(format!("{file} lists no requirement"));
    }
    Ok(())
}

/// The inputs a set is made from, and its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetInputs {
    /// The image the fetch runs in (and the jobs that use the set).
    pub image_id: String,
    pub dependencies: Vec<Dependency>,
    /// Every file the set is made from: its path and the SHA-256 of its content at the
    /// revision (`None`: the revision does not have it).
    pub files: BTreeMap<String, Option<String>>,
}

impl SetInputs {
    /// The set's key: the SHA-256 of the canonical form of its inputs.
    pub fn key(&self) -> String {
        let v = serde_json::json!({"version": 1, "inputs": self});
        crate::canonical::sha256_hex(crate::canonical::to_string(&v).as_bytes())
    }

    /// The first required file the revision lacks: `(ecosystem, path)`.
    pub fn missing(&self) -> Option<(String, String)> {
        self.dependencies.iter().find_map(|d| {
            d.files()
                .into_iter()
                .find(|(f, required)| *required && self.files.get(f).is_none_or(Option::is_none))
                .map(|(f, _)| (d.name().to_string(), f))
        })
    }
}

pub use crate::verification::Resolved;

/// Packages a `Cargo.lock` pins from a registry (those with a checksum), in its order.
pub fn cargo_resolved(lock: &str) -> Vec<Resolved> {
    let Ok(v) = lock.parse::<toml::Table>() else {
        return vec![];
    };
    let Some(packages) = v.get("package").and_then(|p| p.as_array()) else {
        return vec![];
    };
    packages
        .iter()
        .filter_map(|p| {
            let name = p.get("name")?.as_str()?;
            let version = p.get("version")?.as_str()?;
            let checksum = p.get("checksum")?.as_str()?;
            Some(Resolved {
                uri: format!("pkg:cargo/{name}@{version}"),
                digest: BTreeMap::from([("sha256".into(), checksum.into())]),
            })
        })
        .collect()
}

/// Packages pip's install report (`--report`) says it installed, with their archives' digests.
pub fn pip_resolved(report: &str) -> Vec<Resolved> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(report) else {
        return vec![];
    };
    let mut out: Vec<Resolved> = v["install"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| {
            let name = i["metadata"]["name"].as_str()?;
            let version = i["metadata"]["version"].as_str()?;
            let mut digest = BTreeMap::new();
            if let Some(hashes) = i["download_info"]["archive_info"]["hashes"].as_object() {
                for (algo, h) in hashes {
                    if let Some(h) = h.as_str() {
                        digest.insert(algo.clone(), h.to_string());
                    }
                }
            } else if let Some(h) = i["download_info"]["archive_info"]["hash"].as_str()
                && let Some((algo, hex)) = h.split_once('=')
            {
                digest.insert(algo.to_string(), hex.to_string());
            }
            Some(Resolved {
                uri: format!("pkg:pypi/{}@{version}", name.to_ascii_lowercase()),
                digest,
            })
        })
        .collect();
    out.sort();
    out
}

/// Packages a `package-lock.json` (lockfile version 2 or 3) pins, with their integrity.
pub fn npm_resolved(lock: &str) -> Vec<Resolved> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(lock) else {
        return vec![];
    };
    let mut out: Vec<Resolved> = v["packages"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(path, p)| {
            let name = path
                .rsplit("node_modules/")
                .next()
                .filter(|n| !n.is_empty())?;
            if path.is_empty() {
                return None;
            }
            let version = p["version"].as_str()?;
            let integrity = p["integrity"].as_str()?;
            let (algo, value) = integrity.split_once('-')?;
            Some(Resolved {
                uri: format!("pkg:npm/{name}@{version}"),
                digest: BTreeMap::from([(algo.to_string(), value.to_string())]),
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Checks a generic dependency's definition: its name, files, command and environment.
pub fn check_generic(
    name: &str,
    files: &[String],
    fetch: &[String],
    env: &BTreeMap<String, String>,
) -> Result<(), (String, String)> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        || ["cargo", "pip", "npm"].contains(&name)
    {
        return Err((
            "name".into(),
            format!("{name:?} must be 1..=64 of a-z, 0-9, '-' and '_', and not cargo, pip or npm"),
        ));
    }
    if files.is_empty() || files.len() > limits::MAX_DEPENDENCY_FILES {
        return Err((
            "files".into(),
            format!(
                "needs 1..={} files of the revision the set is made from",
                limits::MAX_DEPENDENCY_FILES
            ),
        ));
    }
    for (i, f) in files.iter().enumerate() {
        crate::domain::path::check_repo_path(f).map_err(|m| (format!("files[{i}]"), m))?;
    }
    crate::verification::validate_argv(fetch).map_err(|e| ("fetch".to_string(), e.to_string()))?;
    for k in env.keys() {
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err((
                format!("env.{k}"),
                "names use only letters, digits and '_'".into(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_required_and_every_refusal_names_the_file_line_and_package() {
        let ok = "# pinned\nflask==3.1.1\nrequests[socks]==2.32.3 ; python_version >= \"3.8\"\n\nsix==1.16.0 # trailing\n";
        assert_eq!(check_pins("requirements.txt", ok, false), Ok(()));
        for (text, needle) in [
            ("flask>=3\n", "requirements.txt line 1: flask is not pinned"),
            ("six==1.16.0\nflask\n", "line 2: flask is not pinned"),
            ("flask==3.*\n", "flask is not pinned"),
            ("flask==3.1,<4\n", "flask is not pinned"),
            ("-r other.txt\n", "option -r is not allowed"),
            (
                "--index-url https://example.invalid/simple\nflask==1\n",
                "option --index-url",
            ),
            ("-e .\n", "option -e"),
            (
                "flask @ https://example.invalid/f.whl\n",
                "not a name==version requirement",
            ),
            ("# nothing\n", "lists no requirement"),
        ] {
            let e = check_pins("requirements.txt", text, false).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
        let hashed = "flask==3.1.1 \\\n    --hash=sha256:abc\n";
        assert_eq!(check_pins("r.txt", hashed, true), Ok(()));
        let e = check_pins("r.txt", "flask==3.1.1\n", true).unwrap_err();
        assert!(e.contains("flask has no --hash"), "{e}");
    }

    #[test]
    fn a_key_moves_with_every_input() {
        let base = SetInputs {
            image_id: "sha256:a".into(),
            dependencies: vec![Dependency::Cargo],
            files: BTreeMap::from([
                ("Cargo.lock".into(), Some("1".repeat(64))),
                ("Cargo.toml".into(), Some("2".repeat(64))),
            ]),
        };
        let k = base.key();
        assert_eq!(k, base.clone().key(), "stable");
        let mut other = base.clone();
        other.image_id = "sha256:b".into();
        assert_ne!(other.key(), k);
        let mut other = base.clone();
        other
            .files
            .insert("Cargo.lock".into(), Some("3".repeat(64)));
        assert_ne!(other.key(), k);
        let mut other = base.clone();
        other.dependencies.push(Dependency::Npm {
            lockfile: "package-lock.json".into(),
        });
        assert_ne!(other.key(), k);
        assert_eq!(base.missing(), None);
        let mut lacking = base;
        lacking.files.insert("Cargo.lock".into(), None);
        assert_eq!(
            lacking.missing(),
            Some(("cargo".into(), "Cargo.lock".into()))
        );
    }

    #[test]
    fn resolved_packages_come_from_the_lockfiles_and_pips_report() {
        let lock = "version = 4\n[[package]]\nname = \"itoa\"\nversion = \"1.0.15\"\nsource = \"registry+x\"\nchecksum = \"abc\"\n[[package]]\nname = \"mine\"\nversion = \"0.1.0\"\n";
        assert_eq!(
            cargo_resolved(lock),
            [Resolved {
                uri: "pkg:cargo/itoa@1.0.15".into(),
                digest: BTreeMap::from([("sha256".into(), "abc".into())])
            }]
        );
        let report = r#"{"install": [{"metadata": {"name": "Flask", "version": "3.1.1"},
            "download_info": {"archive_info": {"hashes": {"sha256": "def"}}}}]}"#;
        assert_eq!(pip_resolved(report)[0].uri, "pkg:pypi/flask@3.1.1");
        assert_eq!(pip_resolved(report)[0].digest["sha256"], "def");
        let npm = r#"{"lockfileVersion": 3, "packages": {"": {"name": "app"},
            "node_modules/left-pad": {"version": "1.3.0", "integrity": "sha512-xyz"}}}"#;
        assert_eq!(npm_resolved(npm)[0].uri, "pkg:npm/left-pad@1.3.0");
        assert_eq!(npm_resolved(npm)[0].digest["sha512"], "xyz");
    }
}
