//! Resources and claims, pure: resource ids in their one canonical form, how two
//! resources overlap, the mode conflict matrix, and the claim state machine.
//!
//! What holds by construction: an id is parsed, never taken verbatim,
//! and has exactly one spelling (`file:./a` or `directory:src/` are refused, not cleaned into
//! another key); other categories conflict only on identical ids; transitions are checked
//! against the prior state.

use super::IllegalTransition;
use super::path::check_repo_path;
use serde::{Deserialize, Serialize};

/// Longest resource id accepted.
pub const MAX_RESOURCE_ID_BYTES: usize = 4200;

/// A resource, as its id names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ResourceId {
    /// `file:<path>`
    File { path: String },
    /// `directory:<path>`; `directory:` alone (an empty path) is the whole tree.
    Directory { path: String },
    /// `symbol:<path>#<name>`
    Symbol { path: String, name: String },
    /// `<type>:<name>` for any other lowercase category (`endpoint:GET /users`): conflicts
    /// only with the identical id, and never covers file changes.
    Other { kind: String, name: String },
}

impl ResourceId {
    /// Parses a wire id. Only the canonical spelling is accepted, so one resource has one id.
    pub fn parse(id: &str) -> Result<ResourceId, String> {
        if id.len() > MAX_RESOURCE_ID_BYTES {
            return Err(format!(
                "resource_id is {} bytes; the limit is {MAX_RESOURCE_ID_BYTES}",
                id.len()
            ));
        }
        let (kind, rest) = id
            .split_once(':')
            .ok_or_else(|| format!("resource_id {id:?} needs a <type>: prefix"))?;
        let path = |p: &str| {
            check_repo_path(p).map_err(|e| format!("resource_id {id:?}: the path {e}"))?;
            Ok::<_, String>(p.to_string())
        };
        match kind {
            "file" => Ok(ResourceId::File { path: path(rest)? }),
            "directory" if rest.is_empty() => Ok(ResourceId::Directory {
                path: String::new(),
            }),
            "directory" => Ok(ResourceId::Directory { path: path(rest)? }),
            "symbol" => {
                let (p, name) = rest
                    .split_once('#')
                    .ok_or_else(|| format!("resource_id {id:?} needs symbol:<path>#<name>"))?;
                if name.is_empty() || name.contains(['\0', '\n', '\r', '#']) {
                    return Err(format!(
                        "resource_id {id:?}: the symbol name must be non-empty, without '#', NUL or line breaks"
                    ));
                }
                Ok(ResourceId::Symbol {
                    path: path(p)?,
                    name: name.to_string(),
                })
            }
            k if !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                && k.as_bytes()[0].is_ascii_lowercase() =>
            {
                if rest.is_empty() || rest.contains(['\0', '\n', '\r']) {
                    return Err(format!(
                        "resource_id {id:?}: the name must be non-empty, without NUL or line breaks"
                    ));
                }
                Ok(ResourceId::Other {
                    kind: k.to_string(),
                    name: rest.to_string(),
                })
            }
            k => Err(format!(
                "resource_id {id:?}: the type {k:?} must be lowercase letters, digits or '_'"
            )),
        }
    }

    /// The canonical id.
    pub fn id(&self) -> String {
        match self {
            ResourceId::File { path } => format!("file:{path}"),
            ResourceId::Directory { path } => format!("directory:{path}"),
            ResourceId::Symbol { path, name } => format!("symbol:{path}#{name}"),
            ResourceId::Other { kind, name } => format!("{kind}:{name}"),
        }
    }

    /// The repository path it names, when it names one.
    pub fn path(&self) -> Option<&str> {
        match self {
            ResourceId::File { path }
            | ResourceId::Directory { path }
            | ResourceId::Symbol { path, .. } => Some(path),
            ResourceId::Other { .. } => None,
        }
    }
}

/// 1-based inclusive line span of a symbol, as a parser found it in the worktree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub start: u64,
    pub end: u64,
}

impl Span {
    fn intersects(self, other: Span) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

/// How two resources overlap (by category and id, plus overlapping symbol spans in one file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overlap {
    Identical,
    /// A symbol and the file it lives in.
    SymbolInFile,
    /// A symbol and a directory containing its file.
    SymbolInDirectory,
    /// A file and a directory containing it.
    FileInDirectory,
    /// Two directories, one inside (or equal to) the other.
    NestedDirectories,
    /// Two symbols of one file whose spans intersect.
    SymbolSpans,
}

