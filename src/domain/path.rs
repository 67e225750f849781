//! Repository path rules shared by candidates, the patch parser and resources (pure).

/// Longest repository-relative path accepted anywhere.
pub const MAX_PATH_BYTES: usize = 4096;

/// The path rules of the governed path: repository-relative, no empty, `.` or `..`
/// components, no `.git` (in any spelling a filesystem treats as `.git`), no NUL, newline or
/// carriage return. Tabs, backslashes (an ordinary filename character on Unix) and other
/// Unicode are allowed; git quotes them.
pub fn check_repo_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_PATH_BYTES {
        return Err(format!("must be 1..={} bytes", MAX_PATH_BYTES));
    }
    if path.starts_with('/') {
        return Err("must be repository-relative, not absolute".into());
    }
    if path.contains(['\0', '\n', '\r']) {
        return Err("must not contain NUL, newline or carriage return".into());
    }
    for comp in path.split('/') {
        if comp.is_empty() {
            return Err("must not contain empty components".into());
        }
        if comp == "." || comp == ".." {
            return Err("must not contain '.' or '..' components".into());
        }
        if is_dotgit_alias(comp) {
            return Err(format!(
                "must not contain {comp:?}, which git treats as .git"
            ));
        }
    }
    Ok(())
}

/// Code points HFS+ ignores when it compares names (git's `utf8.c` list), so `.g\u{200c}it`
/// is `.git` there.
const HFS_IGNORABLE: [char; 16] = [
    '\u{200c}', '\u{200d}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
    '\u{202e}', '\u{206a}', '\u{206b}', '\u{206c}', '\u{206d}', '\u{206e}', '\u{206f}', '\u{feff}',
];

/// True when a path component names `.git` on a filesystem git protects: any case (`.GIT`),
/// HFS+ with ignorable code points removed, NTFS with trailing dots or spaces (`.git.`, `.git `),
/// an alternate data stream (`.git::$INDEX_ALLOCATION`) or the 8.3 short name (`git~1`).
pub fn is_dotgit_alias(comp: &str) -> bool {
    let hfs: String = comp
        .chars()
        .filter(|c| !HFS_IGNORABLE.contains(c))
        .collect();
    if hfs.eq_ignore_ascii_case(".git") {
        return true;
    }
    let lower = comp.to_ascii_lowercase();
    [".git", "git~1"].iter().any(|prefix| {
        lower.strip_prefix(prefix).is_some_and(|rest| {
            let rest = rest.trim_start_matches([' ', '.']);
            rest.is_empty() || rest.starts_with(':')
        })
    })
}
