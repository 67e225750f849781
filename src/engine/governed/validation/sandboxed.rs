//! The validation's sandbox jobs: the dry run (git applies the patch to a scratch index of the
//! touched paths' current bytes, inside a container; trusted code harvests the post-images)
//! and the expected tests (verifications of the worktree's HEAD tree with the post-images).

use super::{PostImage, Record};
use crate::engine::governed::Validations;
use crate::install::{Fingerprint, Image};
use crate::limits;
use crate::verification::Status;

/// The dry run's script (bash in the git image): index the pre-images exactly (no filters, no
/// attributes), apply the patch to the index, and check the resulting index out to `out/tree/`
/// with its modes. A constant number of processes whatever the patch touches: the pre-images
/// come as one `git fast-import` stream (a commit of exactly those paths, modes and bytes),
/// read into the index by one `read-tree`, and the result is written out by one
/// `checkout-index`; `info/attributes`, which outranks every `.gitattributes` the patch may
/// bring, turns every conversion off. The scratch repository lives beneath the checkout and is
/// named by relative paths: an absolute path through the image's root costs a FUSE round trip
/// per lookup on some storage drivers, which made each object written several times slower.
const DRY_RUN_SCRIPT: &str = r#"set -euo pipefail
export HOME=/tmp GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0
cd /workspace
git init -q --bare .dry
export GIT_DIR=.dry GIT_INDEX_FILE=.dry/index GIT_WORK_TREE=.
git config core.autocrlf false
git config core.symlinks true
mkdir -p .dry/info
printf '* -text -eol -crlf -ident -filter -working-tree-encoding\n' > .dry/info/attributes
git fast-import --quiet < pre.stream
git read-tree refs/heads/pre
git apply --cached --check --whitespace=nowarn dry-run.patch
git apply --cached --whitespace=nowarn dry-run.patch
mkdir -p out/tree
git checkout-index -a -f --prefix=out/tree/
echo "dry run: applied"
"#;

