//! The README and the manual link only to what exists: every relative link names a file of the
//! repository, and every `#anchor` a heading of its page (as GitHub makes anchors from
//! headings), so a page moved or a heading renamed fails here, not in a reader's browser.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The pages checked: the README, ARCHITECTURE.md and every page of `docs/`.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(crate::support::ROOT);
    let mut out = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut manual: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    manual.sort();
    assert!(manual.len() >= 15, "the manual's pages: {manual:?}");
    out.extend(manual);
    out
}

/// `text` without its fenced blocks and code spans, where `](` is not a link.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            // Code spans: drop what lies between backticks.
            for (i, part) in line.split('`').enumerate() {
                if i % 2 == 0 {
                    out.push_str(part);
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The anchors GitHub gives a page's headings: lowercased, punctuation but `-` and `_`
/// dropped, spaces made `-`; a repeated one gets `-1`, `-2`...
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while out.contains(&candidate) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
        out.insert(candidate);
    }
    out
}

/// Every link target of `text`'s prose: `[label](target)` and `<https://...>` forms.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = vec![];
    let mut rest = prose.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find(')').expect("a link's closing parenthesis");
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    out
}

#[test]
fn every_link_of_the_readme_and_the_manual_resolves() {
    let mut broken = vec![];
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.starts_with("https://") || target.starts_with("http://") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            if !file.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            if file.extension().is_none_or(|e| e != "md") {
                broken.push(format!(
                    "{}: {target}: an anchor into a non-page",
                    page.display()
                ));
                continue;
            }
            if !anchors(&std::fs::read_to_string(&file).unwrap()).contains(anchor) {
                broken.push(format!(
                    "{}: {target}: {} has no heading with that anchor",
                    page.display(),
                    file.display()
                ));
            }
        }
    }
    assert!(checked > 50, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_anchor_rule_is_githubs() {
    let a = anchors("# `airlock serve`: the HTTP daemon\n## Set-up\n## Set-up\n```\n# not\n```\n");
    let want: BTreeSet<String> = ["airlock-serve-the-http-daemon", "set-up", "set-up-1"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(a, want);
    assert_eq!(
        links("see [a](b.md#c), `[x](y)` and [d](#e)\n```\n[f](g)\n```\n"),
        vec!["b.md#c".to_string(), "#e".to_string()]
    );
}

/// The README stays a front door: short, with the two set-up commands first.
#[test]
fn the_readme_is_short_and_starts_with_the_set_up() {
    let readme = crate::support::markdown::document("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 210,
        "the README has {lines} lines; the manual is docs/"
    );
    let first = crate::support::markdown::bodies(&readme, "sh")
        .into_iter()
        .next()
        .unwrap();
    assert!(
        first.starts_with("scripts/demo.sh ") && first.contains("\nscripts/test.sh "),
        "{first}"
    );
}

/// Every check `airlock doctor` can fail has its row in the operations manual's
/// troubleshooting table (a check's name is checked against the list in test builds).
#[test]
fn every_doctor_check_has_a_troubleshooting_row() {
    let ops = crate::support::markdown::document("docs/operations.md");
    let table = &ops[ops.find("## Troubleshooting").expect("the section")..];
    for name in airlock::engine::doctor::CHECKS {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("| `{name}`"))),
            "docs/operations.md has no troubleshooting row for the {name} check"
        );
    }
}
