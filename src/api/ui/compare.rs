//! Two revisions of a proposal compared file by file, as a reviewer asks "what changed since I
//! last looked": per touched path, what each revision leaves there (the post-images the
//! sandbox made), a line diff between them for text, and plain words for everything else
//! (absent, a link's target, the executable bit, a binary file's digest).

use super::visible;
use crate::engine::governed::validation::compare::{Compared, MAX_COMPARED_FILE_BYTES, Side};
use crate::install::{Fingerprint, Image};
use maud::{Markup, html};

/// Longest one file's line diff may take before it settles for a coarser (still correct) one.
const COMPARE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// The comparison as page sections, `old_name` and `new_name` naming the two revisions.
pub fn render(c: &Compared, old_name: &str, new_name: &str) -> Markup {
    let files = &c.shown;
    html! {
        p { (c.paths) " touched path(s) compared; " (c.differ) " differ between " (old_name) " and " (new_name) "."
            @if c.differ > files.len() { " The first " (files.len()) " are shown here." } }
        @for (i, f) in files.iter().enumerate() {
            section.file id=(format!("compare-{i}")) {
                h3 {
                    code { (visible(&f.path)) } " "
                    @if f.same() { span.badge { "the same in both" } } @else { span.badge.stale { "differs" } }
                }
                @if !f.same() {
                    @match text_pair(&f.old, &f.new) {
                        Some((a, b)) => {
                            @if modes(&f.old, &f.new) { p { (old_name) ": " (describe(&f.old)) "; " (new_name) ": " (describe(&f.new)) } }
                            pre.diff { @for (class, line) in line_diff(a, b, old_name, new_name) { span class=(class) { (visible(&line)) "\n" } } }
                        }
                        None => p { (old_name) ": " (describe(&f.old)) "; " (new_name) ": " (describe(&f.new)) "." },
                    }
                }
            }
        }
    }
}

/// Both sides as text, when both are files of text within the bound.
fn text_pair<'a>(old: &'a Side, new: &'a Side) -> Option<(&'a str, &'a str)> {
    let text = |s: &'a Side| match s {
        Side::Known(Image::File { bytes, .. }) if bytes.len() <= MAX_COMPARED_FILE_BYTES => {
            std::str::from_utf8(bytes)
                .ok()
                .filter(|t| !t.contains('\0'))
        }
        Side::Known(Image::Absent) => Some(""),
        _ => None,
    };
    Some((text(old)?, text(new)?))
}

/// Whether the two sides differ in more than their text (a creation, a deletion, the mode).
fn modes(old: &Side, new: &Side) -> bool {
    match (old, new) {
        (
            Side::Known(Image::File { executable: a, .. }),
            Side::Known(Image::File { executable: b, .. }),
        ) => a != b,
        _ => true,
    }
}

/// A side in plain words.
fn describe(s: &Side) -> String {
    let short = |h: &str| h.chars().take(12).collect::<String>();
    match s {
        Side::Known(Image::Absent) | Side::Unkept(Fingerprint::Absent) => "absent".into(),
        Side::Known(Image::File { executable, bytes }) => format!(
            "a file of {} bytes{}, sha256 {}",
            bytes.len(),
            if *executable { ", executable" } else { "" },
            short(&crate::canonical::sha256_hex(bytes))
        ),
        Side::Known(Image::Symlink { target }) => format!("a symlink to {}", visible(target)),
        Side::Unkept(Fingerprint::File { executable, sha256 }) => format!(
            "the worktree's file{} (sha256 {}; its bytes were not kept)",
            if *executable { ", executable" } else { "" },
            short(sha256)
        ),
        Side::Unkept(Fingerprint::Symlink { sha256 }) => {
            format!("the worktree's symlink (sha256 {})", short(sha256))
        }
    }
}

/// The unified line diff of `a` to `b`, each line with its CSS class.
fn line_diff(a: &str, b: &str, old_name: &str, new_name: &str) -> Vec<(&'static str, String)> {
    let text = similar::TextDiff::configure()
        .timeout(COMPARE_TIMEOUT)
        .diff_lines(a, b)
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string();
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            let class = match l.as_bytes().first() {
                _ if i < 2 => "meta",
                Some(b'@') => "hunk",
                Some(b'+') => "add",
                Some(b'-') => "del",
                Some(b'\\') => "meta",
                _ => "ctx",
            };
            (class, l.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::governed::validation::compare::FileComparison;

    fn file(text: &str) -> Side {
        Side::Known(Image::File {
            executable: false,
            bytes: text.as_bytes().to_vec(),
        })
    }

    #[test]
    fn a_file_both_revisions_change_is_shown_as_the_lines_between_their_post_images() {
        let f = FileComparison {
            path: "src/lib.rs".into(),
            old: file("a\nb\nc\n"),
            new: file("a\nB\nc\n"),
        };
        let lines = line_diff("a\nb\nc\n", "a\nB\nc\n", "revision 1", "revision 2");
        assert_eq!(lines[0], ("meta", "--- revision 1".to_string()));
        assert!(lines.contains(&("del", "-b".to_string())), "{lines:?}");
        assert!(lines.contains(&("add", "+B".to_string())), "{lines:?}");
        // A content line that reads like a header is content, not a header.
        let odd = line_diff("x\n", "+++ y\n", "r1", "r2");
        assert!(odd.contains(&("add", "++++ y".to_string())), "{odd:?}");
        let one = |f: FileComparison| Compared {
            paths: 1,
            differ: usize::from(!f.same()),
            shown: vec![f],
        };
        let html = render(&one(f), "revision 1", "revision 2").into_string();
        assert!(html.contains("differs"), "{html}");
        assert!(
            html.contains("1 touched path(s) compared; 1 differ"),
            "{html}"
        );
    }

    #[test]
    fn binaries_links_and_unkept_files_are_described_not_diffed() {
        let bin = Side::Known(Image::File {
            executable: true,
            bytes: vec![0, 1, 2],
        });
        let link = Side::Known(Image::Symlink {
            target: "../x".into(),
        });
        assert!(text_pair(&bin, &file("a")).is_none());
        assert!(text_pair(&link, &file("a")).is_none());
        assert_eq!(
            text_pair(&Side::Known(Image::Absent), &file("a\n")),
            Some(("", "a\n"))
        );
        assert!(describe(&bin).contains("executable"));
        assert_eq!(describe(&link), "a symlink to ../x");
        let unkept = Side::Unkept(Fingerprint::File {
            executable: false,
            sha256: "ab".repeat(32),
        });
        assert!(
            describe(&unkept).contains("not kept"),
            "{}",
            describe(&unkept)
        );
        let same = FileComparison {
            path: "p".into(),
            old: file("a"),
            new: file("a"),
        };
        assert!(same.same());
        let c = Compared {
            paths: 150,
            differ: 120,
            shown: vec![same],
        };
        let html = render(&c, "1", "2").into_string();
        assert!(html.contains("the same in both"));
        assert!(
            html.contains(
                "150 touched path(s) compared; 120 differ between 1 and 2. The first 1 are shown here."
            ),
            "{html}"
        );
    }
}