/// True when `dir` (empty: the whole tree) contains `path` or equals it.
pub fn directory_contains(dir: &str, path: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

/// How `a` and `b` overlap, if they do. `spans` are the symbols' current spans, when both are
/// symbols of one file (without them, distinct symbols of a file do not overlap).
pub fn overlap(a: &ResourceId, b: &ResourceId, spans: Option<(Span, Span)>) -> Option<Overlap> {
    use ResourceId as R;
    if a == b {
        return Some(Overlap::Identical);
    }
    match (a, b) {
        (R::Symbol { path: p, .. }, R::File { path: f })
        | (R::File { path: f }, R::Symbol { path: p, .. }) => {
            (p == f).then_some(Overlap::SymbolInFile)
        }
        (R::Symbol { path: p, .. }, R::Directory { path: d })
        | (R::Directory { path: d }, R::Symbol { path: p, .. }) => {
            directory_contains(d, p).then_some(Overlap::SymbolInDirectory)
        }
        (R::File { path: f }, R::Directory { path: d })
        | (R::Directory { path: d }, R::File { path: f }) => {
            directory_contains(d, f).then_some(Overlap::FileInDirectory)
        }
        (R::Directory { path: x }, R::Directory { path: y }) => (directory_contains(x, y)
            || directory_contains(y, x))
        .then_some(Overlap::NestedDirectories),
        (R::Symbol { path: p, .. }, R::Symbol { path: q, .. }) => {
            (p == q && spans.is_some_and(|(s, t)| s.intersects(t))).then_some(Overlap::SymbolSpans)
        }
        (R::File { .. }, R::File { .. }) => None,
        (R::Other { .. }, _) | (_, R::Other { .. }) => None,
    }
}

/// Does a claim on `held` let its holder change `wanted`? The same id; a directory containing
/// it; or, for a symbol, a claim on its whole file.
pub fn covers(held: &ResourceId, wanted: &ResourceId) -> bool {
    if held == wanted {
        return true;
    }
    match (held, wanted.path()) {
        (ResourceId::Directory { path: d }, Some(p)) => directory_contains(d, p),
        (ResourceId::File { path: f }, Some(p)) => {
            matches!(wanted, ResourceId::Symbol { .. }) && f == p
        }
        (ResourceId::File { .. }, None)
        | (ResourceId::Directory { .. }, None)
        | (ResourceId::Symbol { .. }, _)
        | (ResourceId::Other { .. }, _) => false,
    }
}

/// What a claim lets its holder do (four modes: reading, writing, reviewing, exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimMode {
    Read,
    Write,
    Review,
    Exclusive,
}

impl ClaimMode {
    pub const ALL: [ClaimMode; 4] = [
        ClaimMode::Read,
        ClaimMode::Write,
        ClaimMode::Review,
        ClaimMode::Exclusive,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ClaimMode::Read => "read",
            ClaimMode::Write => "write",
            ClaimMode::Review => "review",
            ClaimMode::Exclusive => "exclusive",
        }
    }

    /// The mode named `s` (its `as_str`), if any.
    pub fn parse(s: &str) -> Option<ClaimMode> {
        ClaimMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// The conflict matrix, for two claims on overlapping resources: exclusive conflicts with
    /// everything; otherwise read conflicts with nothing, review with nothing, and write only
    /// with write.
    pub fn conflicts_with(self, other: ClaimMode) -> bool {
        use ClaimMode as M;
        match (self, other) {
            (M::Exclusive, _) | (_, M::Exclusive) => true,
            (M::Read, _) | (_, M::Read) => false,
            (M::Review, M::Review) | (M::Review, M::Write) | (M::Write, M::Review) => false,
            (M::Write, M::Write) => true,
        }
    }

    /// Whether the mode changes its resource (and so carries a `base_hash`).
    pub fn writes(self) -> bool {
        match self {
            ClaimMode::Write | ClaimMode::Exclusive => true,
            ClaimMode::Read | ClaimMode::Review => false,
        }
    }
}

