//! A strict parser of Git's extended diff format (what `git diff` and `git format-patch` write),
//! for the governed patch path. Pure: no I/O.
//!
//! It reads `diff --git` sections with their extended headers (modes, renames and copies with
//! similarity, `index` lines with full or abbreviated SHA-1 or SHA-256 ids), `---`/`+++` names
//! (C-quoted, `/dev/null`, the trailing-TAB form), hunks whose counts are checked against their
//! bodies, `\ No newline at end of file`, `Binary files ... differ` and `GIT binary patch`
//! literal/delta blocks. Everything else is refused with the line number: a line the grammar
//! does not explain, names that disagree between the header, `---`/`+++` and rename/copy lines,
//! one path touched twice, a path beyond a symbolic link the patch itself touches, a symlink
//! whose target is absolute or leaves the tree, an unsafe path, and a binary change without a
//! full `index` line (there would be nothing to check its pre-image against).
//!
//! Text before the first `diff --git` (a `format-patch` mail header, message and diffstat) and a
//! `-- ` signature after the last hunk are allowed and ignored, as `git apply` ignores them.

pub mod coverage;
mod names;
mod rules;

use crate::domain::git::FileMode;
use crate::limits;
use names::structural;
use names::{
    HeaderNames, check_base85_line, is_full_oid, parse_hunk_header, parse_index,
    split_header_names, unquote,
};
pub use rules::check_path;
use rules::{check_symlink_target, check_whole, merge_type_changes};

/// What one file section does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Create,
    Delete,
    Modify,
    Rename,
    Copy,
    /// Only the mode changes (no content).
    ModeOnly,
    /// The path changes kind: a file becomes a symlink or a symlink a file (git writes a
    /// deletion and a creation of the path).
    TypeChange,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Create => "create",
            ChangeKind::Delete => "delete",
            ChangeKind::Modify => "modify",
            ChangeKind::Rename => "rename",
            ChangeKind::Copy => "copy",
            ChangeKind::ModeOnly => "mode_only",
            ChangeKind::TypeChange => "type_change",
        }
    }
}

/// Old-side lines a change touches: `len` lines from `start` (1-based); `len == 0` is an
/// insertion before old line `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OldRange {
    pub start: u64,
    pub len: u64,
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub kind: ChangeKind,
    /// `None` for a created file.
    pub old_path: Option<String>,
    /// `None` for a deleted file.
    pub new_path: Option<String>,
    pub old_mode: Option<FileMode>,
    pub new_mode: Option<FileMode>,
    /// Rename or copy similarity, percent.
    pub similarity: Option<u8>,
    /// Object ids from the `index` line, as written (full or abbreviated).
    pub old_oid: Option<String>,
    pub new_oid: Option<String>,
    pub binary: bool,
    pub added: u64,
    pub removed: u64,
    /// The old-side ranges of changed lines (not whole hunks), in order.
    pub changed: Vec<OldRange>,
    /// The new symlink target, when the new side is a symlink with content in this patch.
    pub symlink_target: Option<String>,
}

impl FileChange {
    /// Every path this change touches (both sides of a rename or copy).
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        let old = self.old_path.as_deref();
        let new = self.new_path.as_deref().filter(|n| Some(*n) != old);
        old.into_iter().chain(new)
    }
}

/// A parsed patch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Patch {
    pub files: Vec<FileChange>,
}

/// Why a patch was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("patch line {line}: {reason}")]
pub struct PatchError {
    /// 1-based line number (0 when the patch as a whole is at fault).
    pub line: usize,
    pub reason: String,
}

pub(crate) fn err<T>(line: usize, reason: impl Into<String>) -> Result<T, PatchError> {
    Err(PatchError {
        line,
        reason: reason.into(),
    })
}

