//! Coverage: does what the author holds cover everything the patch touches?
//!
//! Every touched path (both sides of a rename or copy) must be covered by a `file:` or
//! `directory:` resource, or, for an ordinary modification only, every changed line range must
//! lie *inside* (contained, not merely overlapping) the span of a claimed symbol of that file,
//! as re-resolved now. Creation, deletion, rename, copy and mode changes need file or directory
//! coverage. Every uncovered item is reported, not only the first, so an author fixes
//! the claims in one round; a rename needs both of its sides covered.

use super::{ChangeKind, OldRange, Patch};
use crate::domain::claim::{ResourceId, Span, directory_contains};

/// A resource the author holds, with a symbol's current span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub resource: ResourceId,
    /// For symbols: the span as the parser finds it now; `None` if it could not be resolved.
    pub span: Option<Span>,
}

/// One thing the held resources do not cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncovered {
    /// A path no file or directory resource covers, for a change that needs one.
    Path { path: String, kind: ChangeKind },
    /// Changed lines of a modified file outside every claimed symbol's span.
    Lines { path: String, range: OldRange },
}

impl std::fmt::Display for Uncovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Uncovered::Path { path, kind } => write!(
                f,
                "{path:?} ({}) is not covered by a held file or directory resource",
                kind.as_str()
            ),
            Uncovered::Lines { path, range } if range.len == 0 => write!(
                f,
                "{path:?}: the insertion before line {} is inside no held symbol",
                range.start
            ),
            Uncovered::Lines { path, range } => write!(
                f,
                "{path:?}: lines {}..={} are inside no held symbol",
                range.start,
                range.start + range.len - 1
            ),
        }
    }
}

fn file_covered(held: &[Held], path: &str) -> bool {
    held.iter().any(|h| match &h.resource {
        ResourceId::File { path: p } => p == path,
        ResourceId::Directory { path: d } => directory_contains(d, path),
        ResourceId::Symbol { .. } | ResourceId::Other { .. } => false,
    })
}

/// True when the old-side range lies inside `span`; an insertion before old line `start` lies
/// inside when both of its neighbouring old lines (`start - 1` and `start`) do.
fn inside(range: OldRange, span: Span) -> bool {
    if range.len == 0 {
        // Inserting before old line `start` is between lines start-1 and start.
        return range.start > span.start && range.start <= span.end;
    }
    let end = range.start + range.len - 1;
    range.start >= span.start && end <= span.end
}

/// Everything `patch` touches that `held` does not cover; empty when all is covered.
pub fn check(patch: &Patch, held: &[Held]) -> Vec<Uncovered> {
    let mut out = Vec::new();
    for f in &patch.files {
        let needs_file_coverage = !matches!(f.kind, ChangeKind::Modify) || f.binary;
        for path in f.paths() {
            if file_covered(held, path) {
                continue;
            }
            if needs_file_coverage {
                out.push(Uncovered::Path {
                    path: path.to_string(),
                    kind: f.kind,
                });
                continue;
            }
            let spans: Vec<Span> = held
                .iter()
                .filter_map(|h| match (&h.resource, h.span) {
                    (ResourceId::Symbol { path: p, .. }, Some(s)) if p == path => Some(s),
                    _ => None,
                })
                .collect();
            if spans.is_empty() {
                out.push(Uncovered::Path {
                    path: path.to_string(),
                    kind: f.kind,
                });
                continue;
            }
            for r in &f.changed {
                if !spans.iter().any(|s| inside(*r, *s)) {
                    out.push(Uncovered::Lines {
                        path: path.to_string(),
                        range: *r,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::parse;

    fn held(id: &str, span: Option<(u64, u64)>) -> Held {
        Held {
            resource: ResourceId::parse(id).unwrap(),
            span: span.map(|(start, end)| Span { start, end }),
        }
    }

    const MODIFY: &str = "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n\
        @@ -10,3 +10,3 @@\n ctx\n-old\n+new\n ctx\n@@ -40,2 +40,3 @@\n ctx\n+added\n ctx\n";
    const RENAME: &str = "diff --git a/a/x.rs b/b/x.rs\nsimilarity index 100%\nrename from a/x.rs\nrename to b/x.rs\n";
    const CREATE: &str = "diff --git a/new.rs b/new.rs\nnew file mode 100644\n--- /dev/null\n+++ b/new.rs\n@@ -0,0 +1 @@\n+x\n";

    #[test]
    fn files_and_directories_cover_everything_they_contain() {
        let p = parse(format!("{MODIFY}{CREATE}").as_bytes()).unwrap();
        assert!(check(&p, &[held("directory:", None)]).is_empty());
        assert!(
            check(
                &p,
                &[held("file:src/lib.rs", None), held("file:new.rs", None)]
            )
            .is_empty()
        );
        let missing = check(&p, &[held("directory:src", None)]);
        assert_eq!(
            missing,
            vec![Uncovered::Path {
                path: "new.rs".into(),
                kind: ChangeKind::Create
            }]
        );
        assert!(missing[0].to_string().contains("new.rs"));
        // Other categories never cover files.
        assert_eq!(check(&p, &[held("endpoint:src/lib.rs", None)]).len(), 2);
    }

    #[test]
    fn a_rename_needs_both_sides_and_every_gap_is_reported() {
        let p = parse(RENAME.as_bytes()).unwrap();
        let one_side = check(&p, &[held("directory:a", None)]);
        assert_eq!(
            one_side,
            vec![Uncovered::Path {
                path: "b/x.rs".into(),
                kind: ChangeKind::Rename
            }]
        );
        assert_eq!(check(&p, &[]).len(), 2, "both sides, not only the first");
        // A symbol never covers a rename.
        assert_eq!(
            check(&p, &[held("symbol:a/x.rs#f", Some((1, 100)))]).len(),
            2
        );
    }

    #[test]
    fn symbols_cover_changed_lines_they_contain_not_merely_touch() {
        let p = parse(MODIFY.as_bytes()).unwrap();
        // Changed: line 11 replaced; an insertion before old line 41.
        assert_eq!(
            p.files[0].changed,
            vec![
                OldRange { start: 11, len: 1 },
                OldRange { start: 41, len: 0 }
            ]
        );
        let both = [
            held("symbol:src/lib.rs#f", Some((5, 15))),
            held("symbol:src/lib.rs#g", Some((40, 45))),
        ];
        assert!(check(&p, &both).is_empty());
        // Overlapping is not containing: a span ending at line 10 does not hold line 11.
        let short = [
            held("symbol:src/lib.rs#f", Some((1, 10))),
            held("symbol:src/lib.rs#g", Some((40, 45))),
        ];
        assert_eq!(
            check(&p, &short),
            vec![Uncovered::Lines {
                path: "src/lib.rs".into(),
                range: OldRange { start: 11, len: 1 }
            }]
        );
        // A symbol that could not be resolved now covers nothing.
        let unresolved = [held("symbol:src/lib.rs#f", None)];
        assert_eq!(check(&p, &unresolved).len(), 1);
        // Every uncovered range, not only the first.
        let other = [held("symbol:src/lib.rs#h", Some((100, 200)))];
        assert_eq!(check(&p, &other).len(), 2);
    }
}
