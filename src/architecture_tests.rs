//! The invariants ARCHITECTURE.md states about the code's shape, checked against the sources:
//! which module alone names a crate or runs a program, which imports may not run back up a
//! layer, and that no two files import each other in a circle (through re-exports too).
//!
//! The sources are read as text: `use` trees are expanded, inline `crate::`/`super::`/`self::`
//! paths collected, comments and `#[cfg(test)]` modules left out, and each path resolved to the
//! file that defines its module (following `pub use` re-exports to the file that defines the
//! name).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its module path and its text without comments and test modules.
struct Source {
    path: PathBuf,
    module: Vec<String>,
    code: String,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every non-test `.rs` file under `src/`, by module path.
fn sources() -> Vec<Source> {
    let mut files = Vec::new();
    let mut stack = vec![src_dir()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().unwrap() != "tests" {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                let name = p.file_stem().unwrap().to_str().unwrap();
                if name == "tests" || name.ends_with("_tests") || name == "main" {
                    continue;
                }
                files.push(p);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(src_dir()).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_str().unwrap().to_string())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let code = strip(&std::fs::read_to_string(&path).unwrap());
            Source { path, module, code }
        })
        .collect()
}

/// The text without `//` comments and without the `#[cfg(test)] mod ... { ... }` blocks.
fn strip(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            let next = lines.peek().map(|l| l.trim_start()).unwrap_or("");
            if (next.starts_with("mod ") || next.contains(" mod ")) && next.ends_with('{') {
                // A test module: skip to its closing brace (it opens at the end of its line).
                lines.next();
                let mut depth = 1i32;
                for l in lines.by_ref() {
                    depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                    if depth <= 0 {
                        break;
                    }
                }
            } else if next.starts_with("use ") || next.starts_with("fn ") {
                lines.next();
            }
            continue;
        }
        let code = match line.find("//") {
            // A `//` inside a string (a URL) cuts the rest of that line; good enough for paths.
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The `use` declarations of `code` (each starting a line): (is it `pub`, its tree text).
fn uses(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let t = line.trim_start();
        let (public, rest) = if let Some(r) = t.strip_prefix("use ") {
            (false, r)
        } else if let Some(r) = t.strip_prefix("pub use ") {
            (true, r)
        } else if t.starts_with("pub(") && t.contains(") use ") {
            (true, &t[t.find(") use ").unwrap() + 6..])
        } else {
            continue;
        };
        let from = start + (line.len() - rest.len());
        if let Some(end) = code[from..].find(';') {
            out.push((public, code[from..from + end].trim().to_string()));
        }
    }
    out
}

/// A use tree expanded into (path segments, the name it binds).
fn expand(tree: &str) -> Vec<(Vec<String>, String)> {
    fn go(prefix: &[String], tree: &str, out: &mut Vec<(Vec<String>, String)>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(open) = tree.find('{') {
            let head: Vec<String> = tree[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            let inner = &tree[open + 1..tree.rfind('}').unwrap()];
            let mut p = prefix.to_vec();
            p.extend(head);
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        go(&p, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            go(&p, &inner[start..], out);
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
            None => (tree, None),
        };
        let mut p = prefix.to_vec();
        p.extend(path.split("::").map(|s| s.trim().to_string()));
        if p.last().is_some_and(|l| l == "self") {
            p.pop();
        }
        let name = alias.unwrap_or_else(|| p.last().cloned().unwrap_or_default());
        out.push((p, name));
    }
    let mut out = Vec::new();
    go(&[], tree, &mut out);
    out
}

/// Inline paths (`crate::a::b`, `super::x`, `self::y`) outside `use` declarations.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(root) {
            let at = from + i;
            from = at + root.len();
            if at > 0 && (ident(bytes[at - 1]) || bytes[at - 1] == b':') {
                continue;
            }
            let mut end = at;
            while end < bytes.len() && (ident(bytes[end]) || bytes[end] == b':') {
                end += 1;
            }
            let segs: Vec<String> = code[at..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            out.push(segs);
        }
    }
    out
}

struct House {
    sources: Vec<Source>,
    by_module: BTreeMap<Vec<String>, usize>,
}

