//! The method registry: every `POST /api/v1/<method>` the daemon routes, with its body limit.
//! The router's body limits, the metrics' method labels and `airlock call`'s name check read
//! it; a test proves every entry is dispatched and documented in docs/api.md, so a method
//! cannot be routed without being listed (or listed without being routed).

/// How large a method's request body may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// [`super::SMALL_BODY_LIMIT`].
    Small,
    /// A patch: `max_patch_bytes` JSON-escaped at worst plus an envelope
    /// ([`crate::limits::patch_body_limit`]).
    Patch,
    /// [`super::EVIDENCE_BODY_LIMIT`].
    Evidence,
    /// [`super::RESOLVE_BODY_LIMIT`].
    Resolve,
    /// [`super::PREPARE_BODY_LIMIT`].
    Prepare,
    /// [`super::VERIFY_BODY_LIMIT`].
    Verify,
}

impl Body {
    pub fn bytes(self, config: &crate::config::Config) -> usize {
        match self {
            Body::Small => super::SMALL_BODY_LIMIT,
            Body::Patch => crate::limits::patch_body_limit(config.max_patch_bytes),
            Body::Evidence => super::EVIDENCE_BODY_LIMIT,
            Body::Resolve => super::RESOLVE_BODY_LIMIT,
            Body::Prepare => super::PREPARE_BODY_LIMIT,
            Body::Verify => super::VERIFY_BODY_LIMIT,
        }
    }
}

/// A reference to the component schema `name`.
pub fn component_ref(name: &str) -> serde_json::Value {
    serde_json::json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Registers a type's JSON schema (and those it refers to) and answers its component name.
pub type SchemaFn = fn(&mut Schemas) -> String;

/// Component schemas by name, as utoipa derives them from the wire and domain types.
pub type Schemas = std::collections::BTreeMap<String, serde_json::Value>;

/// `T`'s schema, registered with every schema it refers to.
pub fn schema_of<T: utoipa::ToSchema>(out: &mut Schemas) -> String {
    let mut deps = Vec::new();
    T::schemas(&mut deps);
    for (name, schema) in deps {
        out.entry(name)
            .or_insert_with(|| serde_json::to_value(schema).expect("a schema serializes"));
    }
    let name = T::name().into_owned();
    out.entry(name.clone())
        .or_insert_with(|| serde_json::to_value(T::schema()).expect("a schema serializes"));
    name
}

/// One field of a reply object. Every kind names its shape: there is no untyped object, so
/// the document describes every value a reply carries.
#[derive(Clone, Copy)]
pub enum Field {
    /// A value of a type that derives its schema.
    Typed(SchemaFn),
    /// Such a value, or null.
    OptTyped(SchemaFn),
    /// A list of such values.
    ListOf(SchemaFn),
    /// A list of strings (ids).
    Strings,
    /// A string, or null (a cursor past the last page).
    OptString,
    /// An integer, or null.
    OptInteger,
    /// A boolean.
    Bool,
    /// A string.
    String,
}

/// What a successful call answers.
#[derive(Clone, Copy)]
pub enum Reply {
    /// An object with exactly these fields.
    Fields(&'static [(&'static str, Field)]),
    /// A value of a type that derives its schema.
    Typed(SchemaFn),
    /// Exactly one of these closed shapes, by what the request asked
    /// (`transaction.control`'s `action`).
    OneOf(&'static [SchemaFn]),
}

/// One routed method.
#[derive(Clone, Copy)]
pub struct Method {
    pub name: &'static str,
    pub body: Body,
    /// Who may call it (the service checks; this is its documentation).
    pub permission: &'static str,
    pub summary: &'static str,
    /// The request body's schema: the type the dispatcher parses the body into.
    pub params: SchemaFn,
    pub reply: Reply,
    /// Whose MCP tool list carries it.
    pub audience: Audience,
    /// Another name for this method (one older clients send), answering exactly as it does.
    pub alias_of: Option<&'static str>,
}

/// Who is offered a method as an MCP tool at `/mcp`. The tool list is per token: a tool is
/// listed only to callers who may call it at all (the call itself is authorized as over HTTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Not a tool: the candidate flow and the human gates are decided by people, on the page
    /// or over the API, never through an agent's tool.
    Human,
    /// A tool offered to exactly the tokens that may call it at all: a member holding one of
    /// `members` in some workspace, and a run token as `runs` says (the service still decides
    /// each call: the workspace, the holder, the author, a role).
    Tool {
        members: &'static [crate::config::Permission],
        runs: Runs,
    },
}

