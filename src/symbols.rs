//! Symbol spans from real parsers (tree-sitter grammars for Rust, Python, Go, JavaScript and
//! TypeScript), read from the worktree's bytes: never the process's working directory, never
//! a guess. A symbol that cannot be resolved is an error, never a zero span
//! (which would claim nothing while appearing to claim something).
//!
//! Names. Every declaration has a qualified name: its enclosing containers and its own name,
//! joined by `::` in Rust (`mod`, `trait` and `impl` blocks: `Store::open`) and `.` elsewhere
//! (classes, namespaces, Go receivers: `Store.Open`). A lookup matches the qualified name
//! exactly, or else the bare name when exactly one declaration has it; several matches are
//! an error listing them.
//!
//! Spans are 1-based inclusive lines of the declaration's node (Python's decorators and a
//! JavaScript `const f = () => ...` statement included). A file with a syntax error is
//! refused rather than half-trusted.

use crate::domain::claim::Span;
use tree_sitter::{Node, Parser};

/// Largest source file whose symbols are resolved.
pub const MAX_SYMBOL_SOURCE_BYTES: usize = 4 * 1024 * 1024;
/// Most containers (modules, classes, impls, namespaces) one declaration may sit in. Real code
/// stays far below; a file nesting deeper is refused instead of costing time and memory
/// quadratic in its depth.
pub const MAX_SYMBOL_NESTING: usize = 64;
/// Deepest nesting of `(`, `[` and `{` a file may have before it is parsed at all: a cheap
/// scan that refuses a hostile file before the parser builds a tree for it (real code nests a
/// few dozen levels).
pub const MAX_SYMBOL_BRACKET_DEPTH: usize = 1024;
/// Most syntax nodes one file's walk visits.
pub const MAX_SYMBOL_NODES: usize = 4_000_000;
/// Longest qualified name, in bytes.
pub const MAX_SYMBOL_NAME_BYTES: usize = 4096;
/// Longest one file's parse and walk may take.
pub const MAX_SYMBOL_TIME: std::time::Duration = std::time::Duration::from_secs(5);
/// Most declarations listed in a "not found" or "ambiguous" error.
const LISTED: usize = 12;

/// A language Airlock can find symbols in, detected from a path's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Rust,
    Python,
    Go,
    JavaScript,
    TypeScript,
    Tsx,
}

impl Language {
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Go => "go",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
        }
    }

    /// The language of `path`, by extension; `None` when there is no grammar for it.
    pub fn detect(path: &str) -> Option<Language> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let (_, ext) = name.rsplit_once('.')?;
        Some(match ext {
            "rs" => Language::Rust,
            "py" | "pyi" => Language::Python,
            "go" => Language::Go,
            "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
            "ts" | "mts" | "cts" => Language::TypeScript,
            "tsx" => Language::Tsx,
            _ => return None,
        })
    }

    fn grammar(self) -> tree_sitter::Language {
        match self {
            Language::Rust => tree_sitter_rust::LANGUAGE.into(),
            Language::Python => tree_sitter_python::LANGUAGE.into(),
            Language::Go => tree_sitter_go::LANGUAGE.into(),
            Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
        }
    }

    fn separator(self) -> &'static str {
        match self {
            Language::Rust => "::",
            Language::Python
            | Language::Go
            | Language::JavaScript
            | Language::TypeScript
            | Language::Tsx => ".",
        }
    }
}

/// One declaration of a source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// The qualified name (`Store::open`, `Store.open`).
    pub name: String,
    /// The grammar's node kind (`function_item`, `class_definition`, ...).
    pub kind: String,
    pub span: Span,
}

/// Why a symbol has no span.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SymbolError {
    #[error(
        "{path:?}: no parser for this file type (symbols are found in .rs, .py, .go, .js, .jsx, .mjs, .cjs, .ts, .mts, .cts and .tsx files)"
    )]
    Unsupported { path: String },
    #[error("{path:?} does not exist in the worktree")]
    Missing { path: String },
    #[error("{path:?}: {message}")]
    Unreadable { path: String, message: String },
    #[error("{path:?} does not parse as {language}: a span from a broken file is not trusted")]
    Syntax {
        path: String,
        language: &'static str,
    },
    #[error("{path:?} declares no symbol {name:?}; it declares: {known}")]
    NotFound {
        path: String,
        name: String,
        known: String,
    },
    #[error("{path:?} declares {name:?} more than once ({matches}); name it qualified")]
    Ambiguous {
        path: String,
        name: String,
        matches: String,
    },
    /// A bound on the work one file may cost was reached (the limit's name and value).
    #[error("{path:?} is too complex to resolve symbols in: {limit} exceeds {bound}")]
    TooComplex {
        path: String,
        limit: &'static str,
        bound: u64,
    },
}