/// Where a claim is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimState {
    Active,
    Suspended,
    Released,
    Revoked,
    Expired,
}

/// When a claim ends by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseOn {
    /// When its holder releases it (or it expires, or an admin ends it).
    #[default]
    Manual,
    /// Also when a proposal of its holder that it covers is accepted, withdrawn or rejected:
    /// released in the same transaction that ends the proposal.
    ProposalEnd,
}

impl ReleaseOn {
    pub const ALL: [ReleaseOn; 2] = [ReleaseOn::Manual, ReleaseOn::ProposalEnd];

    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseOn::Manual => "manual",
            ReleaseOn::ProposalEnd => "proposal_end",
        }
    }

    /// The value named `s` (its `as_str`), if any.
    pub fn parse(s: &str) -> Option<ReleaseOn> {
        ReleaseOn::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// A contention's state: recorded open by a refused acquire, resolved once by an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentionState {
    Open,
    Resolved,
}

impl ContentionState {
    pub const ALL: [ContentionState; 2] = [ContentionState::Open, ContentionState::Resolved];

    pub fn as_str(self) -> &'static str {
        match self {
            ContentionState::Open => "open",
            ContentionState::Resolved => "resolved",
        }
    }

    /// The state named `s` (its `as_str`), if any.
    pub fn parse(s: &str) -> Option<ContentionState> {
        ContentionState::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// What can happen to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimEvent {
    /// The holder (or, forced, an admin) gives it up.
    Release,
    /// An admin, or reconciliation after the resource changed, pauses it.
    Suspend,
    /// An admin resumes a suspended claim.
    Resume,
    /// An admin takes it away.
    Revoke,
    /// Its `expires_at` passed.
    Expire,
    /// A contention resolution hands it to the contender (a new grant, a new token).
    Transfer,
    /// Its expiry moves later.
    Extend,
}

impl ClaimState {
    pub const ALL: [ClaimState; 5] = [
        ClaimState::Active,
        ClaimState::Suspended,
        ClaimState::Released,
        ClaimState::Revoked,
        ClaimState::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ClaimState::Active => "active",
            ClaimState::Suspended => "suspended",
            ClaimState::Released => "released",
            ClaimState::Revoked => "revoked",
            ClaimState::Expired => "expired",
        }
    }

    /// Terminal states never change again.
    pub fn is_terminal(self) -> bool {
        match self {
            ClaimState::Released | ClaimState::Revoked | ClaimState::Expired => true,
            ClaimState::Active | ClaimState::Suspended => false,
        }
    }

    /// The states in which `pred` holds, as a SQL list (`'active', 'suspended'`).
    pub fn sql_list(pred: impl Fn(ClaimState) -> bool) -> String {
        super::candidate::sql_list(
            ClaimState::ALL
                .into_iter()
                .filter(|s| pred(*s))
                .map(ClaimState::as_str),
        )
    }

    /// Whether a claim in this state (and not yet past its expiry) blocks others.
    pub fn blocks(self) -> bool {
        match self {
            ClaimState::Active => true,
            ClaimState::Suspended
            | ClaimState::Released
            | ClaimState::Revoked
            | ClaimState::Expired => false,
        }
    }

    /// The state after `event`, or why it is not allowed.
    pub fn on(self, event: ClaimEvent) -> Result<ClaimState, IllegalTransition> {
        use ClaimEvent as E;
        use ClaimState as S;
        let next = match (self, event) {
            (S::Active, E::Release) | (S::Suspended, E::Release) => Some(S::Released),
            (S::Active, E::Suspend) => Some(S::Suspended),
            (S::Suspended, E::Resume) => Some(S::Active),
            (S::Active, E::Revoke) | (S::Suspended, E::Revoke) => Some(S::Revoked),
            (S::Active, E::Expire) | (S::Suspended, E::Expire) => Some(S::Expired),
            (S::Active, E::Transfer) => Some(S::Active),
            (S::Active, E::Extend) => Some(S::Active),
            (S::Active, E::Resume)
            | (S::Suspended, E::Suspend)
            | (S::Suspended, E::Transfer)
            | (S::Suspended, E::Extend)
            // Terminal: every event named, so a new one must be classified here.
            | (
                S::Released | S::Revoked | S::Expired,
                E::Release
                | E::Suspend
                | E::Resume
                | E::Revoke
                | E::Expire
                | E::Transfer
                | E::Extend,
            ) => None,
        };
        next.ok_or(IllegalTransition {
            machine: "claim",
            from: self.as_str(),
            event: event.as_str(),
        })
    }
}