/// Which run tokens a tool is offered to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// None (the method is for members only).
    Never,
    /// Every run (the method's permission is one a run has in its workspace).
    Always,
    /// A run holding a review role in its workspace (`roles."run:<run_id>"`).
    RoleHolders,
}

impl Audience {
    /// Whether `actor` is offered the tool (`None`: a caller without a known token, offered
    /// nothing).
    pub fn offers(
        self,
        config: &crate::config::Config,
        actor: Option<&crate::engine::service::Actor>,
    ) -> bool {
        use crate::engine::service::Actor;
        match (self, actor) {
            (Audience::Human, _) | (Audience::Tool { .. }, None) => false,
            (Audience::Tool { members, .. }, Some(Actor::Member { member_id })) => {
                config.workspaces.values().any(|w| {
                    w.members
                        .get(member_id)
                        .is_some_and(|have| members.iter().any(|p| have.contains(p)))
                })
            }
            (
                Audience::Tool { runs, .. },
                Some(Actor::Run {
                    run_id,
                    workspace_id,
                }),
            ) => match runs {
                Runs::Never => false,
                Runs::Always => true,
                Runs::RoleHolders => config.workspaces.get(workspace_id).is_some_and(|w| {
                    w.roles
                        .get(&format!("run:{run_id}"))
                        .is_some_and(|roles| !roles.is_empty())
                }),
            },
            (Audience::Tool { .. }, Some(Actor::System { .. })) => false,
        }
    }

    pub fn is_tool(self) -> bool {
        self != Audience::Human
    }
}

impl std::fmt::Debug for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Method").field("name", &self.name).finish()
    }
}

mod table;
pub use table::METHODS;

/// The registry entry of `name`.
pub fn spec(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

/// The most edits [`nearest`] makes to a name before it stops calling it a typo.
pub const MAX_SUGGESTION_EDITS: usize = 3;

/// The registered method nearest to an unknown `name` (by edit distance, at most
/// [`MAX_SUGGESTION_EDITS`]; ties go to the first in the table), for a "did you mean" hint.
pub fn nearest(name: &str) -> Option<&'static str> {
    METHODS
        .iter()
        .map(|m| (edit_distance(name, m.name), m.name))
        .filter(|(d, _)| *d <= MAX_SUGGESTION_EDITS)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// The hint for an unknown method: the [`nearest`] name, else the methods of the same noun
/// (`proposal.show` -> the `proposal.*` methods).
pub fn suggestion(name: &str) -> Option<String> {
    if let Some(near) = nearest(name) {
        return Some(format!("did you mean {near}?"));
    }
    let noun = name.split_once('.')?.0;
    let same: Vec<&str> = METHODS
        .iter()
        .filter(|m| m.name.split_once('.').is_some_and(|(n, _)| n == noun))
        .map(|m| m.name)
        .collect();
    (!same.is_empty()).then(|| format!("the {noun} methods are {}", same.join(", ")))
}

/// Levenshtein distance over bytes (method names are ASCII; a longer input is no typo).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len().abs_diff(b.len()) > MAX_SUGGESTION_EDITS || a.len() > 128 {
        return usize::MAX;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_gets_the_nearest_method_and_noise_gets_none() {
        assert_eq!(nearest("claim.aquire"), Some("claim.acquire"));
        assert_eq!(nearest("job.sumbit"), Some("job.submit"));
        assert_eq!(nearest("integration.lst"), Some("integration.list"));
        assert_eq!(nearest("no.such_method"), None);
        assert_eq!(nearest(&"x".repeat(10_000)), None);
        assert_eq!(
            suggestion("claim.aquire").as_deref(),
            Some("did you mean claim.acquire?")
        );
        let nouns = suggestion("proposal.show").unwrap();
        assert!(nouns.contains("proposal.get"), "{nouns}");
        assert!(!nouns.contains("claim."), "{nouns}");
        assert_eq!(suggestion("zzz.yyy_xxx"), None);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("abc", "abd"), 1);
    }

    #[test]
    fn names_are_unique_and_shaped_like_methods() {
        for (i, a) in METHODS.iter().enumerate() {
            assert!(crate::client::check_method(a.name).is_ok(), "{}", a.name);
            assert!(
                METHODS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
        }
    }
}