/// The 1-based inclusive lines a node covers (a node ending at column 0 ends on the line
/// before).
fn span_of(n: Node) -> Span {
    let (s, e) = (n.start_position(), n.end_position());
    let end = if e.column == 0 && e.row > s.row {
        e.row
    } else {
        e.row + 1
    };
    Span {
        start: s.row as u64 + 1,
        end: end as u64,
    }
}

fn text<'a>(n: Node, src: &'a [u8]) -> &'a str {
    n.utf8_text(src).unwrap_or("")
}

fn field_text<'a>(n: Node, field: &str, src: &'a [u8]) -> Option<&'a str> {
    n.child_by_field_name(field)
        .map(|c| text(c, src))
        .filter(|t| !t.is_empty())
}

/// A type's name without generics, references or pointers (`&mut Foo<T>` -> `Foo`).
fn bare_type(t: &str) -> String {
    let t = t.trim_start_matches(['&', '*', ' ']);
    let t = t
        .strip_prefix("mut ")
        .unwrap_or(t)
        .trim_start_matches(['*', ' ']);
    let end = t.find(['<', '[', ' ', '(']).unwrap_or(t.len());
    t[..end].to_string()
}

/// What a node declares: (name, the node whose span counts, whether it contains others).
fn declares<'t>(lang: Language, n: Node<'t>, src: &[u8]) -> Option<(String, Node<'t>, bool)> {
    let kind = n.kind();
    let named = |container| field_text(n, "name", src).map(|s| (s.to_string(), n, container));
    match lang {
        Language::Rust => match kind {
            "function_item"
            | "function_signature_item"
            | "struct_item"
            | "enum_item"
            | "union_item"
            | "type_item"
            | "const_item"
            | "static_item"
            | "macro_definition" => named(false),
            "trait_item" | "mod_item" => named(true),
            // An impl block is a container (its methods are `Type::method`), not a symbol.
            "impl_item" => field_text(n, "type", src).map(|t| (bare_type(t), n, true)),
            _ => None,
        },
        Language::Python => match kind {
            "function_definition" | "class_definition" => {
                let span_node = n
                    .parent()
                    .filter(|p| p.kind() == "decorated_definition")
                    .unwrap_or(n);
                field_text(n, "name", src)
                    .map(|s| (s.to_string(), span_node, kind == "class_definition"))
            }
            _ => None,
        },
        Language::Go => match kind {
            "function_declaration" | "type_spec" => named(false),
            "method_declaration" => {
                let name = field_text(n, "name", src)?;
                let receiver = n
                    .child_by_field_name("receiver")
                    .and_then(|r| {
                        let mut c = r.walk();
                        r.named_children(&mut c)
                            .find(|p| p.kind() == "parameter_declaration")
                    })
                    .and_then(|p| field_text(p, "type", src))
                    .map(bare_type);
                Some((
                    match receiver {
                        Some(t) if !t.is_empty() => format!("{t}.{name}"),
                        Some(_) | None => name.to_string(),
                    },
                    n,
                    false,
                ))
            }
            _ => None,
        },
        Language::JavaScript | Language::TypeScript | Language::Tsx => match kind {
            "function_declaration"
            | "generator_function_declaration"
            | "method_definition"
            | "interface_declaration"
            | "type_alias_declaration"
            | "enum_declaration"
            | "function_signature"
            | "abstract_method_signature" => named(false),
            "class_declaration" | "abstract_class_declaration" | "internal_module" => named(true),
            "variable_declarator" => {
                let value = n.child_by_field_name("value")?;
                let is_fn = matches!(
                    value.kind(),
                    "arrow_function"
                        | "function_expression"
                        | "function"
                        | "generator_function"
                        | "class"
                );
                if !is_fn {
                    return None;
                }
                // `const f = () => ...;`: the statement's lines, when it declares only f.
                let span_node = n
                    .parent()
                    .filter(|p| {
                        matches!(p.kind(), "lexical_declaration" | "variable_declaration")
                            && p.named_child_count() == 1
                    })
                    .unwrap_or(n);
                field_text(n, "name", src).map(|s| (s.to_string(), span_node, false))
            }
            _ => None,
        },
    }
}

