//! A patch as a reviewer reads it: one section per file with an anchor, its header (rename,
//! mode, binary) shown plainly, added and removed lines coloured by CSS classes (the page stays
//! JavaScript-free), and pages of at most [`DIFF_LINES_PER_PAGE`] lines.
//!
//! The text is a patch Airlock's strict parser accepted (or git wrote), so a file starts at a
//! `diff --git` line and a hunk's lines are counted by its `@@` header: a removed line that
//! reads `--- a/x` or an added one that reads `diff --git` stays a content line.

use super::visible;
use maud::{Markup, html};
use serde_json::Value;

/// Lines shown per page of a diff (a larger file gets a page of its own, cut there).
pub const DIFF_LINES_PER_PAGE: usize = 2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Meta,
    Hunk,
    Add,
    Del,
    Context,
    NoNewline,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::Meta => "meta",
            Kind::Hunk => "hunk",
            Kind::Add => "add",
            Kind::Del => "del",
            Kind::Context => "ctx",
            Kind::NoNewline => "meta",
        }
    }
}

/// One file's lines, classified.
#[derive(Debug, Clone, Default)]
pub struct FileDiff {
    pub lines: Vec<(Kind, String)>,
}

/// `@@ -a[,b] +c[,d] @@` -> (b, d), the old and new line counts (1 when omitted).
fn hunk_counts(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("@@ -")?;
    let (old, rest) = rest.split_once(" +")?;
    let (new, _) = rest.split_once(" @@")?;
    let count = |r: &str| match r.split_once(',') {
        Some((_, n)) => n.parse().ok(),
        None => r.parse::<u64>().ok().map(|_| 1),
    };
    Some((count(old)?, count(new)?))
}

/// Splits a patch into its files.
pub fn split(text: &str) -> Vec<FileDiff> {
    let mut files: Vec<FileDiff> = Vec::new();
    let (mut old_left, mut new_left) = (0u64, 0u64);
    for line in text.split_inclusive('\n') {
        let bare = line.strip_suffix('\n').unwrap_or(line);
        let in_hunk = old_left > 0 || new_left > 0;
        let kind = if in_hunk {
            match bare.as_bytes().first() {
                Some(b'+') => {
                    new_left = new_left.saturating_sub(1);
                    Kind::Add
                }
                Some(b'-') => {
                    old_left = old_left.saturating_sub(1);
                    Kind::Del
                }
                Some(b'\\') => Kind::NoNewline,
                _ => {
                    old_left = old_left.saturating_sub(1);
                    new_left = new_left.saturating_sub(1);
                    Kind::Context
                }
            }
        } else if bare.starts_with("diff --git ") {
            files.push(FileDiff::default());
            Kind::Meta
        } else if let Some((o, n)) = hunk_counts(bare) {
            (old_left, new_left) = (o, n);
            Kind::Hunk
        } else if bare.starts_with('\\') {
            Kind::NoNewline
        } else {
            Kind::Meta
        };
        if files.is_empty() {
            files.push(FileDiff::default());
        }
        files
            .last_mut()
            .expect("a file was pushed")
            .lines
            .push((kind, bare.to_string()));
    }
    files
}

/// The files of page `page` (0-based): greedy runs of whole files within the line budget.
pub fn pages(files: &[FileDiff]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut lines) = (0, 0);
    for (i, f) in files.iter().enumerate() {
        if i > start && lines + f.lines.len() > DIFF_LINES_PER_PAGE {
            out.push(start..i);
            (start, lines) = (i, 0);
        }
        lines += f.lines.len();
    }
    if start < files.len() {
        out.push(start..files.len());
    }
    out
}

/// The page `page` of `text`, whose files are described (same order) by `described` (the API's
/// file list: operation, paths, modes, binary). `link(page)` is the URL of another page.
pub fn render(
    text: &str,
    described: &[Value],
    page: usize,
    link: impl Fn(usize) -> String,
) -> Markup {
    let files = split(text);
    let all = pages(&files);
    let page = page.min(all.len().saturating_sub(1));
    let range = all.get(page).cloned().unwrap_or(0..0);
    let nav = html! {
        @if all.len() > 1 {
            p { "Page " (page + 1) " of " (all.len()) " (files " (range.start + 1) "-" (range.end) " of " (files.len()) ")"
                @if page > 0 { " · " a href=(link(page - 1)) { "previous page" } }
                @if page + 1 < all.len() { " · " a href=(link(page + 1)) { "next page" } } }
        }
    };
    html! { (nav) (sections(&files, described, range, Some(DIFF_LINES_PER_PAGE))) }
}