impl House {
    fn read() -> House {
        let sources = sources();
        let by_module = sources
            .iter()
            .enumerate()
            .map(|(i, s)| (s.module.clone(), i))
            .collect();
        House { sources, by_module }
    }

    /// Where `segs`, written in file `from`, leads: the file defining the deepest module it
    /// names, followed through `pub use` re-exports of the name after it. `None` for another
    /// crate's path.
    fn resolve(&self, from: usize, segs: &[String], depth: usize) -> Option<usize> {
        let here = &self.sources[from].module;
        let (mut module, rest) = match segs.first()?.as_str() {
            "crate" => (Vec::new(), &segs[1..]),
            "self" => (here.clone(), &segs[1..]),
            "super" => {
                let mut m = here.clone();
                let mut rest = segs;
                while rest.first().is_some_and(|s| s == "super") {
                    m.pop();
                    rest = &rest[1..];
                }
                (m, rest)
            }
            first => {
                // A child module named without `self::` (2018 paths), else another crate.
                let mut child = here.clone();
                child.push(first.to_string());
                if !self.by_module.contains_key(&child) {
                    return None;
                }
                (here.clone(), segs)
            }
        };
        let mut rest = rest;
        while let Some(next) = rest.first() {
            let mut deeper = module.clone();
            deeper.push(next.clone());
            if self.by_module.contains_key(&deeper) {
                module = deeper;
                rest = &rest[1..];
            } else {
                break;
            }
        }
        let target = *self.by_module.get(&module)?;
        if let (Some(name), true) = (rest.first(), depth < 8) {
            for (public, tree) in uses(&self.sources[target].code) {
                if !public {
                    continue;
                }
                for (path, bound) in expand(&tree) {
                    if &bound == name
                        && let Some(t) = self.resolve(target, &path, depth + 1)
                    {
                        return Some(t);
                    }
                }
            }
        }
        Some(target)
    }

    /// Every file -> file import arrow, with one path that makes it. Left out: a file's arrows
    /// to itself, and to the files of its own ancestor modules (a child using what its parent
    /// module defines is inside that module; the parent's face hands the children's names on).
    fn arrows(&self) -> BTreeMap<(usize, usize), String> {
        let mut out = BTreeMap::new();
        for (i, s) in self.sources.iter().enumerate() {
            let mut paths: Vec<Vec<String>> = Vec::new();
            for (_, tree) in uses(&s.code) {
                paths.extend(expand(&tree).into_iter().map(|(p, _)| p));
            }
            paths.extend(inline_paths(&s.code));
            for p in paths {
                if let Some(t) = self.resolve(i, &p, 0)
                    && t != i
                    && !s.module.starts_with(&self.sources[t].module)
                {
                    out.entry((i, t)).or_insert_with(|| p.join("::"));
                }
            }
        }
        out
    }

    fn name(&self, i: usize) -> String {
        self.sources[i]
            .path
            .strip_prefix(src_dir())
            .unwrap()
            .display()
            .to_string()
    }
}

/// The strongly connected components with more than one file (Tarjan's algorithm).
fn circles(n: usize, edges: &BTreeSet<(usize, usize)>) -> Vec<Vec<usize>> {
    struct Walk<'a> {
        next: Vec<Vec<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        out: &'a mut Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk, v: usize) {
        w.index[v] = Some(w.counter);
        w.low[v] = w.counter;
        w.counter += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for k in 0..w.next[v].len() {
            let u = w.next[v][k];
            match w.index[u] {
                None => {
                    visit(w, u);
                    w.low[v] = w.low[v].min(w.low[u]);
                }
                Some(iu) if w.on_stack[u] => w.low[v] = w.low[v].min(iu),
                Some(_) => {}
            }
        }
        if Some(w.low[v]) == w.index[v] {
            let mut c = Vec::new();
            while let Some(u) = w.stack.pop() {
                w.on_stack[u] = false;
                c.push(u);
                if u == v {
                    break;
                }
            }
            if c.len() > 1 {
                w.out.push(c);
            }
        }
    }
    let mut next = vec![Vec::new(); n];
    for &(a, b) in edges {
        next[a].push(b);
    }
    let mut out = Vec::new();
    let mut w = Walk {
        next,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        out: &mut out,
    };
    for v in 0..n {
        if w.index[v].is_none() {
            visit(&mut w, v);
        }
    }
    out
}