/// Every declaration of `src`, in source order, within [`MAX_SYMBOL_NESTING`],
/// [`MAX_SYMBOL_NODES`], [`MAX_SYMBOL_NAME_BYTES`] and [`MAX_SYMBOL_TIME`]. The walk is
/// iterative and each pending node costs a fixed few words (its container is an index into
/// the containers seen so far), so neither deep nesting nor a large file can exhaust memory.
pub fn symbols(lang: Language, path: &str, src: &[u8]) -> Result<Vec<Symbol>, SymbolError> {
    let started = std::time::Instant::now();
    let too = |limit: &'static str, bound: u64| SymbolError::TooComplex {
        path: path.into(),
        limit,
        bound,
    };
    if bracket_depth(src) > MAX_SYMBOL_BRACKET_DEPTH {
        return Err(too("bracket nesting", MAX_SYMBOL_BRACKET_DEPTH as u64));
    }
    let mut parser = Parser::new();
    parser
        .set_language(&lang.grammar())
        .expect("the bundled grammars match the tree-sitter version");
    let mut timed_out = false;
    let mut progress = |_: &tree_sitter::ParseState| {
        if started.elapsed() > MAX_SYMBOL_TIME {
            timed_out = true;
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    };
    let tree = parser.parse_with_options(
        &mut |at: usize, _| src.get(at..).unwrap_or_default(),
        None,
        Some(tree_sitter::ParseOptions::new().progress_callback(&mut progress)),
    );
    if timed_out {
        return Err(too("parse time (ms)", MAX_SYMBOL_TIME.as_millis() as u64));
    }
    let tree = tree.ok_or(SymbolError::Syntax {
        path: path.into(),
        language: lang.as_str(),
    })?;
    let root = tree.root_node();
    if root.has_error() {
        return Err(SymbolError::Syntax {
            path: path.into(),
            language: lang.as_str(),
        });
    }
    let sep = lang.separator();
    let mut out = Vec::new();
    // Containers seen so far: (qualified name, nesting). A pending node names its container
    // by index, so the stack holds no strings.
    let mut containers: Vec<(String, usize)> = Vec::new();
    let mut stack: Vec<(Node, Option<usize>)> = vec![(root, None)];
    let mut visited = 0usize;
    while let Some((node, container)) = stack.pop() {
        visited += 1;
        if visited > MAX_SYMBOL_NODES {
            return Err(too("syntax nodes", MAX_SYMBOL_NODES as u64));
        }
        if visited.is_multiple_of(4096) && started.elapsed() > MAX_SYMBOL_TIME {
            return Err(too("parse time (ms)", MAX_SYMBOL_TIME.as_millis() as u64));
        }
        let mut inner = container;
        if let Some((name, span_node, is_container)) = declares(lang, node, src) {
            let (prefix, depth) = match container {
                Some(i) => (Some(containers[i].0.as_str()), containers[i].1),
                None => (None, 0),
            };
            let qualified = match prefix {
                Some(p) => format!("{p}{sep}{name}"),
                None => name,
            };
            if qualified.len() > MAX_SYMBOL_NAME_BYTES {
                return Err(too("qualified name bytes", MAX_SYMBOL_NAME_BYTES as u64));
            }
            if node.kind() != "impl_item" {
                out.push(Symbol {
                    name: qualified.clone(),
                    kind: node.kind().to_string(),
                    span: span_of(span_node),
                });
            }
            if is_container {
                if depth + 1 > MAX_SYMBOL_NESTING {
                    return Err(too("container nesting", MAX_SYMBOL_NESTING as u64));
                }
                containers.push((qualified, depth + 1));
                inner = Some(containers.len() - 1);
            }
        }
        let mut c = node.walk();
        let first = stack.len();
        stack.extend(node.named_children(&mut c).map(|child| (child, inner)));
        stack[first..].reverse();
    }
    Ok(out)
}