/// Parses and checks a patch.
pub fn parse(bytes: &[u8]) -> Result<Patch, PatchError> {
    if bytes.len() > limits::MAX_PATCH_PARSE_BYTES {
        return err(
            0,
            format!(
                "the patch is {} bytes; the limit is {}",
                bytes.len(),
                limits::MAX_PATCH_PARSE_BYTES
            ),
        );
    }
    // Lines as git reads them: split at LF only. A hunk's content lines may hold a carriage
    // return (a CRLF file) or bytes that are not UTF-8 (a Latin-1 file): those are kept as
    // read (their bytes only reach git, in the sandbox) and marked; every other line must be
    // UTF-8 without a carriage return.
    let mut owned: Vec<std::borrow::Cow<str>> = Vec::new();
    let mut lossy: Vec<bool> = Vec::new();
    let mut preamble = true;
    for (i, raw) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
        preamble &= !raw.starts_with(b"diff --git ");
        match std::str::from_utf8(raw) {
            Ok(t) => {
                owned.push(std::borrow::Cow::Borrowed(t));
                lossy.push(false);
            }
            // A mail's header and message (ignored, as git ignores them) may be in any
            // encoding.
            Err(_) if preamble || matches!(raw.first(), Some(b'+' | b'-' | b' ')) => {
                owned.push(String::from_utf8_lossy(raw));
                lossy.push(true);
            }
            Err(_) => {
                return err(
                    i + 1,
                    "this line is not UTF-8; only hunk lines may hold other bytes (send the patch as patch_base64)",
                );
            }
        }
    }
    let lines: Vec<&str> = owned.iter().map(|l| l.as_ref()).collect();
    let mut p = Parser {
        lines: &lines,
        lossy: &lossy,
        at: 0,
    };
    let mut patch = Patch::default();
    // Preamble: anything before the first `diff --git`.
    while p.at < lines.len() && !lines[p.at].starts_with("diff --git ") {
        if is_unsupported_diff_start(lines[p.at]) {
            return err(
                p.at + 1,
                format!(
                    "{:?}: only git's own diff format is accepted (diff --git sections)",
                    lines[p.at].trim_end()
                ),
            );
        }
        p.at += 1;
    }
    if p.at == lines.len() {
        return err(0, "the patch holds no `diff --git` section");
    }
    while p.at < lines.len() {
        let line = lines[p.at];
        if line.starts_with("diff --git ") {
            if patch.files.len() >= limits::MAX_PATCH_FILES {
                return err(
                    p.at + 1,
                    format!("more than {} files in one patch", limits::MAX_PATCH_FILES),
                );
            }
            patch.files.push(p.file()?);
        } else if line == "-- \n" {
            // A format-patch signature ends the patch.
            break;
        } else {
            return err(
                p.at + 1,
                format!(
                    "{:?} is not part of a git diff",
                    truncate(line.trim_end_matches('\n'))
                ),
            );
        }
    }
    merge_type_changes(&mut patch);
    check_whole(&patch)?;
    Ok(patch)
}

pub(crate) fn truncate(s: &str) -> String {
    let mut t: String = s.chars().take(80).collect();
    if t.len() < s.len() {
        t.push('…');
    }
    t
}

/// Other diff dialects `git apply` or GNU patch would also act on: refused outright, so a
/// preamble can never smuggle one in.
fn is_unsupported_diff_start(line: &str) -> bool {
    line.starts_with("--- ")
        || line.starts_with("+++ ")
        || line.starts_with("@@ ")
        || line.starts_with("diff --cc ")
        || line.starts_with("diff --combined ")
        || line.starts_with("*** ")
        || line.starts_with("Index: ")
}

struct Parser<'a> {
    lines: &'a [&'a str],
    /// Lines that were not UTF-8 (read lossily): allowed only as hunk content.
    lossy: &'a [bool],
    at: usize,
}