#[test]
fn no_two_files_import_each_other_in_a_circle() {
    let house = House::read();
    let arrows = house.arrows();
    assert!(
        arrows.len() > 300,
        "the reader finds the crate's imports ({} arrows)",
        arrows.len()
    );
    let edges: BTreeSet<(usize, usize)> = arrows.keys().copied().collect();
    let found = circles(house.sources.len(), &edges);
    let words: Vec<String> = found
        .iter()
        .map(|c| {
            let members: BTreeSet<usize> = c.iter().copied().collect();
            let ties: Vec<String> = arrows
                .iter()
                .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                .map(|((a, b), p)| format!("  {} -> {} ({p})", house.name(*a), house.name(*b)))
                .collect();
            format!("a circle of {} files:\n{}", c.len(), ties.join("\n"))
        })
        .collect();
    assert!(found.is_empty(), "{}", words.join("\n"));
}

#[test]
fn the_reader_finds_a_circle_where_there_is_one() {
    // Two files importing each other directly, and three in a ring through a re-export.
    let edges: BTreeSet<(usize, usize)> = [(0, 1), (1, 0), (2, 3), (3, 4), (4, 2), (5, 2)].into();
    let mut found = circles(6, &edges);
    found.iter_mut().for_each(|c| c.sort());
    found.sort();
    assert_eq!(found, vec![vec![0, 1], vec![2, 3, 4]]);
    assert_eq!(
        expand("crate::a::{b, c::{d as e, self}, f::*}"),
        vec![
            (vec!["crate".into(), "a".into(), "b".into()], "b".into()),
            (
                vec!["crate".into(), "a".into(), "c".into(), "d".into()],
                "e".into()
            ),
            (vec!["crate".into(), "a".into(), "c".into()], "c".into()),
            (
                vec!["crate".into(), "a".into(), "f".into(), "*".into()],
                "*".into()
            ),
        ]
    );
    let house = House::read();
    let arrows = house.arrows();
    let file = |p: &str| {
        house
            .sources
            .iter()
            .position(|s| s.path.ends_with(p))
            .unwrap()
    };
    // `use super::Context` in engine/service.rs reaches engine/context.rs through engine/mod.rs's
    // `pub use context::{Clock, Context}`.
    assert!(
        arrows.contains_key(&(file("engine/service.rs"), file("engine/context.rs"))),
        "re-exports are followed"
    );
}

/// Files (relative to `src/`) whose code (tests left out) contains `needle`, outside `allowed`.
fn naming(needle: &str, allowed: &[&str]) -> Vec<String> {
    sources()
        .into_iter()
        .filter(|s| find_word_any(&s.code, needle))
        .map(|s| {
            s.path
                .strip_prefix(src_dir())
                .unwrap()
                .display()
                .to_string()
        })
        .filter(|p| !allowed.iter().any(|a| p.starts_with(a)))
        .collect()
}

fn find_word_any(code: &str, needle: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(needle).any(|(i, _)| {
        !code[..i].chars().next_back().is_some_and(ident)
            && !code[i + needle.len()..].chars().next().is_some_and(ident)
    })
}

#[test]
fn each_outside_crate_and_program_has_one_module_that_names_it() {
    let homes: [(&str, &[&str]); 10] = [
        ("rusqlite", &["store/"]),
        ("bollard", &["sandbox/docker/"]),
        ("clap", &["cli/"]),
        ("axum", &["api/"]),
        ("git_command", &["staging/"]),
        ("git_program", &["staging/"]),
        ("command(\"git\")", &["staging/"]),
        ("Command::new", &["process/"]),
        // The store handle is the engine's (and the composition roots' that open it); the
        // API and its pages reach data through the engine's methods only.
        ("data.store", &["engine/", "cli/", "daemon.rs"]),
        ("ctx.repo(", &["engine/"]),
    ];
    for (needle, home) in homes {
        assert_eq!(
            naming(needle, home),
            Vec::<String>::new(),
            "only {home:?} name {needle}"
        );
    }
}