/// The deepest nesting of brackets in `src`, counted over the raw bytes (strings and comments
/// included: an overestimate is fine for a bound this far above real code).
fn bracket_depth(src: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for b in src {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

fn listing<'a>(it: impl Iterator<Item = &'a Symbol>) -> String {
    let all: Vec<String> = it
        .map(|s| format!("{} (lines {}-{})", s.name, s.span.start, s.span.end))
        .collect();
    if all.is_empty() {
        return "nothing".into();
    }
    let more = all.len().saturating_sub(LISTED);
    let mut s = all.into_iter().take(LISTED).collect::<Vec<_>>().join(", ");
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}

/// The span of `name` in `src` (see the module's naming rules).
pub fn resolve(lang: Language, path: &str, src: &[u8], name: &str) -> Result<Span, SymbolError> {
    let all = symbols(lang, path, src)?;
    let exact: Vec<&Symbol> = all.iter().filter(|s| s.name == name).collect();
    let matches = if exact.is_empty() {
        let sep = lang.separator();
        all.iter()
            .filter(|s| s.name.rsplit(sep).next() == Some(name))
            .collect()
    } else {
        exact
    };
    match matches.as_slice() {
        [one] => Ok(one.span),
        [] => Err(SymbolError::NotFound {
            path: path.into(),
            name: name.into(),
            known: listing(all.iter()),
        }),
        many => Err(SymbolError::Ambiguous {
            path: path.into(),
            name: name.into(),
            matches: listing(many.iter().copied()),
        }),
    }
}

/// Resolves `name` in `path` beneath the worktree `root`.
pub fn resolve_in(
    root: &crate::beneath::Root,
    path: &str,
    name: &str,
) -> Result<Span, SymbolError> {
    let lang =
        Language::detect(path).ok_or_else(|| SymbolError::Unsupported { path: path.into() })?;
    let src = crate::worktree::source(root, path, MAX_SYMBOL_SOURCE_BYTES)
        .map_err(|e| SymbolError::Unreadable {
            path: path.into(),
            message: e.to_string(),
        })?
        .ok_or_else(|| SymbolError::Missing { path: path.into() })?;
    resolve(lang, path, &src, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(lang: Language, src: &str) -> Vec<(String, u64, u64)> {
        symbols(lang, "f", src.as_bytes())
            .unwrap()
            .into_iter()
            .map(|s| (s.name, s.span.start, s.span.end))
            .collect()
    }

    fn s(n: &str, a: u64, b: u64) -> (String, u64, u64) {
        (n.to_string(), a, b)
    }

    #[test]
    fn rust_declarations_with_impl_and_module_qualifiers() {
        let src = "use x;\n\nfn free() {\n    1;\n}\n\nstruct Store;\n\nimpl<T> Store<T> {\n    pub fn open() {}\n}\n\nimpl Drop for Store {\n    fn drop(&mut self) {}\n}\n\nmod m {\n    trait T {\n        fn req(&self);\n    }\n}\n";
        assert_eq!(
            spans(Language::Rust, src),
            [
                s("free", 3, 5),
                s("Store", 7, 7),
                s("Store::open", 10, 10),
                s("Store::drop", 14, 14),
                s("m", 17, 21),
                s("m::T", 18, 20),
                s("m::T::req", 19, 19),
            ]
        );
        assert_eq!(
            resolve(Language::Rust, "f", src.as_bytes(), "open"),
            Ok(Span { start: 10, end: 10 }),
            "a bare name that is unique resolves"
        );
    }

    #[test]
    fn python_decorators_and_classes() {
        let src = "import os\n\n@dec\ndef f():\n    pass\n\nclass C:\n    def m(self):\n        return 1\n";
        assert_eq!(
            spans(Language::Python, src),
            [s("f", 3, 5), s("C", 7, 9), s("C.m", 8, 9)]
        );
    }

    #[test]
    fn go_functions_methods_and_types() {
        let src = "package p\n\ntype Store struct {\n\tn int\n}\n\nfunc (s *Store) Open() error {\n\treturn nil\n}\n\nfunc New() *Store { return nil }\n";
        assert_eq!(
            spans(Language::Go, src),
            [s("Store", 3, 5), s("Store.Open", 7, 9), s("New", 11, 11)]
        );
    }

    #[test]
    fn javascript_and_typescript() {
        let js = "function a() {\n}\nconst b = () => {\n  return 1;\n};\nclass K {\n  m() {}\n}\nconst n = 3;\n";
        assert_eq!(
            spans(Language::JavaScript, js),
            [s("a", 1, 2), s("b", 3, 5), s("K", 6, 8), s("K.m", 7, 7)]
        );
        let ts = "interface I {\n  x: number;\n}\ntype T = string;\nexport function f(x: I): T {\n  return '';\n}\nnamespace N {\n  export class C {}\n}\n";
        assert_eq!(
            spans(Language::TypeScript, ts),
            [
                s("I", 1, 3),
                s("T", 4, 4),
                s("f", 5, 7),
                s("N", 8, 10),
                s("N.C", 9, 9)
            ]
        );
        assert!(symbols(Language::Tsx, "f", b"const e = () => <div/>;\n").is_ok());
    }

    #[test]
    fn unresolvable_symbols_are_errors_never_zero_spans() {
        let src = b"impl Y { fn a() {} }\nimpl X { fn a() {} }\n";
        match resolve(Language::Rust, "f.rs", src, "a") {
            Err(SymbolError::Ambiguous { matches, .. }) => {
                assert!(matches.contains("X::a"), "{matches}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            resolve(Language::Rust, "f.rs", src, "X::a"),
            Ok(Span { start: 2, end: 2 })
        );
        match resolve(Language::Rust, "f.rs", src, "zzz") {
            Err(SymbolError::NotFound { known, .. }) => assert!(known.contains("X::a")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            resolve(Language::Rust, "f.rs", b"fn a( {\n", "a"),
            Err(SymbolError::Syntax { .. })
        ));
        assert_eq!(Language::detect("a/b.txt"), None);
        assert_eq!(Language::detect("Makefile"), None);
        assert_eq!(Language::detect("x/y.tsx"), Some(Language::Tsx));
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let depth = 20_000;
        let src = format!("x = {}1{}\n", "[".repeat(depth), "]".repeat(depth));
        // Whatever the parser makes of it, there is an answer and no stack overflow.
        let _ = symbols(Language::Python, "f.py", src.as_bytes());
    }

    #[test]
    fn nesting_beyond_the_bound_is_refused_naming_it_and_up_to_it_resolves() {
        let nest = |n: usize| format!("{}fn f() {{}}\n{}", "mod m {\n".repeat(n), "}\n".repeat(n));
        let ok = symbols(Language::Rust, "f.rs", nest(MAX_SYMBOL_NESTING).as_bytes()).unwrap();
        assert_eq!(ok.len(), MAX_SYMBOL_NESTING + 1);
        let deepest = ok.iter().find(|s| s.name.ends_with("::f")).unwrap();
        assert_eq!(deepest.name.matches("m::").count(), MAX_SYMBOL_NESTING);
        match symbols(
            Language::Rust,
            "f.rs",
            nest(MAX_SYMBOL_NESTING + 1).as_bytes(),
        ) {
            Err(SymbolError::TooComplex { limit, bound, .. }) => {
                assert_eq!(
                    (limit, bound),
                    ("container nesting", MAX_SYMBOL_NESTING as u64)
                )
            }
            other => panic!("{other:?}"),
        }
        // Far deeper: refused by the scan before any tree is built.
        match symbols(Language::Rust, "f.rs", nest(100_000).as_bytes()) {
            Err(SymbolError::TooComplex { limit, bound, .. }) => {
                assert_eq!(
                    (limit, bound),
                    ("bracket nesting", MAX_SYMBOL_BRACKET_DEPTH as u64)
                )
            }
            other => panic!("{other:?}"),
        }
        let ns = |n: usize| format!("{}{}", "namespace N {\n".repeat(n), "}\n".repeat(n));
        assert!(matches!(
            symbols(Language::TypeScript, "f.ts", ns(1000).as_bytes()),
            Err(SymbolError::TooComplex { .. })
        ));
        let long = format!("fn {}() {{}}\n", "x".repeat(MAX_SYMBOL_NAME_BYTES + 1));
        assert!(matches!(
            symbols(Language::Rust, "f.rs", long.as_bytes()),
            Err(SymbolError::TooComplex {
                limit: "qualified name bytes",
                ..
            })
        ));
    }
}