impl ClaimEvent {
    pub const ALL: [ClaimEvent; 7] = [
        ClaimEvent::Release,
        ClaimEvent::Suspend,
        ClaimEvent::Resume,
        ClaimEvent::Revoke,
        ClaimEvent::Expire,
        ClaimEvent::Transfer,
        ClaimEvent::Extend,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ClaimEvent::Release => "release",
            ClaimEvent::Suspend => "suspend",
            ClaimEvent::Resume => "resume",
            ClaimEvent::Revoke => "revoke",
            ClaimEvent::Expire => "expire",
            ClaimEvent::Transfer => "transfer",
            ClaimEvent::Extend => "extend",
        }
    }
}

/// An extension never shortens a lease: the new expiry (Unix seconds) is the later of the old
/// one and `now + ttl`.
pub fn extended_expiry(old_expiry: i64, now: i64, ttl_seconds: i64) -> i64 {
    old_expiry.max(now.saturating_add(ttl_seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: &str) -> ResourceId {
        ResourceId::parse(id).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn ids_have_one_canonical_spelling() {
        for id in [
            "file:src/main.rs",
            "directory:src",
            "directory:",
            "symbol:src/lib.rs#parse",
            "endpoint:GET /users",
            "file:dir\\with\\backslash",
            "file:naïve\tname",
        ] {
            assert_eq!(r(id).id(), id);
        }
        for bad in [
            "file:./src/main.rs",
            "file:src//main.rs",
            "file:src/../main.rs",
            "file:/etc/passwd",
            "directory:src/",
            "file:",
            "file:.git/config",
            "file:src/.GIT/x",
            "file:a\0b",
            "symbol:src/lib.rs",
            "symbol:src/lib.rs#",
            "symbol:src/lib.rs#a#b",
            "File:src/main.rs",
            "main.rs",
            ":x",
            "endpoint:",
        ] {
            assert!(ResourceId::parse(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("file:{}", "a".repeat(MAX_RESOURCE_ID_BYTES));
        assert!(
            ResourceId::parse(&long)
                .unwrap_err()
                .contains(&MAX_RESOURCE_ID_BYTES.to_string())
        );
    }

    /// Every overlap kind, with a pair that has it and a near pair that does not.
    #[test]
    fn overlap_kinds_are_exactly_seed_003s_pairs() {
        let s = |a, b| (Span { start: a, end: b }, Span { start: 10, end: 20 });
        type Case<'a> = (&'a str, &'a str, Option<(Span, Span)>, Option<Overlap>);
        let cases: Vec<Case> = vec![
            ("file:a/b.rs", "file:a/b.rs", None, Some(Overlap::Identical)),
            ("file:a/b.rs", "file:a/c.rs", None, None),
            (
                "symbol:a/b.rs#f",
                "file:a/b.rs",
                None,
                Some(Overlap::SymbolInFile),
            ),
            ("symbol:a/b.rs#f", "file:a/bb.rs", None, None),
            (
                "symbol:a/b.rs#f",
                "directory:a",
                None,
                Some(Overlap::SymbolInDirectory),
            ),
            ("symbol:ab/b.rs#f", "directory:a", None, None),
            (
                "file:a/b.rs",
                "directory:a",
                None,
                Some(Overlap::FileInDirectory),
            ),
            (
                "file:a/b.rs",
                "directory:",
                None,
                Some(Overlap::FileInDirectory),
            ),
            ("file:ab.rs", "directory:a", None, None),
            (
                "directory:a",
                "directory:a/b",
                None,
                Some(Overlap::NestedDirectories),
            ),
            ("directory:a", "directory:ab", None, None),
            (
                "symbol:a.rs#f",
                "symbol:a.rs#f",
                None,
                Some(Overlap::Identical),
            ),
            (
                "symbol:a.rs#f",
                "symbol:a.rs#g",
                Some(s(15, 30)),
                Some(Overlap::SymbolSpans),
            ),
            ("symbol:a.rs#f", "symbol:a.rs#g", Some(s(21, 30)), None),
            ("symbol:a.rs#f", "symbol:a.rs#g", None, None),
            ("symbol:a.rs#f", "symbol:b.rs#f", Some(s(10, 20)), None),
            ("endpoint:x", "endpoint:x", None, Some(Overlap::Identical)),
            ("endpoint:a.rs", "file:a.rs", None, None),
            ("endpoint:x", "directory:", None, None),
        ];
        for (a, b, spans, want) in cases {
            assert_eq!(overlap(&r(a), &r(b), spans), want, "{a} vs {b}");
            let flipped = spans.map(|(x, y)| (y, x));
            assert_eq!(overlap(&r(b), &r(a), flipped), want, "{b} vs {a}");
        }
    }

    #[test]
    fn the_conflict_matrix_is_seed_003s_and_symmetric() {
        use ClaimMode as M;
        let conflicting = [
            (M::Exclusive, M::Read),
            (M::Exclusive, M::Write),
            (M::Exclusive, M::Review),
            (M::Exclusive, M::Exclusive),
            (M::Write, M::Write),
        ];
        for a in ClaimMode::ALL {
            for b in ClaimMode::ALL {
                let want = conflicting.contains(&(a, b)) || conflicting.contains(&(b, a));
                assert_eq!(a.conflicts_with(b), want, "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn only_allowed_transitions_happen_and_terminal_states_stay() {
        use ClaimEvent as E;
        use ClaimState as S;
        let allowed = [
            (S::Active, E::Release, S::Released),
            (S::Suspended, E::Release, S::Released),
            (S::Active, E::Suspend, S::Suspended),
            (S::Suspended, E::Resume, S::Active),
            (S::Active, E::Revoke, S::Revoked),
            (S::Suspended, E::Revoke, S::Revoked),
            (S::Active, E::Expire, S::Expired),
            (S::Suspended, E::Expire, S::Expired),
            (S::Active, E::Transfer, S::Active),
            (S::Active, E::Extend, S::Active),
        ];
        for s in ClaimState::ALL {
            for e in ClaimEvent::ALL {
                let want = allowed
                    .iter()
                    .find(|(f, ev, _)| *f == s && *ev == e)
                    .map(|(_, _, t)| *t);
                match (s.on(e), want) {
                    (Ok(t), Some(w)) => assert_eq!(t, w),
                    (Err(err), None) => {
                        assert_eq!(
                            err.to_string(),
                            format!("claim: cannot {} from {}", e.as_str(), s.as_str())
                        );
                        assert!(
                            s.is_terminal() || !matches!(e, E::Release | E::Revoke | E::Expire)
                        );
                    }
                    (got, want) => panic!("{s:?} {e:?}: {got:?}, expected {want:?}"),
                }
            }
        }
        assert!(S::Active.blocks());
        assert!(ClaimState::ALL.iter().filter(|s| s.blocks()).count() == 1);
    }

    #[test]
    fn an_extension_never_shortens_a_lease() {
        assert_eq!(extended_expiry(1_000, 100, 60), 1_000);
        assert_eq!(extended_expiry(1_000, 990, 60), 1_050);
        assert_eq!(extended_expiry(i64::MAX - 1, i64::MAX - 5, 60), i64::MAX);
    }

    #[test]
    fn a_claim_covers_its_id_its_directory_contents_and_its_files_symbols() {
        assert!(covers(&r("file:a/b.rs"), &r("file:a/b.rs")));
        assert!(covers(&r("directory:a"), &r("file:a/b.rs")));
        assert!(covers(&r("directory:"), &r("directory:a")));
        assert!(covers(&r("file:a/b.rs"), &r("symbol:a/b.rs#f")));
        assert!(!covers(&r("file:a/b.rs"), &r("file:a/b.rsx")));
        assert!(!covers(&r("directory:a"), &r("file:ab/c")));
        assert!(!covers(&r("symbol:a/b.rs#f"), &r("file:a/b.rs")));
        assert!(!covers(&r("db:x"), &r("db:y")));
        assert!(covers(&r("db:x"), &r("db:x")));
    }
}