/// Every keyed call goes through the one prologue (`engine/idempotency.rs`): nothing else reads
/// an idempotency binding or judges a reused key.
#[test]
fn every_keyed_call_goes_through_the_one_prologue() {
    for needle in ["idempotency_binding", "used with different parameters"] {
        assert_eq!(
            naming(needle, &["engine/idempotency.rs", "store/"]),
            Vec::<String>::new(),
            "only the prologue names {needle}"
        );
    }
    assert!(
        !naming("idempotency_binding", &[]).is_empty(),
        "the reader finds the prologue's own read"
    );
}

#[test]
fn no_import_runs_back_up_a_layer() {
    let house = House::read();
    let arrows = house.arrows();
    // (a module, the modules it may never import): the floors ARCHITECTURE.md draws.
    let above_store = ["engine/", "api/", "cli/", "daemon.rs", "wire/", "backup.rs"];
    let rules: [(&str, &[&str]); 17] = [
        (
            "domain/",
            &["engine/", "api/", "store/", "wire/", "sandbox/", "staging/"],
        ),
        ("store/", &above_store),
        ("sandbox/", &["engine/", "api/", "store/", "workspace/"]),
        // The seam's own files know no backend (its factory, mod.rs, does).
        ("sandbox/runtime.rs", &["sandbox/docker/"]),
        ("sandbox/spec.rs", &["sandbox/docker/"]),
        ("sandbox/capture.rs", &["sandbox/docker/"]),
        ("sandbox/seccomp.rs", &["sandbox/docker/"]),
        // Jobs, recovery and the workflows hold a runtime, never a backend.
        ("engine/runner/", &["sandbox/docker/"]),
        ("engine/governed/", &["sandbox/docker/"]),
        ("engine/integration/", &["sandbox/docker/"]),
        ("workspace/", &["sandbox/docker/"]),
        // The API and its pages call the engine only: no store, no git, no runtime.
        ("api/", &["store/", "staging/", "sandbox/"]),
        ("staging/", &["engine/", "api/", "store/", "sandbox/"]),
        ("workspace/", &["engine/", "api/", "store/"]),
        ("metrics.rs", &["engine/", "api/"]),
        ("wire/", &["engine/", "api/", "store/"]),
        ("engine/", &["api/", "cli/", "daemon.rs"]),
    ];
    let mut broken = Vec::new();
    for ((a, b), path) in &arrows {
        let (from, to) = (house.name(*a), house.name(*b));
        for (module, never) in rules {
            if from.starts_with(module) && never.iter().any(|n| to.starts_with(n)) {
                broken.push(format!("{from} -> {to} ({path})"));
            }
        }
    }
    assert_eq!(broken, Vec::<String>::new());
}

/// The longest a test file may grow: past it, a file holds more than one subject.
const MAX_TEST_FILE_LINES: usize = 800;