/// The pre-images as a `git fast-import` stream: each existing one's bytes (a link's target)
/// as a blob, then one commit `refs/heads/pre` holding exactly them at their paths and modes.
fn pre_stream(pre: &[(String, Image)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut entries = vec![];
    for (path, img) in pre {
        let content = match img {
            Image::Absent => continue,
            Image::File { bytes, .. } => bytes.as_slice(),
            Image::Symlink { target } => target.as_bytes(),
        };
        let mark = entries.len() + 1;
        out.extend_from_slice(format!("blob\nmark :{mark}\ndata {}\n", content.len()).as_bytes());
        out.extend_from_slice(content);
        out.push(b'\n');
        let mode = image_mode(img).expect("an existing image has a mode");
        entries.push((mode, mark, path));
    }
    out.extend_from_slice(
        b"commit refs/heads/pre\ncommitter airlock <airlock@localhost> 0 +0000\ndata 0\n",
    );
    for (mode, mark, path) in entries {
        out.extend_from_slice(format!("M {mode} :{mark} ").as_bytes());
        out.extend_from_slice(&fast_import_path(path));
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// A path as fast-import reads it: verbatim to the end of the line, unless it starts with a
/// double quote or holds a line feed or another control character, which git's C-style
/// quoting spells.
fn fast_import_path(path: &str) -> Vec<u8> {
    let plain = !path.starts_with('"') && !path.bytes().any(|b| b < 0x20 || b == 0x7f);
    if plain {
        return path.as_bytes().to_vec();
    }
    let mut out = vec![b'"'];
    for b in path.bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
    out
}

fn image_mode(i: &Image) -> Option<&'static str> {
    match i {
        Image::Absent => None,
        Image::File {
            executable: true, ..
        } => Some("100755"),
        Image::File {
            executable: false, ..
        } => Some("100644"),
        Image::Symlink { .. } => Some("120000"),
    }
}

impl Validations {
    /// The sandboxed dry run: fills `rec`'s pre- and post-images, or says why it failed.
    pub(super) async fn dry_run(
        &self,
        workspace_id: &str,
        worktree: &std::path::Path,
        patch: &crate::patch::Patch,
        bytes: &[u8],
        rec: &mut Record,
    ) -> Result<String, String> {
        // The parser's paths: every side of every change; copy sources are read, not changed.
        let mut read_paths: Vec<String> = vec![];
        let mut changed_paths: Vec<String> = vec![];
        for f in &patch.files {
            for path in f.paths() {
                if !read_paths.iter().any(|p| p == path) {
                    read_paths.push(path.to_string());
                }
            }
            let copy_source = matches!(f.kind, crate::patch::ChangeKind::Copy);
            for path in f.paths() {
                let is_source = copy_source && f.old_path.as_deref() == Some(path);
                if !is_source && !changed_paths.iter().any(|p| p == path) {
                    changed_paths.push(path.to_string());
                }
            }
        }
        let wt = worktree.to_path_buf();
        let paths = read_paths.clone();
        let pre: Vec<(String, Image)> = tokio::task::spawn_blocking(move || {
            let root = crate::beneath::Root::open(&wt).map_err(|e| e.to_string())?;
            paths
                .into_iter()
                .map(|p| {
                    crate::install::current(&root, &p)
                        .map(|i| (p, i))
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .await
        .expect("reading pre-images does not panic")?;
        rec.pre_images = pre
            .iter()
            .map(|(p, i)| (p.clone(), i.fingerprint()))
            .collect();

        // The job's input: the pre-images as one fast-import stream, and the patch.
        let repo = self.ctx.repo(workspace_id).clone();
        let patch_bytes = bytes.to_vec();
        let stream = pre_stream(&pre);
        let commit = tokio::task::spawn_blocking(move || -> Result<String, String> {
            let e = |x: crate::staging::StagingError| x.to_string();
            let regular = crate::domain::git::FileMode::Regular;
            let mut edits: Vec<(String, Option<(String, crate::domain::git::FileMode)>)> = vec![(
                "pre.stream".into(),
                Some((repo.write_blob(&stream).map_err(e)?, regular)),
            )];
            edits.push((
                "dry-run.patch".into(),
                Some((repo.write_blob(&patch_bytes).map_err(e)?, regular)),
            ));
            let tree = repo
                .edit_tree(&repo.empty_tree().map_err(e)?, &edits)
                .map_err(e)?;
            repo.commit_tree(
                &tree,
                &[],
                &crate::staging::plumbing::CommitStamp {
                    message: "airlock dry run",
                    time: 0,
                },
            )
            .map_err(e)
        })
        .await
        .expect("building the dry run does not panic")?;

        let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
        let prepared = self
            .background
            .runner
            .prepare_commit(
                self.ctx.repo(workspace_id).clone(),
                commit,
                crate::config::GIT_PROFILE,
                vec!["bash".into(), "-c".into(), DRY_RUN_SCRIPT.into()],
                limits::DRY_RUN_TIMEOUT_SECONDS,
                None,
            )
            .await
            .map_err(|e| format!("the dry run cannot start: {e}"))?
            .harvesting(crate::engine::runner::pipeline::Harvest {
                limits: crate::workspace::HarvestLimits {
                    dir: "out".into(),
                    max_files: limits::MAX_PATCH_FILES * 2,
                    max_bytes: limits::MAX_DRY_RUN_OUTPUT_BYTES,
                },
                into: slot.clone(),
            });
        // Cancelled (and settled) by the daemon's shutdown like every job.
        let v = self
            .background
            .execute_inline(prepared)
            .await
            .map_err(|e| format!("the dry run failed to run: {e}"))?;
        rec.dry_run_verification = Some(v.verification_id.clone());
        if v.status != Status::Passed {
            return Err(format!(
                "git apply in the sandbox: {} ({}): {}",
                v.status.as_str(),
                v.error.unwrap_or_default(),
                v.output.trim()
            ));
        }
        let harvested = slot
            .lock()
            .expect("the harvest slot is not poisoned")
            .take()
            .ok_or("the dry run left no output")?
            .map_err(|e| format!("reading the dry run's output: {e}"))?;
        let post: std::collections::HashMap<String, Image> = harvested
            .into_iter()
            .filter_map(|(p, i)| p.strip_prefix("tree/").map(|p| (p.to_string(), i)))
            .collect();
        // Git's changed paths, from the images: must be exactly the parser's.
        let mut git_changed: Vec<String> = vec![];
        for (path, before) in &pre {
            let after = post
                .get(path)
                .map(Image::fingerprint)
                .unwrap_or(Fingerprint::Absent);
            if after != before.fingerprint() {
                git_changed.push(path.clone());
            }
        }
        let read: std::collections::HashSet<&str> = pre.iter().map(|(p, _)| p.as_str()).collect();
        for path in post.keys() {
            if !read.contains(path.as_str()) {
                git_changed.push(path.clone());
            }
        }
        git_changed.sort();
        let mut parser_changed = changed_paths.clone();
        parser_changed.sort();
        if git_changed != parser_changed {
            return Err(format!(
                "the sandboxed git changed {git_changed:?}, the parser expected {parser_changed:?}"
            ));
        }
        // Every symlink the patch leaves must resolve inside the tree, judged from its new
        // location and through the links it meets (the tree tells what the patch text
        // cannot: a renamed or copied link, a target through an existing link).
        let changes: Vec<crate::install::Change> = changed_paths
            .iter()
            .map(|path| crate::install::Change {
                path: path.clone(),
                after: post.get(path).cloned().unwrap_or(Image::Absent),
            })
            .collect();
        let wt = worktree.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let root = crate::beneath::Root::open(&wt).map_err(|e| e.to_string())?;
            crate::install::links_stay_inside(&root, &changes)
        })
        .await
        .expect("judging symlinks does not panic")?;
        let repo = self.ctx.repo(workspace_id).clone();
        let changed = changed_paths.clone();
        let post_images = tokio::task::spawn_blocking(move || -> Result<Vec<PostImage>, String> {
            let images: Vec<(String, Image)> = changed
                .iter()
                .map(|path| {
                    (
                        path.clone(),
                        post.get(path).cloned().unwrap_or(Image::Absent),
                    )
                })
                .collect();
            // Every post-image's bytes (a link's target) as blobs, by one git process.
            let contents: Vec<&[u8]> = images
                .iter()
                .filter_map(|(_, img)| match img {
                    Image::Absent => None,
                    Image::File { bytes, .. } => Some(bytes.as_slice()),
                    Image::Symlink { target } => Some(target.as_bytes()),
                })
                .collect();
            let mut blobs = repo
                .write_blobs(&contents)
                .map_err(|e| e.to_string())?
                .into_iter();
            Ok(images
                .into_iter()
                .map(|(path, img)| PostImage {
                    path,
                    fingerprint: img.fingerprint(),
                    blob: match img {
                        Image::Absent => None,
                        _ => blobs.next(),
                    },
                })
                .collect())
        })
        .await
        .expect("storing post-images does not panic")?;
        rec.post_images = post_images;
        Ok(format!(
            "git applied the patch in the sandbox; {} paths change",
            changed_paths.len()
        ))
    }

    /// Starts each expected test as a verification of a private commit: the worktree's HEAD
    /// tree with the post-images.
    pub(super) async fn start_tests(
        &self,
        workspace_id: &str,
        validation_id: &str,
        tests: &[Vec<String>],
        checks: &[crate::domain::policy::RequiredCheck],
        rec: &mut Record,
    ) -> Result<(), String> {
        let repo = self.ctx.repo(workspace_id).clone();
        let head = rec.worktree_head.clone();
        let edits: Vec<(String, Option<(String, crate::domain::git::FileMode)>)> = rec
            .post_images
            .iter()
            .map(|p| {
                let mode = match &p.fingerprint {
                    Fingerprint::Absent => None,
                    Fingerprint::File {
                        executable: true, ..
                    } => Some(crate::domain::git::FileMode::Executable),
                    Fingerprint::File {
                        executable: false, ..
                    } => Some(crate::domain::git::FileMode::Regular),
                    Fingerprint::Symlink { .. } => Some(crate::domain::git::FileMode::Symlink),
                };
                (
                    p.path.clone(),
                    mode.and_then(|m| p.blob.clone().map(|b| (b, m))),
                )
            })
            .collect();
        let vid = validation_id.to_string();
        let commit = tokio::task::spawn_blocking(move || -> Result<String, String> {
            let e = |x: crate::staging::StagingError| x.to_string();
            let base = match &head {
                Some(h) => repo.commit_tree_of(h).map_err(e)?,
                None => repo.empty_tree().map_err(e)?,
            };
            let tree = repo.edit_tree(&base, &edits).map_err(e)?;
            let parents: Vec<&str> = head.iter().map(String::as_str).collect();
            let commit = repo
                .commit_tree(
                    &tree,
                    &parents,
                    &crate::staging::plumbing::CommitStamp {
                        message: "airlock validation",
                        time: 0,
                    },
                )
                .map_err(e)?;
            // Retained (and its post-image blobs with it) while the validation matters.
            repo.update_refs(&[crate::staging::plumbing::RefOp::Create {
                name: format!("refs/airlock/validations/{vid}"),
                new: commit.clone(),
            }])
            .map_err(e)?;
            Ok(commit)
        })
        .await
        .expect("building the test commit does not panic")?;
        rec.tests_commit = Some(commit.clone());
        let profile = self
            .ctx
            .config
            .workspaces
            .get(workspace_id)
            .map(|w| w.profile.clone())
            .unwrap_or_default();
        let timeout = self.ctx.config.expected_test_timeout_seconds;
        let runs = tests
            .iter()
            .map(|argv| (None, argv, profile.as_str(), timeout))
            .chain(checks.iter().map(|c| {
                (
                    Some(c.name.as_str()),
                    &c.argv,
                    c.profile.as_deref().unwrap_or(&profile),
                    c.timeout_seconds.unwrap_or(timeout),
                )
            }));
        for (check, argv, profile, timeout) in runs {
            let what = match check {
                Some(name) => format!("required check {name:?}"),
                None => "an expected test".to_string(),
            };
            let prepared = self
                .background
                .runner
                .prepare_commit(
                    self.ctx.repo(workspace_id).clone(),
                    commit.clone(),
                    profile,
                    argv.clone(),
                    timeout,
                    None,
                )
                .await
                .map_err(|e| format!("{what} cannot start: {e}"))?;
            // Room in the workspace's queue first: the tests share its bounds with every job.
            let room = self
                .background
                .reserve(workspace_id)
                .map_err(|e| format!("{what} cannot be queued: {e}"))?;
            let started = self
                .background
                .runner
                .begin(prepared, None)
                .await
                .map_err(|e| format!("{what} cannot be recorded: {e}"))?;
            let id = started.verification.verification_id.clone();
            rec.test_verifications.push(id.clone());
            if let Some(name) = check {
                rec.checks.push(super::CheckRun {
                    name: name.to_string(),
                    verification_id: id,
                });
            }
            self.background.spawn(room, started);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream, read by git itself, is a commit of exactly the pre-images: every path
    /// (spaces, quotes, backslashes, a line feed, non-UTF-8 free), mode and byte.
    #[test]
    fn the_pre_image_stream_is_exactly_the_pre_images_to_git() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str], input: Option<&[u8]>| -> Vec<u8> {
            use std::io::Write;
            let mut c = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(dir.path())
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = c.stdin.take().unwrap();
            if let Some(i) = input {
                stdin.write_all(i).unwrap();
            }
            drop(stdin);
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "git {args:?}");
            out.stdout
        };
        git(&["init", "-q", "--bare"], None);
        let file = |b: &[u8], executable| Image::File {
            executable,
            bytes: b.to_vec(),
        };
        let pre = vec![
            ("plain.txt".to_string(), file(b"one\ntwo\n", false)),
            ("with space/and \\ back".into(), file(b"", false)),
            ("\"quoted".into(), file(b"q", true)),
            ("line\nfeed\ttab".into(), file(b"\0binary\xff", false)),
            ("gone".into(), Image::Absent),
            (
                "link".into(),
                Image::Symlink {
                    target: "../target".into(),
                },
            ),
        ];
        assert_eq!(fast_import_path("a b\\c"), b"a b\\c");
        assert_eq!(fast_import_path("\"x\n"), b"\"\\\"x\\n\"");
        git(&["fast-import", "--quiet"], Some(&pre_stream(&pre)));
        let listed = git(&["ls-tree", "-r", "-z", "refs/heads/pre"], None);
        let mut seen = vec![];
        for rec in listed.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let text = String::from_utf8(rec.to_vec()).unwrap();
            let (meta, path) = text.split_once('\t').unwrap();
            let mut m = meta.split(' ');
            let (mode, oid) = (m.next().unwrap(), m.nth(1).unwrap());
            let bytes = git(&["cat-file", "blob", oid], None);
            seen.push((path.to_string(), mode.to_string(), bytes));
        }
        seen.sort();
        let mut want: Vec<(String, String, Vec<u8>)> = pre
            .iter()
            .filter_map(|(p, i)| {
                let bytes = match i {
                    Image::Absent => return None,
                    Image::File { bytes, .. } => bytes.clone(),
                    Image::Symlink { target } => target.as_bytes().to_vec(),
                };
                Some((p.clone(), image_mode(i).unwrap().to_string(), bytes))
            })
            .collect();
        want.sort();
        assert_eq!(seen, want);
    }
}