/// Extended header values of one section, before they are reconciled.
#[derive(Default)]
struct Header {
    old_mode: Option<FileMode>,
    new_mode: Option<FileMode>,
    deleted_mode: Option<FileMode>,
    created_mode: Option<FileMode>,
    rename_from: Option<String>,
    rename_to: Option<String>,
    copy_from: Option<String>,
    copy_to: Option<String>,
    similarity: Option<u8>,
    index: Option<(String, String, Option<FileMode>)>,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.lines.get(self.at).copied()
    }

    fn file(&mut self) -> Result<FileChange, PatchError> {
        let header_line = self.at + 1;
        let raw = self.lines[self.at];
        if !raw.ends_with('\n') {
            return err(header_line, "the patch ends inside a header");
        }
        let names = structural(raw, header_line)?
            .strip_prefix("diff --git ")
            .expect("called on a diff --git line");
        let header_names = split_header_names(names);
        self.at += 1;
        let mut h = Header::default();
        // Extended header lines.
        while let Some(line) = self.peek() {
            let n = self.at + 1;
            if self.lossy[self.at] {
                break;
            }
            let body = structural(line, n)?;
            let mode = |v: &str| {
                FileMode::parse(v).ok_or_else(|| PatchError {
                    line: n,
                    reason: format!("{v:?} is not a git file mode"),
                })
            };
            let once = |slot: bool, what: &str| {
                if slot {
                    err(n, format!("{what} appears twice"))
                } else {
                    Ok(())
                }
            };
            if let Some(v) = body.strip_prefix("old mode ") {
                once(h.old_mode.is_some(), "old mode")?;
                h.old_mode = Some(mode(v)?);
            } else if let Some(v) = body.strip_prefix("new mode ") {
                once(h.new_mode.is_some(), "new mode")?;
                h.new_mode = Some(mode(v)?);
            } else if let Some(v) = body.strip_prefix("deleted file mode ") {
                once(h.deleted_mode.is_some(), "deleted file mode")?;
                h.deleted_mode = Some(mode(v)?);
            } else if let Some(v) = body.strip_prefix("new file mode ") {
                once(h.created_mode.is_some(), "new file mode")?;
                h.created_mode = Some(mode(v)?);
            } else if let Some(v) = body.strip_prefix("rename from ") {
                once(h.rename_from.is_some(), "rename from")?;
                h.rename_from = Some(unquote(v, n)?);
            } else if let Some(v) = body.strip_prefix("rename to ") {
                once(h.rename_to.is_some(), "rename to")?;
                h.rename_to = Some(unquote(v, n)?);
            } else if let Some(v) = body.strip_prefix("copy from ") {
                once(h.copy_from.is_some(), "copy from")?;
                h.copy_from = Some(unquote(v, n)?);
            } else if let Some(v) = body.strip_prefix("copy to ") {
                once(h.copy_to.is_some(), "copy to")?;
                h.copy_to = Some(unquote(v, n)?);
            } else if let Some(v) = body
                .strip_prefix("similarity index ")
                .or_else(|| body.strip_prefix("dissimilarity index "))
            {
                once(h.similarity.is_some(), "similarity index")?;
                let pct = v
                    .strip_suffix('%')
                    .and_then(|d| d.parse::<u8>().ok())
                    .filter(|p| *p <= 100)
                    .ok_or_else(|| PatchError {
                        line: n,
                        reason: format!("{v:?} is not a percentage"),
                    })?;
                h.similarity = Some(if body.starts_with("dis") {
                    100 - pct
                } else {
                    pct
                });
            } else if let Some(v) = body.strip_prefix("index ") {
                once(h.index.is_some(), "index")?;
                h.index = Some(parse_index(v, n)?);
            } else {
                break;
            }
            self.at += 1;
        }
        // Reconcile the names.
        let (mut old_path, mut new_path) =
            match (&h.rename_from, &h.rename_to, &h.copy_from, &h.copy_to) {
                (Some(f), Some(t), None, None) | (None, None, Some(f), Some(t)) => {
                    (Some(f.clone()), Some(t.clone()))
                }
                (None, None, None, None) => match &header_names {
                    HeaderNames::Pair(a, b) => (Some(a.clone()), Some(b.clone())),
                    HeaderNames::Ambiguous => (None, None),
                },
                _ => {
                    return err(
                        header_line,
                        "rename or copy lines must come as one from/to pair",
                    );
                }
            };
        if h.rename_from.is_none()
            && h.copy_from.is_none()
            && let HeaderNames::Pair(a, b) = &header_names
            && a != b
        {
            return err(
                header_line,
                format!(
                    "diff --git names two paths ({a:?}, {b:?}) without rename or copy lines: git would delete {a:?} and overwrite {b:?}, which is not what a reviewer sees; send a rename (git diff -M) or one section per path"
                ),
            );
        }
        if let (HeaderNames::Pair(a, b), Some(o), Some(nw)) = (&header_names, &old_path, &new_path)
            && (a != o || b != nw)
        {
            return err(
                header_line,
                format!(
                    "the diff --git names ({a:?}, {b:?}) disagree with the rename/copy lines ({o:?}, {nw:?})"
                ),
            );
        }
        let mut change = FileChange {
            kind: ChangeKind::Modify,
            old_path: None,
            new_path: None,
            old_mode: h.old_mode.or(h.deleted_mode),
            new_mode: h.new_mode.or(h.created_mode),
            similarity: h.similarity,
            old_oid: h.index.as_ref().map(|i| i.0.clone()),
            new_oid: h.index.as_ref().map(|i| i.1.clone()),
            binary: false,
            added: 0,
            removed: 0,
            changed: vec![],
            symlink_target: None,
        };
        if let Some((_, _, Some(m))) = &h.index {
            if change.old_mode.is_some() || change.new_mode.is_some() {
                return err(header_line, "an index line with a mode beside a mode line");
            }
            change.old_mode = Some(*m);
            change.new_mode = Some(*m);
        }
        // Content: ---/+++ with hunks, a binary marker, or nothing.
        let mut content = false;
        if let Some(line) = self.peek()
            && line.starts_with("--- ")
        {
            let (o, nw) = self.file_names()?;
            check_side(
                &mut old_path,
                o,
                "---",
                self.at - 1,
                h.created_mode.is_some(),
            )?;
            check_side(&mut new_path, nw, "+++", self.at, h.deleted_mode.is_some())?;
            self.hunks(&mut change)?;
            content = true;
        } else if let Some(line) = self.peek()
            && line.starts_with("Binary files ")
        {
            return err(
                self.at + 1,
                "`Binary files ... differ` carries no data to apply: make the patch with git diff --binary (or git format-patch --binary)",
            );
        } else if self.peek() == Some("GIT binary patch\n") {
            self.binary_patch()?;
            change.binary = true;
            content = true;
        }
        if !content
            && let Some(line) = self.peek()
            && !line.starts_with("diff --git ")
            && line != "-- \n"
        {
            return err(
                self.at + 1,
                format!(
                    "{:?} is not part of a git diff",
                    truncate(line.trim_end_matches('\n'))
                ),
            );
        }
        if h.created_mode.is_some() {
            old_path = None;
        }
        if h.deleted_mode.is_some() {
            new_path = None;
        }
        if old_path.is_none() && new_path.is_none() {
            return err(
                header_line,
                "the file names cannot be read unambiguously from this section",
            );
        }
        change.kind = match (
            h.created_mode,
            h.deleted_mode,
            h.rename_from.is_some(),
            h.copy_from.is_some(),
        ) {
            (Some(_), None, false, false) => ChangeKind::Create,
            (None, Some(_), false, false) => ChangeKind::Delete,
            (None, None, true, false) => ChangeKind::Rename,
            (None, None, false, true) => ChangeKind::Copy,
            (None, None, false, false) if !content && h.old_mode.is_some() => ChangeKind::ModeOnly,
            (None, None, false, false) if content => ChangeKind::Modify,
            (None, None, false, false) => {
                return err(header_line, "the section changes nothing");
            }
            _ => {
                return err(
                    header_line,
                    "a section cannot combine creation, deletion, rename and copy",
                );
            }
        };
        if (h.old_mode.is_some()) != (h.new_mode.is_some()) {
            return err(header_line, "old mode and new mode come together");
        }
        if change.binary {
            let full = |o: &Option<String>| o.as_deref().is_some_and(is_full_oid);
            if !(full(&change.old_oid) && full(&change.new_oid)) {
                return err(
                    header_line,
                    "a binary change needs a full index line (git diff --full-index --binary)",
                );
            }
        }
        for p in [&old_path, &new_path].into_iter().flatten() {
            check_path(p).map_err(|reason| PatchError {
                line: header_line,
                reason: format!("path {p:?} {reason}"),
            })?;
        }
        change.old_path = old_path;
        change.new_path = new_path;
        if change.new_mode == Some(FileMode::Symlink)
            && let Some(target) = &change.symlink_target
        {
            let at = change.new_path.as_deref().unwrap_or_default();
            check_symlink_target(at, target).map_err(|reason| PatchError {
                line: header_line,
                reason: format!("symlink {at:?} -> {target:?} {reason}"),
            })?;
        }
        if matches!(
            change.new_mode,
            Some(FileMode::Gitlink) | Some(FileMode::Tree)
        ) || matches!(
            change.old_mode,
            Some(FileMode::Gitlink) | Some(FileMode::Tree)
        ) {
            return err(header_line, "submodule and tree entries are not patched");
        }
        Ok(change)
    }

    /// The `---` and `+++` lines: each `None` for `/dev/null`.
    fn file_names(&mut self) -> Result<(Option<String>, Option<String>), PatchError> {
        let mut side = |prefix: &str, strip: &str| -> Result<Option<String>, PatchError> {
            let n = self.at + 1;
            let line = self.peek().ok_or_else(|| PatchError {
                line: n,
                reason: format!("the patch ends before the {prefix} line"),
            })?;
            if self.lossy[self.at] {
                return err(n, format!("the {prefix} line is not UTF-8"));
            }
            structural(line, n)?;
            let body = line
                .strip_prefix(prefix)
                .and_then(|l| l.strip_prefix(' '))
                .and_then(|l| l.strip_suffix('\n'))
                .ok_or_else(|| PatchError {
                    line: n,
                    reason: format!("expected a {prefix} line"),
                })?;
            self.at += 1;
            // The trailing-TAB form (`--- a/name\t2024-01-01 ...`) of unquoted names.
            let name = if body.starts_with('"') {
                body.to_string()
            } else {
                body.split('\t').next().unwrap_or(body).to_string()
            };
            if name == "/dev/null" {
                return Ok(None);
            }
            let name = unquote(&name, n)?;
            match name.strip_prefix(strip) {
                Some(rest) => Ok(Some(rest.to_string())),
                None => err(
                    n,
                    format!("{prefix} name {name:?} lacks the {strip:?} prefix"),
                ),
            }
        };
        let old = side("---", "a/")?;
        let new = side("+++", "b/")?;
        Ok((old, new))
    }

    fn hunks(&mut self, change: &mut FileChange) -> Result<(), PatchError> {
        let mut last_old_end = 0u64;
        let mut any = false;
        let mut target = String::new();
        let mut target_lossy = false;
        while let Some(line) = self.peek() {
            if !line.starts_with("@@ ") {
                break;
            }
            any = true;
            let n = self.at + 1;
            structural(line, n)?;
            let (os, oc, ns, nc) = parse_hunk_header(line, n)?;
            if os < last_old_end || (os == last_old_end && os != 0) {
                return err(n, "hunks overlap or are out of order");
            }
            let (mut old_left, mut new_left) = (oc, nc);
            let mut old_line = if oc == 0 { os + 1 } else { os };
            let _ = ns;
            self.at += 1;
            let mut run: Option<OldRange> = None;
            let mut last: Option<char> = None;
            while old_left > 0 || new_left > 0 {
                let n = self.at + 1;
                let Some(line) = self.peek() else {
                    return err(n, "the patch ends inside a hunk");
                };
                // A NUL in a text hunk is text, as `git apply` reads it: git diff makes a file
                // binary only for a NUL in its first 8,000 bytes, so a file with a later one
                // comes as text hunks, and git applies a text hunk whatever it holds.
                let (tag, rest) = match line.chars().next() {
                    // An empty line is an empty context line (git apply reads it so).
                    Some('\n') => (' ', ""),
                    Some(c @ (' ' | '-' | '+')) => (c, &line[1..]),
                    Some('\\') => {
                        return err(n, "a `\\` line must follow a changed or context line");
                    }
                    _ => {
                        return err(
                            n,
                            format!(
                                "{:?} is not a hunk line; the header promised {old_left} more old and {new_left} more new lines",
                                truncate(line.trim_end_matches('\n'))
                            ),
                        );
                    }
                };
                match tag {
                    ' ' => {
                        if old_left == 0 || new_left == 0 {
                            return err(n, "more context lines than the hunk header counts");
                        }
                        old_left -= 1;
                        new_left -= 1;
                        if let Some(r) = run.take() {
                            change.changed.push(r);
                        }
                        old_line += 1;
                    }
                    '-' => {
                        if old_left == 0 {
                            return err(n, "more removed lines than the hunk header counts");
                        }
                        old_left -= 1;
                        change.removed += 1;
                        match &mut run {
                            Some(r) => r.len += 1,
                            None => {
                                run = Some(OldRange {
                                    start: old_line,
                                    len: 1,
                                })
                            }
                        }
                        old_line += 1;
                    }
                    _ => {
                        if new_left == 0 {
                            return err(n, "more added lines than the hunk header counts");
                        }
                        new_left -= 1;
                        change.added += 1;
                        if run.is_none() {
                            run = Some(OldRange {
                                start: old_line,
                                len: 0,
                            });
                        }
                        if self.lossy[self.at] {
                            target_lossy = true;
                        }
                        target.push_str(rest.strip_suffix('\n').unwrap_or(rest));
                    }
                }
                last = Some(tag);
                self.at += 1;
                if self.peek().is_some_and(|l| l.starts_with('\\')) {
                    if self.peek() != Some("\\ No newline at end of file\n")
                        && self.peek() != Some("\\ No newline at end of file")
                    {
                        return err(self.at + 1, "an unknown `\\` line");
                    }
                    self.at += 1;
                }
            }
            if let Some(r) = run.take() {
                change.changed.push(r);
            }
            let _ = last;
            last_old_end = os + oc;
        }
        if !any {
            return err(self.at + 1, "a ---/+++ pair without a hunk");
        }
        if change.new_mode == Some(FileMode::Symlink) || change.old_mode == Some(FileMode::Symlink)
        {
            // A symlink's content is its target: one added line.
            if change.new_mode == Some(FileMode::Symlink) && change.added > 0 {
                if target_lossy || target.contains('\r') {
                    return err(
                        self.at,
                        "a symlink target that is not UTF-8 or holds a carriage return",
                    );
                }
                change.symlink_target = Some(target);
            }
        }
        Ok(())
    }

    fn binary_patch(&mut self) -> Result<(), PatchError> {
        self.at += 1;
        for block in 0..2 {
            let n = self.at + 1;
            let Some(line) = self.peek() else {
                if block == 1 {
                    return Ok(());
                }
                return err(n, "the patch ends inside a binary patch");
            };
            let body = line.strip_suffix('\n').unwrap_or(line);
            let size = body
                .strip_prefix("literal ")
                .or_else(|| body.strip_prefix("delta "))
                .and_then(|s| s.parse::<u64>().ok());
            if size.is_none() {
                if block == 1 {
                    return Ok(());
                }
                return err(n, "expected `literal <size>` or `delta <size>`");
            }
            self.at += 1;
            let mut data_lines = 0;
            loop {
                let n = self.at + 1;
                let Some(line) = self.peek() else {
                    return err(n, "the patch ends inside a binary block");
                };
                self.at += 1;
                if line == "\n" {
                    break;
                }
                check_base85_line(line, n)?;
                data_lines += 1;
            }
            if data_lines == 0 {
                return err(n, "an empty binary block");
            }
        }
        Ok(())
    }
}

fn check_side(
    slot: &mut Option<String>,
    got: Option<String>,
    which: &str,
    line: usize,
    absent_expected: bool,
) -> Result<(), PatchError> {
    match (got, absent_expected) {
        (None, true) => Ok(()),
        (None, false) => err(
            line + 1,
            format!("{which} /dev/null without a new or deleted file mode"),
        ),
        (Some(_), true) => err(
            line + 1,
            format!("{which} names a file the header creates or deletes"),
        ),
        (Some(g), false) => match slot {
            Some(s) if *s == g => Ok(()),
            Some(s) => err(
                line + 1,
                format!("{which} names {g:?}, but the header names {s:?}"),
            ),
            None => {
                *slot = Some(g);
                Ok(())
            }
        },
    }
}

#[cfg(test)]
mod shapes_tests;
#[cfg(test)]
mod tests;