#[test]
fn no_test_file_is_over_the_bound() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut stack = vec![root.clone()];
    let mut long = Vec::new();
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                seen += 1;
                let n = std::fs::read_to_string(&p).unwrap().lines().count();
                if n > MAX_TEST_FILE_LINES {
                    long.push(format!(
                        "{}: {n} lines",
                        p.strip_prefix(&root).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(seen > 40, "the integration tests were found ({seen} files)");
    assert_eq!(
        long,
        Vec::<String>::new(),
        "at most {MAX_TEST_FILE_LINES} lines"
    );
}

/// The most inherent methods one type in `engine/` has, over all its `impl` blocks: a workflow
/// step holds what it uses and does one step; a type past this wants splitting.
const MAX_ENGINE_TYPE_METHODS: usize = 30;

/// Inherent methods per type (`impl Name {` blocks at the top level of each file's code).
fn methods_per_type(files: &[Source]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for s in files {
        let mut current: Option<String> = None;
        for line in s.code.lines() {
            if let Some(rest) = line.strip_prefix("impl") {
                // `impl Name {` or `impl<T> Name<T> {`, never `impl Trait for Name {`.
                let rest = rest.trim_start();
                let rest = if rest.starts_with('<') {
                    rest.split_once("> ").map_or("", |(_, r)| r)
                } else {
                    rest
                };
                current = (rest.ends_with('{') && !rest.contains(" for "))
                    .then(|| {
                        rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                            .next()
                            .unwrap_or("")
                            .to_string()
                    })
                    .filter(|n| !n.is_empty());
            } else if line == "}" {
                current = None;
            } else if let Some(name) = &current {
                let l = line.trim_start_matches("    ");
                let indent = line.len() - l.len();
                let l = l
                    .trim_start_matches("pub ")
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub(super) ");
                let l = if l.starts_with("pub(in ") {
                    l.split_once(") ").map_or("", |(_, r)| r)
                } else {
                    l
                };
                if indent == 4 && (l.starts_with("fn ") || l.starts_with("async fn ")) {
                    *out.entry(name.clone()).or_insert(0) += 1;
                }
            }
        }
    }
    out
}

#[test]
fn no_type_in_the_engine_has_more_methods_than_the_bound() {
    let engine: Vec<Source> = sources()
        .into_iter()
        .filter(|s| s.module.first().is_some_and(|m| m == "engine"))
        .collect();
    let counts = methods_per_type(&engine);
    assert!(
        counts.get("Candidates").is_some_and(|n| *n > 10),
        "the reader counts methods over several files: {counts:?}"
    );
    let over: Vec<String> = counts
        .iter()
        .filter(|(_, n)| **n > MAX_ENGINE_TYPE_METHODS)
        .map(|(t, n)| format!("{t}: {n}"))
        .collect();
    assert_eq!(
        over,
        Vec::<String>::new(),
        "at most {MAX_ENGINE_TYPE_METHODS} methods per type in engine/"
    );
    // Outside the engine the same reader finds the store's many methods (one per query).
    let all = methods_per_type(&sources());
    assert!(
        all.get("Store")
            .is_some_and(|n| *n > MAX_ENGINE_TYPE_METHODS)
    );
}

/// The API and its pages call the service's workflows and its read accessors; they never reach
/// into the engine's context (its store, keys, repositories, runtime).
#[test]
fn the_api_never_reaches_into_the_engines_context() {
    let reaching: Vec<String> = sources()
        .into_iter()
        .filter(|s| s.module.first().is_some_and(|m| m == "api"))
        .filter(|s| {
            let joined: String = s.code.split_whitespace().collect();
            joined.contains(".ctx.") || joined.contains(".ctx,") || joined.contains(".ctx)")
        })
        .map(|s| s.path.display().to_string())
        .collect();
    assert_eq!(reaching, Vec::<String>::new());
    let engine_reads_it = sources().into_iter().any(|s| {
        s.module.first().is_some_and(|m| m == "engine")
            && s.code
                .split_whitespace()
                .collect::<String>()
                .contains(".ctx.")
    });
    assert!(engine_reads_it, "the reader finds the engine's own reads");
}

/// The workflows hold [`crate::engine::context::Handles`] (configuration, data, clock,
/// repositories, attestor, keys), never the whole `Context`: what runs a container (engines,
/// seccomp, dependency sets, the stop signal) is the background's and the runner's.
#[test]
fn the_workflows_hold_handles_not_the_whole_context() {
    let workflows = ["engine/integration/", "engine/governed/", "engine/jobs.rs"];
    let naming_context: Vec<String> = sources()
        .into_iter()
        .filter(|s| find_word_any(&s.code, "Context"))
        .map(|s| {
            s.path
                .strip_prefix(src_dir())
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    let in_workflows: Vec<&String> = naming_context
        .iter()
        .filter(|p| workflows.iter().any(|w| p.starts_with(w)))
        .collect();
    assert_eq!(in_workflows, Vec::<&String>::new());
    assert!(
        naming_context.iter().any(|p| p == "engine/background.rs"),
        "the reader finds the background's context: {naming_context:?}"
    );
}