/// Every file of `text` (already a page of a larger diff, cut by the caller), uncut, each
/// titled by its `diff --git` line.
pub fn render_all(text: &str) -> Markup {
    let files = split(text);
    sections(&files, &[], 0..files.len(), None)
}

fn sections(
    files: &[FileDiff],
    described: &[Value],
    range: std::ops::Range<usize>,
    cut_at: Option<usize>,
) -> Markup {
    html! {
        @for i in range {
            @let f = &files[i];
            @let d = described.get(i).cloned().unwrap_or(Value::Null);
            section.file id=(format!("file-{i}")) {
                @if d.is_null() {
                    @if let Some((_, first)) = f.lines.first() {
                        h3 { code { (visible(first.strip_prefix("diff --git ").unwrap_or(first))) } }
                    }
                } @else {
                    h3 {
                        (file_title(&d)) " "
                        span.badge { (visible(d["operation"].as_str().unwrap_or("change"))) }
                        @if d["binary"] == true { " " span.badge { "binary: not shown" } }
                        @if let (Some(a), Some(b)) = (d["old_mode"].as_str(), d["new_mode"].as_str()) {
                            @if a != b { " " span.badge.stale { "mode " (a) " → " (b) } }
                        }
                        " " span.satisfied { "+" (d["added"].as_u64().unwrap_or(0)) } " " span.blocked { "-" (d["removed"].as_u64().unwrap_or(0)) }
                    }
                }
                @let shown = cut_at.unwrap_or(usize::MAX);
                pre.diff {
                    @for (kind, line) in f.lines.iter().take(shown) {
                        span class=(kind.class()) { (visible(line)) "\n" }
                    }
                }
                @if f.lines.len() > shown { p.missing { (f.lines.len() - shown) " more lines of this file are not shown" } }
            }
        }
    }
}

/// "old → new" for a rename or copy, the one path otherwise.
pub fn file_title(f: &Value) -> Markup {
    match (f["old_path"].as_str(), f["new_path"].as_str()) {
        (Some(a), Some(b)) if a != b => html! { code { (visible(a)) } " → " code { (visible(b)) } },
        (_, Some(p)) | (Some(p), None) => html! { code { (visible(p)) } },
        (None, None) => html! { span.badge { "(no path)" } },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hunk_lines_are_counted_so_content_that_looks_like_a_header_stays_content() {
        let text = "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n--- a/x\n+diff --git a/y b/y\n ctx\ndiff --git a/z b/z\nnew file mode 100644\n--- /dev/null\n+++ b/z\n@@ -0,0 +1 @@\n+z\n\\ No newline at end of file\n";
        let files = split(text);
        assert_eq!(files.len(), 2);
        let kinds: Vec<Kind> = files[0].lines.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            vec![
                Kind::Meta,
                Kind::Meta,
                Kind::Meta,
                Kind::Meta,
                Kind::Hunk,
                Kind::Del,
                Kind::Add,
                Kind::Context
            ]
        );
        assert_eq!(files[1].lines.last().unwrap().0, Kind::NoNewline);
        assert_eq!(hunk_counts("@@ -3 +4,0 @@ fn x"), Some((1, 0)));
        assert_eq!(hunk_counts("@@ nonsense"), None);
    }

    #[test]
    fn pages_keep_whole_files_within_the_budget() {
        let f = |n: usize| FileDiff {
            lines: vec![(Kind::Context, String::new()); n],
        };
        let files = vec![f(1500), f(400), f(300), f(5000), f(1)];
        assert_eq!(pages(&files), vec![0..2, 2..3, 3..4, 4..5]);
        assert!(pages(&[]).is_empty());
    }
}
