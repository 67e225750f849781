//! The method registry: every `POST /api/v1/<method>` the daemon routes, with its body limit.
//! The router's body limits, the metrics' method labels and `airlock call`'s name check read
//! it; a test proves every entry is dispatched and documented in the README, so a method
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
    /// Every token (the service decides per call: `view`, the holder, the author, a role).
    Agent,
    /// Member tokens holding one of these permissions in some workspace (never a run token).
    Members(&'static [crate::config::Permission]),
}

impl Audience {
    /// Whether `actor` is offered the tool (`None`: a caller without a known token, offered
    /// what any token is).
    pub fn offers(
        self,
        config: &crate::config::Config,
        actor: Option<&crate::engine::service::Actor>,
    ) -> bool {
        use crate::engine::service::Actor;
        match (self, actor) {
            (Audience::Human, _) => false,
            (Audience::Agent, _) => true,
            (Audience::Members(perms), Some(Actor::Member { member_id })) => {
                config.workspaces.values().any(|w| {
                    w.members
                        .get(member_id)
                        .is_some_and(|have| perms.iter().any(|p| have.contains(p)))
                })
            }
            (Audience::Members(_), _) => false,
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

#[cfg(test)]
mod tests {
    use super::*;

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
